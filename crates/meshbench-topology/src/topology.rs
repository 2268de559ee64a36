//! The topology of an experiment, independent of the platform that realizes it: nodes,
//! namespaces, service accounts, workloads (with replicas, placement and whether they are
//! meshed) and services. The local lab's backends and (later) the Kubernetes engine turn the
//! same model into processes or manifests; nothing here knows about either.

use std::collections::BTreeSet;

/// A topology that names something wrong; `field` says where (`workloads.server.node`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("topology: {field}: {message}")]
pub struct Error {
    pub field: String,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    pub nodes: Vec<String>,
    pub workloads: Vec<Workload>,
    pub services: Vec<Service>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workload {
    pub name: String,
    pub namespace: String,
    pub service_account: String,
    /// The node its pods run on.
    pub node: String,
    pub replicas: u32,
    /// Whether the mesh under test enrolls it (sidecar injected, captured by the node agent).
    pub meshed: bool,
}

/// A stable name and port in front of a workload's pods, as a Kubernetes ClusterIP service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Service {
    pub name: String,
    pub namespace: String,
    pub workload: String,
    /// The port clients dial.
    pub port: u16,
    /// The port the workload's app listens on.
    pub target_port: u16,
}

/// One replica of a workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pod {
    /// `<workload>-<replica>`, unique in the topology.
    pub name: String,
    pub workload: Workload,
}

impl Topology {
    /// Two nodes, a `client` workload on `node-1`, a `server` workload on `server_node`, one
    /// replica each, every service account named after its workload, and `service` (port 80)
    /// in front of the server's `target_port`: the shape of E1's experiments.
    pub fn client_server(
        namespace: &str,
        (client, server): (&str, &str),
        server_node: &str,
        service: &str,
        target_port: u16,
    ) -> Topology {
        let workload = |name: &str, node: &str| Workload {
            name: name.into(),
            namespace: namespace.into(),
            service_account: name.into(),
            node: node.into(),
            replicas: 1,
            meshed: true,
        };
        Topology {
            nodes: vec!["node-1".into(), "node-2".into()],
            workloads: vec![workload(client, "node-1"), workload(server, server_node)],
            services: vec![Service {
                name: service.into(),
                namespace: namespace.into(),
                workload: server.into(),
                port: 80,
                target_port,
            }],
        }
    }

    /// Checks names and references; every error names the offending entry.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |field: &str, message: String| Error {
            field: field.to_owned(),
            message,
        };
        if self.nodes.is_empty() {
            return Err(bad("nodes", "a topology needs at least one node".into()));
        }
        let mut names = BTreeSet::new();
        for node in &self.nodes {
            check_name("nodes", node)?;
            if !names.insert(node.as_str()) {
                return Err(bad("nodes", format!("node {node:?} is declared twice")));
            }
        }
        let mut workloads = BTreeSet::new();
        for w in &self.workloads {
            let field = format!("workloads.{}", w.name);
            check_name(&field, &w.name)?;
            check_name(&format!("{field}.namespace"), &w.namespace)?;
            check_name(&format!("{field}.service_account"), &w.service_account)?;
            if !self.nodes.contains(&w.node) {
                return Err(bad(
                    &format!("{field}.node"),
                    format!(
                        "unknown node {:?} (nodes: {})",
                        w.node,
                        self.nodes.join(", ")
                    ),
                ));
            }
            if w.replicas == 0 {
                return Err(bad(
                    &format!("{field}.replicas"),
                    "must be at least 1".into(),
                ));
            }
            if !workloads.insert(w.name.as_str()) {
                return Err(bad(
                    &field,
                    format!("workload {:?} is declared twice", w.name),
                ));
            }
        }
        let mut services = BTreeSet::new();
        for s in &self.services {
            let field = format!("services.{}", s.name);
            check_name(&field, &s.name)?;
            let Some(w) = self.workload(&s.workload) else {
                return Err(bad(
                    &format!("{field}.workload"),
                    format!("unknown workload {:?}", s.workload),
                ));
            };
            if w.namespace != s.namespace {
                return Err(bad(
                    &format!("{field}.namespace"),
                    format!(
                        "{:?} differs from its workload's namespace {:?}",
                        s.namespace, w.namespace
                    ),
                ));
            }
            if s.port == 0 || s.target_port == 0 {
                return Err(bad(&field, "ports must be non-zero".into()));
            }
            if !services.insert((s.namespace.as_str(), s.name.as_str())) {
                return Err(bad(
                    &field,
                    format!("service {:?} is declared twice", s.name),
                ));
            }
        }
        Ok(())
    }

    pub fn workload(&self, name: &str) -> Option<&Workload> {
        self.workloads.iter().find(|w| w.name == name)
    }

    pub fn service(&self, name: &str) -> Option<&Service> {
        self.services.iter().find(|s| s.name == name)
    }

    /// Every pod, workloads in declaration order, replicas numbered from 1.
    pub fn pods(&self) -> Vec<Pod> {
        self.workloads
            .iter()
            .flat_map(|w| {
                (1..=w.replicas).map(move |i| Pod {
                    name: format!("{}-{i}", w.name),
                    workload: w.clone(),
                })
            })
            .collect()
    }

    pub fn pod(&self, name: &str) -> Option<Pod> {
        self.pods().into_iter().find(|p| p.name == name)
    }

    /// The first pod of a workload (the one a single-replica service resolves to).
    pub fn first_pod(&self, workload: &str) -> Option<Pod> {
        self.pods()
            .into_iter()
            .find(|p| p.workload.name == workload)
    }
}

/// Names become parts of interface, namespace and file names: DNS-label characters only.
fn check_name(field: &str, name: &str) -> Result<(), Error> {
    let ok = !name.is_empty()
        && name.len() <= 40
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(Error {
            field: field.to_owned(),
            message: format!(
                "{name:?} is not a valid name (lowercase letters, digits and '-', at most 40)"
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_nodes() -> Topology {
        Topology::client_server("default", ("client", "server"), "node-2", "echo", 8080)
    }

    #[test]
    fn a_valid_topology_lists_its_pods() {
        let t = two_nodes();
        t.validate().unwrap();
        let pods: Vec<_> = t.pods().into_iter().map(|p| p.name).collect();
        assert_eq!(pods, ["client-1", "server-1"]);
    }

    #[test]
    fn errors_name_the_field() {
        let mut t = two_nodes();
        t.workloads[1].node = "node-9".into();
        let e = t.validate().unwrap_err().to_string();
        assert!(
            e.contains("workloads.server.node") && e.contains("node-9"),
            "{e}"
        );
        let mut t = two_nodes();
        t.services[0].workload = "nope".into();
        let e = t.validate().unwrap_err().to_string();
        assert!(e.contains("services.echo.workload"), "{e}");
        let mut t = two_nodes();
        t.workloads[0].name = "Client_A".into();
        assert!(t.validate().is_err());
    }
}
