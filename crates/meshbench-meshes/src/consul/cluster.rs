//! Consul on a cluster (consul-k8s): its connect injector adds the sidecar to pods annotated
//! `consul.hashicorp.com/connect-inject`, in transparent proxy mode, and its controller turns
//! custom resources into the same config entries the local lab writes through the API. So the
//! policy is translated once (`intentions`) and each config entry becomes its resource
//! (`ServiceIntentions`, `ServiceDefaults`, `Mesh`, `ProxyDefaults`), fields in the CRDs'
//! lower camel case.
//!
//! consul-k8s's Go module is refused by the module proxy, so its CRDs cannot be installed
//! here: these resources are golden-tested, and the config entries they carry are the ones the
//! local lab's real Consul accepts.

use serde_json::{Map, Value};

use crate::installed::{
    metadata, present, resource_name, ComponentClass, Documented, Found, FoundPod, Installation,
    InstalledMesh, InstalledSite, LabelSelector, MeshEnrollment, Signature, Translation,
};
use crate::Error;

pub(crate) struct ConsulOnCluster;

const GROUP_VERSION: &str = "consul.hashicorp.com/v1alpha1";

impl InstalledMesh for ConsulOnCluster {
    fn signature(&self) -> Signature {
        Signature {
            crds: &[
                "serviceintentions.consul.hashicorp.com",
                "servicedefaults.consul.hashicorp.com",
            ],
            control_plane: &[LabelSelector(&[("app", "consul"), ("component", "server")])],
            node_agents: &[],
            config_maps: &[],
            injector_webhooks: &[],
        }
    }

    fn interpret(&self, found: &Found) -> Installation {
        if let Err(why) = present(found, "Consul") {
            return Installation::absent(why);
        }
        let server = found.control_plane.iter().find(|p| p.ready);
        Installation::running(server, "consul", "connect, transparent proxy")
    }

    fn translate(&self, site: &InstalledSite<'_>) -> Result<Translation, Error> {
        let translation = super::intentions::translate(site.policy, site.topology)?;
        let namespace_of_service = |service: &str| -> Option<String> {
            site.enrolled()
                .find(|w| w.service_account == service)
                .map(|w| site.namespace(&w.namespace).to_owned())
        };
        // Mesh-wide entries and the catch-all go where the run's first namespace is.
        let home = site
            .cluster_namespaces()
            .into_iter()
            .next()
            .unwrap_or_else(|| "default".into());
        let mut resources = vec![];
        for entry in &translation.entries {
            let kind = entry["Kind"].as_str().unwrap_or_default();
            let name = entry["Name"].as_str().unwrap_or_default();
            let mut spec = Map::new();
            for (key, value) in entry.as_object().into_iter().flatten() {
                if key != "Kind" && key != "Name" {
                    spec.insert(lower_camel(key), lower_camel_keys(value));
                }
            }
            let (crd_kind, resource, namespace) = match kind {
                "service-intentions" => {
                    spec.insert("destination".into(), serde_json::json!({ "name": name }));
                    let resource = if name == "*" {
                        "mb-all-services".to_owned()
                    } else {
                        resource_name(&["mb", name])
                    };
                    let ns = namespace_of_service(name).unwrap_or_else(|| home.clone());
                    ("ServiceIntentions", resource, ns)
                }
                "service-defaults" => {
                    let ns = namespace_of_service(name).unwrap_or_else(|| home.clone());
                    ("ServiceDefaults", name.to_owned(), ns)
                }
                // Consul's singletons keep their names.
                "mesh" => ("Mesh", "mesh".to_owned(), home.clone()),
                "proxy-defaults" => ("ProxyDefaults", "global".to_owned(), home.clone()),
                other => {
                    return Err(Error::Inexpressible {
                        mesh: super::NAME.into(),
                        why: format!("config entry kind {other:?} has no consul-k8s resource"),
                    })
                }
            };
            resources.push(serde_json::json!({
                "apiVersion": GROUP_VERSION,
                "kind": crd_kind,
                "metadata": metadata(&resource, Some(&namespace)),
                "spec": spec,
            }));
        }
        let mut enrollment = MeshEnrollment::default();
        for w in &site.topology.workloads {
            let inject = if w.meshed { "true" } else { "false" };
            enrollment.annotate_pods(&w.name, "consul.hashicorp.com/connect-inject", inject);
            if w.meshed {
                enrollment.annotate_pods(&w.name, "consul.hashicorp.com/transparent-proxy", "true");
                // Consul names a workload by its service: the service account, as locally.
                enrollment.annotate_pods(
                    &w.name,
                    "consul.hashicorp.com/connect-service",
                    &w.service_account,
                );
            }
        }
        let mut enforced = translation.enforced;
        enforced.notes.push(
            "Mesh and ProxyDefaults are Consul-wide: applying them changes the whole \
             datacenter's mesh settings, as the local lab's agent does"
                .into(),
        );
        Ok(Translation {
            resources,
            enrollment,
            enforced,
        })
    }

    fn component(&self, pod: &FoundPod, container: &str) -> Option<ComponentClass> {
        if pod.labels.get("app").map(String::as_str) == Some("consul") {
            Some(ComponentClass::ControlPlane)
        } else if container == "consul-dataplane" || container == "envoy-sidecar" {
            Some(ComponentClass::Sidecar)
        } else {
            None
        }
    }

    fn documented(&self) -> Documented {
        Documented {
            wire: "TLS 1.3 between Envoy sidecars (the mesh entry pins it), same node or not",
            notes: &[
                "transparent sidecars reach mesh destinations only: a call the intentions deny \
                 is dropped by the caller's own sidecar",
            ],
        }
    }
}

/// A Consul config entry's key as consul-k8s's CRDs spell it: the leading capitals lowered,
/// but for the last of a run followed by a lower-case letter (`TLSMinVersion` ->
/// `tlsMinVersion`, `HTTP` -> `http`, `MutualTLSMode` -> `mutualTLSMode`). Keys already in
/// lower case (a proxy's `Config` map) are kept.
fn lower_camel(key: &str) -> String {
    let chars: Vec<char> = key.chars().collect();
    let run = chars.iter().take_while(|c| c.is_ascii_uppercase()).count();
    let lowered = if run > 1 && run < chars.len() {
        run - 1
    } else {
        run
    };
    chars
        .iter()
        .enumerate()
        .map(|(i, c)| {
            if i < lowered {
                c.to_ascii_lowercase()
            } else {
                *c
            }
        })
        .collect()
}

fn lower_camel_keys(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (lower_camel(k), lower_camel_keys(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(lower_camel_keys).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_consul_k8s_spelling() {
        for (entry, crd) in [
            ("TLSMinVersion", "tlsMinVersion"),
            ("HTTP", "http"),
            ("MutualTLSMode", "mutualTLSMode"),
            (
                "AllowEnablingPermissiveMutualTLS",
                "allowEnablingPermissiveMutualTLS",
            ),
            ("PathExact", "pathExact"),
            ("protocol", "protocol"),
        ] {
            assert_eq!(lower_camel(entry), crd);
        }
    }
}
