//! A mesh on a cluster: what it adds to a cell's pods, described without Kubernetes types
//! (`meshbench-kube` renders it into pod specs). Each mesh module implements
//! [`crate::ClusterMesh`] beside its [`crate::MeshAdapter`] and returns it from `cluster`; a
//! mesh without one is not available on a cluster yet.
//!
//! Paths are relative to the pod's config directory, against which every role resolves them:
//! `pki/...` are the pod's own credentials (its workload's SVID, the CA certificate, the
//! policy), which the platform gives a pod whose additions ask for its identity; the rest are
//! configs the additions carry.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use meshbench_identity::{ClientTlsFiles, SpiffeId};
use meshbench_netlab::SidecarCapture;
use meshbench_policy::Policy;
use meshbench_topology::{Pod, Topology};

use crate::{spiffe_id, Error};

/// Where a pod finds its credentials, relative to its config directory.
pub const POD_PKI_DIR: &str = "pki";
/// The config directory of every pod on a cluster.
pub const CONFIG_DIR_IN_POD: &str = "/etc/meshbench";

/// What a mesh needs to know of the topology it runs in on a cluster: its services as pods
/// dial them, and meshbench's CA service.
#[derive(Clone, Copy)]
pub struct ClusterSite<'a> {
    pub topology: &'a Topology,
    /// Each service's address as pods dial it (cluster IP and port).
    pub services: &'a BTreeMap<String, SocketAddr>,
    /// meshbench's CA service (the control plane of our data plane), as pods dial it.
    pub ca_endpoint: SocketAddr,
    /// The experiment's policy, for meshes that translate it.
    pub policy: &'a Policy,
}

impl ClusterSite<'_> {
    /// The port `pod`'s app listens on: its service's target port.
    pub fn app_port(&self, pod: &Pod) -> u16 {
        self.topology
            .services
            .iter()
            .find(|s| s.workload == pod.workload.name)
            .map_or(crate::Ports::APP, |s| s.target_port)
    }
}

/// One client/server cell on a cluster, as a mesh needs to know it.
pub struct ClusterCell<'a> {
    pub site: ClusterSite<'a>,
    pub client: &'a Pod,
    pub server: &'a Pod,
    /// The service in front of the server.
    pub service: &'a str,
}

/// A pod's credentials, as paths in its config directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodSvid {
    pub id: String,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl ClusterCell<'_> {
    /// `pod`'s SVID (the files `MeshPki` wrote for its workload, under `pki/`).
    pub fn svid(pod: &Pod) -> PodSvid {
        let w = &pod.workload;
        let stem = crate::pki::svid_file_stem(&w.namespace, &w.service_account);
        PodSvid {
            id: spiffe_id(&w.namespace, &w.service_account),
            cert: pki_file(&format!("{stem}.pem")),
            key: pki_file(&format!("{stem}.key")),
        }
    }

    /// The CA certificate every pod with an identity trusts.
    pub fn ca() -> PathBuf {
        pki_file("ca.pem")
    }

    /// The experiment's policy.
    pub fn policy() -> PathBuf {
        pki_file("policy.yaml")
    }

    /// The service's URL as the client dials it by name (the platform makes pods resolve
    /// the cell's services).
    pub fn service_url(&self, scheme: &str) -> Result<String, Error> {
        let service =
            self.site
                .topology
                .service(self.service)
                .ok_or_else(|| Error::Unsupported {
                    mesh: self.service.to_owned(),
                    what: "a service the cell's topology does not have",
                })?;
        Ok(format!("{scheme}://{}:{}/", service.name, service.port))
    }
}

fn pki_file(name: &str) -> PathBuf {
    PathBuf::from(POD_PKI_DIR).join(name)
}

/// The PKI files of the run a pod with `pod`'s identity is given: its own SVID, the CA
/// certificate and the policy, by their names in `MeshPki`'s directory.
pub fn identity_files(pod: &Pod) -> Vec<String> {
    let w = &pod.workload;
    let stem = crate::pki::svid_file_stem(&w.namespace, &w.service_account);
    vec![
        format!("{stem}.pem"),
        format!("{stem}.key"),
        "ca.pem".into(),
        "policy.yaml".into(),
    ]
}

/// The command that checks a role's state from its config (`meshbench <role> --config F
/// --check`): a startup probe that holds the next containers back until the role is ready.
pub(crate) fn check_command<R: meshbench_role::RoleConfig>(
    config: &std::path::Path,
) -> Vec<String> {
    std::iter::once("meshbench".to_owned())
        .chain(R::command_line(config))
        .chain(["--check".to_owned()])
        .collect()
}

/// How the client reaches the server through the mesh.
#[derive(Debug, Clone)]
pub struct ClusterEntry {
    pub url: String,
    /// The client's own TLS (paths in its pod), when the app does mTLS itself.
    pub client_tls: Option<ClientTlsFiles>,
}

/// A container a mesh adds to a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddedContainer {
    pub name: &'static str,
    /// Another program of the image (with `args` as its arguments); `None`: meshbench.
    pub program: Option<&'static str>,
    pub args: Vec<String>,
    /// The config files it reads: name in the config directory -> contents.
    pub files: BTreeMap<String, String>,
    pub run_as_user: Option<u32>,
    /// Linux capabilities beyond the runtime's defaults (`NET_ADMIN` for capture rules).
    pub capabilities: Vec<&'static str>,
    /// How the results name its role (`sidecar`).
    pub role: &'static str,
    /// A port that accepts once it has started (the next containers wait for it).
    pub ready_port: Option<u16>,
    /// Or a command (run in the container) that succeeds once it has started.
    pub ready_command: Option<Vec<String>>,
    /// Where the pod's shared scratch directory (empty at start, writable, gone with the
    /// pod) is mounted in this container: how a certificate agent hands the proxy beside it
    /// its renewed SVID.
    pub scratch: Option<&'static str>,
}

/// What a mesh adds to one pod.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodAdditions {
    /// Run to their end before the pod's other containers start (capture rules).
    pub init: Vec<AddedContainer>,
    /// Run beside the app from before it starts until after it ends (proxies, as
    /// Kubernetes' sidecar containers: a pod whose app has ended completes).
    pub containers: Vec<AddedContainer>,
    /// Whether the pod is given its workload's identity ([`identity_files`]).
    pub identity: bool,
    /// Labels and annotations that ask a mesh the cluster runs to enroll the pod (its
    /// injector's, say).
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

/// A pod already running on a cluster, with its addresses: what a mesh that configures its
/// node agents by address (as ztunnel is, by its control plane) needs.
#[derive(Debug, Clone, Copy)]
pub struct PlacedPod<'a> {
    pub pod: &'a Pod,
    /// The pod's own address.
    pub ip: IpAddr,
    /// Its node's address (where that node's agent takes tunnels).
    pub host_ip: IpAddr,
    /// Whether the mesh serves it (a cell's client and server; an enrolled topology's
    /// meshed workloads).
    pub enrolled: bool,
}

/// A node agent a mesh runs on one node, on the node's own network: its main container
/// (meshbench with `args`; the node's capture, say), the containers started before it (the
/// agent), and the run's credentials it is given under `pki/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeAgentPod {
    /// The topology's node.
    pub node: String,
    pub args: Vec<String>,
    pub files: BTreeMap<String, String>,
    /// The main container's capabilities beyond the runtime's defaults.
    pub capabilities: Vec<&'static str>,
    /// A command that succeeds once the main container is ready.
    pub ready_command: Vec<String>,
    pub additions: PodAdditions,
    pub credentials: Vec<String>,
}

/// The client of an app doing mTLS itself: its SVID, and the server's SPIFFE ID to expect.
pub(crate) fn app_client_tls(cell: &ClusterCell<'_>) -> Result<ClientTlsFiles, Error> {
    let client = ClusterCell::svid(cell.client);
    let server = ClusterCell::svid(cell.server);
    Ok(ClientTlsFiles {
        cert: Some(client.cert),
        key: Some(client.key),
        ca: ClusterCell::ca(),
        expect_server_id: Some(SpiffeId::parse(&server.id)?),
    })
}

/// The init container that writes `capture`'s rules into the pod's network namespace, as
/// Istio's does, before any other container starts.
pub(crate) fn capture_additions(capture: SidecarCapture) -> PodAdditions {
    let rules = format!("{CONFIG_DIR_IN_POD}/capture.rules");
    PodAdditions {
        init: vec![AddedContainer {
            name: "meshbench-capture",
            program: Some(meshbench_image::IPTABLES),
            args: vec!["iptables-restore".into(), rules],
            files: [("capture.rules".to_owned(), capture.restore_file())].into(),
            run_as_user: Some(0),
            capabilities: vec!["NET_ADMIN", "NET_RAW"],
            role: "capture",
            ready_port: None,
            ready_command: None,
            scratch: None,
        }],
        containers: vec![],
        identity: false,
        ..PodAdditions::default()
    }
}

/// A topology placed at the local lab's addresses, as a cluster site: what the tests that
/// compare the two platforms' plans start from.
#[cfg(test)]
pub(crate) mod same_addresses {
    use std::collections::BTreeMap;
    use std::net::SocketAddr;

    use meshbench_netlab::AddressPlan;
    use meshbench_policy::Policy;
    use meshbench_topology::Topology;

    use super::ClusterSite;

    /// The CA service's address in these sites.
    pub(crate) const CA_ENDPOINT: &str = "10.96.0.99:15012";

    pub(crate) struct E3AtLabAddresses {
        pub topology: Topology,
        pub addresses: AddressPlan,
        services: BTreeMap<String, SocketAddr>,
        policy: Policy,
    }

    impl E3AtLabAddresses {
        /// E3's application with the calculator, the experimenter and the security checker
        /// enrolled, one pod each (the lab's services lead to one pod each), at the netns
        /// lab's addresses.
        pub(crate) fn new() -> Self {
            let topology = meshbench_topology::e3::topology(
                &["calculator", "experimenter", "security-checker"],
                crate::Ports::APP,
            );
            assert!(topology.workloads.iter().all(|w| w.replicas == 1));
            let addresses = AddressPlan::netns(&topology).unwrap();
            let services = addresses
                .services
                .iter()
                .map(|s| (s.name.clone(), s.addr))
                .collect();
            let policy = Policy::from_yaml(&meshbench_topology::e3::zero_trust_policy(
                crate::TRUST_DOMAIN,
            ))
            .unwrap();
            E3AtLabAddresses {
                topology,
                addresses,
                services,
                policy,
            }
        }

        /// The cluster's view: its services at the lab's addresses.
        pub(crate) fn site(&self) -> ClusterSite<'_> {
            ClusterSite {
                topology: &self.topology,
                services: &self.services,
                ca_endpoint: CA_ENDPOINT.parse().unwrap(),
                policy: &self.policy,
            }
        }
    }
}
