//! What meshbench puts on a cluster, as typed objects: the labels that find every object of a
//! run or a cell again, and the namespaces, service accounts, config maps, services and pods
//! of a cell. Everything is applied server-side with the field manager `meshbench`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, ConfigMap, ConfigMapProjection, Container, EmptyDirVolumeSource,
    ExecAction, HostAlias, KeyToPath, Namespace, NodeAffinity, NodeSelector,
    NodeSelectorRequirement, NodeSelectorTerm, Pod, PodSecurityContext, PodSpec, Probe,
    ProjectedVolumeSource, Secret, SecretProjection, SecurityContext, Service, ServiceAccount,
    ServicePort, ServiceSpec, TCPSocketAction, Volume, VolumeMount, VolumeProjection,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::ByteString;
use kube::api::{Patch, PatchParams};
use kube::{Api, Resource};
use meshbench_meshes::{AddedContainer, PodAdditions, POD_PKI_DIR};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::Error;

pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "meshbench");
/// The run an object belongs to.
pub const RUN: &str = "meshbench.io/run";
/// The cell an object belongs to (not on objects the run's cells share).
pub const CELL: &str = "meshbench.io/cell";
/// The topology's workload a pod runs, which its service selects.
pub const WORKLOAD: &str = meshbench_meshes::WORKLOAD_LABEL;
/// The field manager of every apply.
pub const FIELD_MANAGER: &str = "meshbench";
/// Where a pod finds its role's config (and, with a mesh, its keys).
pub const CONFIG_DIR: &str = meshbench_meshes::CONFIG_DIR_IN_POD;
/// The proxy user, whose group may read the pod's keys.
const PROXY_UID: u32 = 1337;
/// The app's container in every pod meshbench renders (the one whose log and stats are read).
pub const APP_CONTAINER: &str = "meshbench";
/// The host label the placement pins pods with.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// A label selector for every object of `run`, or of one of its cells.
pub fn selector(run: &str, cell: Option<&str>) -> String {
    let mut s = format!("{}={},{RUN}={run}", MANAGED_BY.0, MANAGED_BY.1);
    if let Some(cell) = cell {
        s.push_str(&format!(",{CELL}={cell}"));
    }
    s
}

/// Metadata for an object of `run` (and `cell`), with extra labels.
pub fn meta(
    name: &str,
    namespace: Option<&str>,
    run: &str,
    cell: Option<&str>,
    extra: &[(&str, &str)],
) -> ObjectMeta {
    let mut labels = BTreeMap::from([
        (MANAGED_BY.0.to_owned(), MANAGED_BY.1.to_owned()),
        (RUN.to_owned(), run.to_owned()),
    ]);
    if let Some(cell) = cell {
        labels.insert(CELL.to_owned(), cell.to_owned());
    }
    for (k, v) in extra {
        labels.insert((*k).to_owned(), (*v).to_owned());
    }
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: namespace.map(str::to_owned),
        labels: Some(labels),
        ..ObjectMeta::default()
    }
}

/// Server-side applies `object` (its name from its metadata), forcing meshbench's ownership
/// of every field it sets.
pub async fn apply<K>(api: &Api<K>, object: &K) -> Result<K, Error>
where
    K: Resource + Clone + Serialize + DeserializeOwned + std::fmt::Debug,
    K::DynamicType: Default,
{
    let name = object.meta().name.clone().unwrap_or_default();
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(object),
    )
    .await
    .map_err(Error::api(format!(
        "applying {} {name}",
        K::kind(&Default::default())
    )))
}

pub fn namespace(name: &str, run: &str) -> Namespace {
    Namespace {
        metadata: meta(name, None, run, None, &[]),
        ..Namespace::default()
    }
}

pub fn service_account(name: &str, namespace: &str, run: &str) -> ServiceAccount {
    ServiceAccount {
        metadata: meta(name, Some(namespace), run, None, &[]),
        // The apps never call the API server.
        automount_service_account_token: Some(false),
        ..ServiceAccount::default()
    }
}

/// A config map of files, mounted at [`CONFIG_DIR`].
pub fn config_map(
    name: &str,
    namespace: &str,
    run: &str,
    cell: &str,
    files: BTreeMap<String, String>,
) -> ConfigMap {
    ConfigMap {
        metadata: meta(name, Some(namespace), run, Some(cell), &[]),
        data: Some(files),
        ..ConfigMap::default()
    }
}

/// A ClusterIP service in front of `workload`'s pods of `cell`.
pub fn service(
    name: &str,
    namespace: &str,
    run: &str,
    cell: &str,
    workload: &str,
    port: u16,
    target_port: u16,
) -> Service {
    Service {
        metadata: meta(name, Some(namespace), run, Some(cell), &[]),
        spec: Some(ServiceSpec {
            selector: Some(BTreeMap::from([
                (WORKLOAD.to_owned(), workload.to_owned()),
                (CELL.to_owned(), cell.to_owned()),
            ])),
            ports: Some(vec![ServicePort {
                name: Some("http".into()),
                port: port.into(),
                target_port: Some(IntOrString::Int(target_port.into())),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

/// How a pod's main container says it is ready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ready {
    /// Its port accepts (a TCP readiness probe).
    Port(u16),
    /// Its command succeeds (an exec startup probe: run until it first succeeds).
    Command(Vec<String>),
    /// It runs to its end and is never restarted (a load generator).
    RunsToEnd,
}

/// How a pod's main container runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodShape {
    pub ready: Ready,
    /// On the node's own network (a node agent), not a network of its own.
    pub host_network: bool,
    /// Linux capabilities beyond the runtime's defaults.
    pub capabilities: Vec<&'static str>,
}

impl PodShape {
    /// A pod serving on `port`, on its own network.
    pub fn serving(port: u16) -> Self {
        PodShape {
            ready: Ready::Port(port),
            host_network: false,
            capabilities: vec![],
        }
    }

    /// A pod that runs to its end.
    pub fn runs_to_end() -> Self {
        PodShape {
            ready: Ready::RunsToEnd,
            host_network: false,
            capabilities: vec![],
        }
    }
}

/// One of a cell's pods: meshbench in `role` reading `config` from its config map.
pub struct PodPlan<'a> {
    pub name: &'a str,
    pub namespace: &'a str,
    pub run: &'a str,
    pub cell: &'a str,
    pub workload: &'a str,
    pub service_account: &'a str,
    /// The cluster node it must run on.
    pub node: &'a str,
    pub image: &'a str,
    /// meshbench's arguments (the image's entrypoint is meshbench).
    pub args: Vec<String>,
    pub config_map: &'a str,
    /// How its main container runs and says it is ready, and where.
    pub shape: &'a PodShape,
    /// Services by name, as the pod resolves them without a DNS add-on.
    pub host_aliases: Vec<HostAlias>,
    /// What the scenario's mesh adds (its files are in the config map).
    pub additions: &'a PodAdditions,
    /// The pod's secret of credentials and the files of it the pod sees under `pki/`.
    pub secret: Option<(&'a str, Vec<String>)>,
}

impl PodPlan<'_> {
    pub fn render(&self) -> Pod {
        let runs_to_end = self.shape.ready == Ready::RunsToEnd;
        let mut metadata = meta(
            self.name,
            Some(self.namespace),
            self.run,
            Some(self.cell),
            &[(WORKLOAD, self.workload)],
        );
        // What asks a mesh the cluster runs to enroll the pod; meshbench's own labels win.
        let mut labels = self.additions.labels.clone();
        labels.extend(metadata.labels.take().unwrap_or_default());
        metadata.labels = Some(labels);
        if !self.additions.annotations.is_empty() {
            metadata.annotations = Some(self.additions.annotations.clone());
        }
        Pod {
            metadata,
            spec: Some(PodSpec {
                // Affinity, not nodeName: the scheduler then says why a pod cannot be placed.
                affinity: Some(Affinity {
                    node_affinity: Some(NodeAffinity {
                        required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                            node_selector_terms: vec![NodeSelectorTerm {
                                match_expressions: Some(vec![NodeSelectorRequirement {
                                    key: HOSTNAME_LABEL.into(),
                                    operator: "In".into(),
                                    values: Some(vec![self.node.to_owned()]),
                                }]),
                                ..NodeSelectorTerm::default()
                            }],
                        }),
                        ..NodeAffinity::default()
                    }),
                    ..Affinity::default()
                }),
                service_account_name: Some(self.service_account.to_owned()),
                host_network: self.shape.host_network.then_some(true),
                automount_service_account_token: Some(false),
                host_aliases: (!self.host_aliases.is_empty()).then(|| self.host_aliases.clone()),
                restart_policy: Some(if runs_to_end { "Never" } else { "Always" }.into()),
                termination_grace_period_seconds: Some(2),
                // The proxy user reads the pod's keys through its group.
                security_context: Some(PodSecurityContext {
                    fs_group: Some(PROXY_UID.into()),
                    ..PodSecurityContext::default()
                }),
                // Capture first, then the proxies as sidecar containers (started before the
                // app, stopped after it, and not keeping a finished pod running).
                init_containers: (!self.additions.init.is_empty()
                    || !self.additions.containers.is_empty())
                .then(|| {
                    let init = self.additions.init.iter().map(|c| self.added(c, false));
                    let proxies = self
                        .additions
                        .containers
                        .iter()
                        .map(|c| self.added(c, true));
                    init.chain(proxies).collect()
                }),
                containers: vec![Container {
                    name: APP_CONTAINER.into(),
                    image: Some(self.image.to_owned()),
                    image_pull_policy: Some("IfNotPresent".into()),
                    args: Some(self.args.clone()),
                    volume_mounts: Some(vec![VolumeMount {
                        name: "config".into(),
                        mount_path: CONFIG_DIR.into(),
                        read_only: Some(true),
                        ..VolumeMount::default()
                    }]),
                    readiness_probe: readiness_probe(&self.shape.ready),
                    startup_probe: startup_command_probe(&self.shape.ready),
                    security_context: (!self.shape.capabilities.is_empty()).then(|| {
                        SecurityContext {
                            capabilities: Some(Capabilities {
                                add: Some(
                                    self.shape
                                        .capabilities
                                        .iter()
                                        .map(|c| (*c).to_owned())
                                        .collect(),
                                ),
                                ..Capabilities::default()
                            }),
                            ..SecurityContext::default()
                        }
                    }),
                    ..Container::default()
                }],
                volumes: Some(self.volumes()),
                ..PodSpec::default()
            }),
            ..Pod::default()
        }
    }

    /// The config directory, and the scratch directory where an added container asks for it.
    fn volumes(&self) -> Vec<Volume> {
        let mut volumes = vec![self.config_volume()];
        let added = self.additions.init.iter().chain(&self.additions.containers);
        if added.into_iter().any(|c| c.scratch.is_some()) {
            volumes.push(Volume {
                name: SCRATCH_VOLUME.into(),
                empty_dir: Some(EmptyDirVolumeSource {
                    medium: Some("Memory".into()),
                    ..EmptyDirVolumeSource::default()
                }),
                ..Volume::default()
            });
        }
        volumes
    }

    /// The config map and the pod's credentials (under `pki/`) in one directory.
    fn config_volume(&self) -> Volume {
        let mut sources = vec![VolumeProjection {
            config_map: Some(ConfigMapProjection {
                name: self.config_map.to_owned(),
                ..ConfigMapProjection::default()
            }),
            ..VolumeProjection::default()
        }];
        if let Some((secret, files)) = &self.secret {
            sources.push(VolumeProjection {
                secret: Some(SecretProjection {
                    name: (*secret).to_owned(),
                    items: Some(
                        files
                            .iter()
                            .map(|f| KeyToPath {
                                key: f.clone(),
                                path: format!("{POD_PKI_DIR}/{f}"),
                                // Keys: the owner (root) and the proxy user's group.
                                mode: Some(0o440),
                                ..KeyToPath::default()
                            })
                            .collect(),
                    ),
                    ..SecretProjection::default()
                }),
                ..VolumeProjection::default()
            });
        }
        Volume {
            name: "config".into(),
            projected: Some(ProjectedVolumeSource {
                sources: Some(sources),
                default_mode: Some(0o444),
                ..ProjectedVolumeSource::default()
            }),
            ..Volume::default()
        }
    }

    fn added(&self, c: &AddedContainer, sidecar: bool) -> Container {
        let (command, args) = match c.program {
            Some(program) => (Some(vec![program.to_owned()]), c.args.clone()),
            None => (None, c.args.clone()),
        };
        Container {
            name: c.name.to_owned(),
            image: Some(self.image.to_owned()),
            image_pull_policy: Some("IfNotPresent".into()),
            command,
            args: Some(args),
            volume_mounts: Some(
                std::iter::once(VolumeMount {
                    name: "config".into(),
                    mount_path: CONFIG_DIR.into(),
                    read_only: Some(true),
                    ..VolumeMount::default()
                })
                .chain(c.scratch.map(|path| VolumeMount {
                    name: SCRATCH_VOLUME.into(),
                    mount_path: path.into(),
                    ..VolumeMount::default()
                }))
                .collect(),
            ),
            restart_policy: sidecar.then(|| "Always".into()),
            startup_probe: startup_probe(c),
            security_context: Some(SecurityContext {
                run_as_user: c.run_as_user.map(i64::from),
                capabilities: (!c.capabilities.is_empty()).then(|| Capabilities {
                    add: Some(c.capabilities.iter().map(|c| (*c).to_owned()).collect()),
                    ..Capabilities::default()
                }),
                ..SecurityContext::default()
            }),
            ..Container::default()
        }
    }
}

/// A port is checked for the pod's whole life (a TCP connect costs the container next to
/// nothing).
fn readiness_probe(ready: &Ready) -> Option<Probe> {
    match ready {
        Ready::Port(port) => Some(Probe {
            tcp_socket: Some(TCPSocketAction {
                port: IntOrString::Int((*port).into()),
                ..TCPSocketAction::default()
            }),
            period_seconds: Some(1),
            ..Probe::default()
        }),
        Ready::Command(_) | Ready::RunsToEnd => None,
    }
}

/// A command is run only until it first succeeds (the container is ready from then on): run
/// every second for the pod's life, it was charged to the container it runs in, about 0.01
/// cores a node agent's pod never used.
fn startup_command_probe(ready: &Ready) -> Option<Probe> {
    match ready {
        Ready::Command(command) => Some(Probe {
            exec: Some(ExecAction {
                command: Some(command.clone()),
            }),
            period_seconds: Some(1),
            failure_threshold: Some(60),
            ..Probe::default()
        }),
        Ready::Port(_) | Ready::RunsToEnd => None,
    }
}

/// The name of a pod's scratch volume (an emptyDir in memory).
const SCRATCH_VOLUME: &str = "scratch";

/// How the kubelet tells an added container has started: its port accepts, or its ready
/// command succeeds; the next containers start only then.
fn startup_probe(c: &AddedContainer) -> Option<Probe> {
    let probe = |p: Probe| Probe {
        period_seconds: Some(1),
        failure_threshold: Some(30),
        ..p
    };
    if let Some(port) = c.ready_port {
        return Some(probe(Probe {
            tcp_socket: Some(TCPSocketAction {
                port: IntOrString::Int(port.into()),
                ..TCPSocketAction::default()
            }),
            ..Probe::default()
        }));
    }
    c.ready_command.as_ref().map(|command| {
        probe(Probe {
            exec: Some(ExecAction {
                command: Some(command.clone()),
            }),
            ..Probe::default()
        })
    })
}

/// A secret of credentials (`file name -> bytes`).
pub fn secret(
    name: &str,
    namespace: &str,
    run: &str,
    cell: &str,
    files: BTreeMap<String, Vec<u8>>,
) -> Secret {
    Secret {
        metadata: meta(name, Some(namespace), run, Some(cell), &[]),
        data: Some(
            files
                .into_iter()
                // Keys allow `[-._a-zA-Z0-9]`, which the PKI's file names use.
                .map(|(k, v)| (k, ByteString(v)))
                .collect(),
        ),
        ..Secret::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_object_carries_the_run_and_its_cell() {
        let m = meta("x", Some("ns"), "r1", Some("c1"), &[(WORKLOAD, "echo")]);
        let labels = m.labels.unwrap();
        assert_eq!(labels[MANAGED_BY.0], "meshbench");
        assert_eq!(labels[RUN], "r1");
        assert_eq!(labels[CELL], "c1");
        assert_eq!(labels[WORKLOAD], "echo");
        assert_eq!(
            selector("r1", Some("c1")),
            "app.kubernetes.io/managed-by=meshbench,meshbench.io/run=r1,meshbench.io/cell=c1"
        );
    }

    #[test]
    fn a_node_agents_pod_is_on_the_nodes_network_and_checked_only_until_it_started() {
        let shape = PodShape {
            ready: Ready::Command(vec!["meshbench".into(), "--check".into()]),
            host_network: true,
            capabilities: vec!["NET_ADMIN"],
        };
        let plan = PodPlan {
            name: "agent",
            namespace: "ns",
            run: "r",
            cell: "c",
            workload: "meshbench-node-agent",
            service_account: "default",
            node: "node-1",
            image: "meshbench:0.1.0",
            args: vec!["proxy".into()],
            config_map: "cm",
            shape: &shape,
            host_aliases: vec![],
            additions: &PodAdditions::default(),
            secret: None,
        };
        let spec = plan.render().spec.unwrap();
        assert_eq!(spec.host_network, Some(true));
        assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
        let main = &spec.containers[0];
        assert!(main.readiness_probe.is_none());
        let startup = main.startup_probe.as_ref().unwrap();
        assert_eq!(
            startup.exec.as_ref().unwrap().command.as_deref(),
            Some(&["meshbench".to_owned(), "--check".to_owned()][..])
        );
        let added = main
            .security_context
            .as_ref()
            .and_then(|c| c.capabilities.as_ref())
            .and_then(|c| c.add.clone());
        assert_eq!(added, Some(vec!["NET_ADMIN".to_owned()]));
    }

    #[test]
    fn a_pod_that_runs_to_its_end_is_not_restarted_and_has_no_probe() {
        let plan = PodPlan {
            name: "gen",
            namespace: "ns",
            run: "r",
            cell: "c",
            workload: "load-generator",
            service_account: "load-generator",
            node: "node-1",
            image: "meshbench:0.1.0",
            args: vec!["load".into()],
            config_map: "cm",
            shape: &PodShape::runs_to_end(),
            host_aliases: vec![],
            additions: &PodAdditions::default(),
            secret: None,
        };
        let spec = plan.render().spec.unwrap();
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        assert!(spec.containers[0].readiness_probe.is_none());
        assert!(spec.host_aliases.is_none());
    }
}
