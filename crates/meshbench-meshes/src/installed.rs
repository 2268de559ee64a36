//! A mesh the cluster already runs (Istio, Istio ambient, Linkerd, Cilium, Consul), as opposed
//! to one meshbench brings ([`crate::ClusterMesh`]'s pod additions): meshbench injects
//! nothing. It finds the mesh (which resources and control-plane pods say it is installed,
//! which version and mode), asks it to enroll the run's workloads its own way (labels and
//! annotations on namespaces and pods), and translates the experiment's policy into the
//! mesh's own resources. A rule the mesh cannot express is reported in the translation's
//! notes and in the policy as enforced, never silently dropped.
//!
//! Everything here is data without Kubernetes types: resources are JSON objects
//! (`apiVersion`, `kind`, `metadata`, `spec`), so that golden tests pin them and
//! `meshbench-kube` detects, applies and waits.

use std::collections::BTreeMap;

use meshbench_policy::Policy;
use meshbench_topology::{Topology, Workload};
use serde_json::Value;

use crate::{EnforcedPolicy, Error};

/// The label every pod of a workload carries on a cluster (its selector).
pub const WORKLOAD_LABEL: &str = "meshbench.io/workload";

/// What tells that a mesh is installed: the CRDs it defines and where its control plane and
/// node agents run (pods with these labels, in any namespace).
#[derive(Debug, Clone, Copy)]
pub struct Signature {
    /// CRDs the mesh installs (`<plural>.<group>`); the first one found says it is there.
    pub crds: &'static [&'static str],
    /// Its control plane's pods, each selector finding some.
    pub control_plane: &'static [LabelSelector],
    /// Its node agents' pods (ztunnel, the Cilium agent).
    pub node_agents: &'static [LabelSelector],
    /// ConfigMaps whose data tells its mode.
    pub config_maps: &'static [ConfigMapRef],
    /// Its injector's MutatingWebhookConfigurations, by name: where the control plane runs
    /// outside the cluster (Istio's external control plane), they are what is left of it.
    pub injector_webhooks: &'static [&'static str],
}

/// Pods by labels: every `(key, value)` must match (Kubernetes' equality-based selector).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LabelSelector(pub &'static [(&'static str, &'static str)]);

impl LabelSelector {
    /// Whether a pod with `labels` is selected.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0
            .iter()
            .all(|(key, value)| labels.get(*key).map(String::as_str) == Some(*value))
    }

    /// The pod of `pods` to read a component's settings from: the first selected one that
    /// is ready, else the first selected one.
    pub fn pick<'a>(&self, pods: &'a [FoundPod]) -> Option<&'a FoundPod> {
        let selected = || pods.iter().filter(|p| self.matches(&p.labels));
        selected().find(|p| p.ready).or(selected().next())
    }
}

/// As the API server reads it in a list's `labelSelector`: `key=value,key=value`.
impl std::fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (at, (key, value)) in self.0.iter().enumerate() {
            let comma = if at == 0 { "" } else { "," };
            write!(f, "{comma}{key}={value}")?;
        }
        Ok(())
    }
}

/// A ConfigMap by name, in one namespace or in any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfigMapRef {
    /// `None`: whichever namespace the mesh was installed in.
    pub namespace: Option<&'static str>,
    pub name: &'static str,
}

impl ConfigMapRef {
    pub const fn in_any_namespace(name: &'static str) -> Self {
        ConfigMapRef {
            namespace: None,
            name,
        }
    }
}

impl std::fmt::Display for ConfigMapRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace.unwrap_or("*"), self.name)
    }
}

/// A ConfigMap detection found.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct FoundConfigMap {
    pub namespace: String,
    pub name: String,
}

/// A pod detection found, as the mesh needs to know it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FoundPod {
    pub namespace: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// Container name -> image reference.
    pub images: BTreeMap<String, String>,
    /// Container name -> its environment's literal values (what the chart set; values from
    /// references are left out).
    pub env: BTreeMap<String, BTreeMap<String, String>>,
    pub ready: bool,
    /// The node it runs on (empty until scheduled).
    pub node: String,
}

impl FoundPod {
    /// The environment of its container `container` (or of its first one).
    pub fn env_of(&self, container: &str) -> Option<&BTreeMap<String, String>> {
        self.env.get(container).or(self.env.values().next())
    }

    /// The version in the image tag of its container `container` (or of its first one).
    pub fn image_version(&self, container: &str) -> Option<String> {
        self.images
            .get(container)
            .or(self.images.values().next())
            .and_then(|image| image_tag(image))
    }
}

/// What detection found on the cluster for one [`Signature`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Found {
    /// The signature's CRDs present, with the versions each serves.
    pub crds: BTreeMap<String, Vec<String>>,
    pub control_plane: Vec<FoundPod>,
    pub node_agents: Vec<FoundPod>,
    /// Each ConfigMap found -> its data.
    pub config_maps: BTreeMap<FoundConfigMap, BTreeMap<String, String>>,
    /// Injector webhook configuration name -> where each of its webhooks calls (`url`, or
    /// `service namespace/name`).
    pub injector_webhooks: BTreeMap<String, Vec<String>>,
}

impl Found {
    /// The data of the first ConfigMap found for `reference`.
    pub fn config_map(&self, reference: ConfigMapRef) -> Option<&BTreeMap<String, String>> {
        self.config_maps
            .iter()
            .find(|(found, _)| {
                found.name == reference.name
                    && reference.namespace.is_none_or(|ns| ns == found.namespace)
            })
            .map(|(_, data)| data)
    }
}

/// A mesh as installed on a cluster: what results record in their environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installation {
    /// Its version, from its control plane's image tag (or a label that carries it).
    pub version: Option<String>,
    /// Its mode, as the mesh names it (`sidecar`, `ambient`, `encryption: wireguard`...).
    pub mode: Option<String>,
    /// Where its control plane runs (Istio's root namespace).
    pub namespace: Option<String>,
    /// Istio's revision, where its control plane has one.
    pub revision: Option<String>,
    /// Why the scenario cannot run on this cluster, if it cannot.
    pub unusable: Option<String>,
}

impl Installation {
    /// A control plane found running in `pod` (if one is), its version from its container
    /// `container`'s image tag.
    pub(crate) fn running(
        pod: Option<&FoundPod>,
        container: &str,
        mode: impl Into<String>,
    ) -> Self {
        Installation {
            version: pod.and_then(|p| p.image_version(container)),
            mode: Some(mode.into()),
            namespace: pod.map(|p| p.namespace.clone()),
            revision: None,
            unusable: None,
        }
    }

    pub(crate) fn absent(why: impl Into<String>) -> Self {
        Installation {
            version: None,
            mode: None,
            namespace: None,
            revision: None,
            unusable: Some(why.into()),
        }
    }
}

/// The run on the cluster, as a translation needs it.
#[derive(Clone, Copy)]
pub struct InstalledSite<'a> {
    pub topology: &'a Topology,
    pub policy: &'a Policy,
    /// The topology's namespace -> the cluster's.
    pub namespaces: &'a BTreeMap<String, String>,
    pub installation: &'a Installation,
}

impl InstalledSite<'_> {
    /// The cluster's namespace of a topology namespace (itself when the run maps none).
    pub fn namespace<'n>(&'n self, topology_namespace: &'n str) -> &'n str {
        self.namespaces
            .get(topology_namespace)
            .map_or(topology_namespace, String::as_str)
    }

    /// A policy principal (`<td>/ns/<ns>/sa/<sa>`) with its namespace moved to the cluster's.
    pub fn principal(&self, principal: &str) -> String {
        let Some((td, rest)) = principal.split_once("/ns/") else {
            return principal.to_owned();
        };
        match rest.split_once('/') {
            Some((ns, tail)) => format!("{td}/ns/{}/{tail}", self.namespace(ns)),
            None => principal.to_owned(),
        }
    }

    /// The topology's meshed workloads.
    pub fn enrolled(&self) -> impl Iterator<Item = &Workload> {
        self.topology.workloads.iter().filter(|w| w.meshed)
    }

    /// The port `workload`'s app serves (its service's target port).
    pub fn app_port(&self, workload: &Workload) -> u16 {
        self.topology
            .services
            .iter()
            .find(|s| s.workload == workload.name)
            .map_or(crate::Ports::APP, |s| s.target_port)
    }

    /// The namespaces (the cluster's) the topology's workloads live in.
    pub fn cluster_namespaces(&self) -> Vec<String> {
        let mut all: Vec<String> = self
            .topology
            .workloads
            .iter()
            .map(|w| self.namespace(&w.namespace).to_owned())
            .collect();
        all.sort();
        all.dedup();
        all
    }
}

/// Labels and annotations that enroll the run's workloads in the mesh (or keep them out),
/// each on the pods (or services) it concerns, never on a namespace: the run's namespaces
/// outlive a cell, and the next cell's scenario may be another.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MeshEnrollment {
    /// Workload name -> labels of its pods.
    pub pod_labels: BTreeMap<String, BTreeMap<String, String>>,
    /// Workload name -> annotations of its pods.
    pub pod_annotations: BTreeMap<String, BTreeMap<String, String>>,
    /// Service name -> labels (Istio's `istio.io/use-waypoint`).
    pub service_labels: BTreeMap<String, BTreeMap<String, String>>,
    /// Workloads whose rules the mesh enforces at a waypoint in front of them: their node
    /// agent takes only the waypoint's identity, so a caller presenting its own directly is
    /// refused by design, whatever the rules say of it.
    pub waypointed: std::collections::BTreeSet<String>,
}

impl MeshEnrollment {
    /// What enrolls `workload`'s pods.
    pub fn additions(&self, workload: &str) -> crate::PodAdditions {
        crate::PodAdditions {
            labels: self.pod_labels.get(workload).cloned().unwrap_or_default(),
            annotations: self
                .pod_annotations
                .get(workload)
                .cloned()
                .unwrap_or_default(),
            ..crate::PodAdditions::default()
        }
    }

    pub(crate) fn label_pods(&mut self, workload: &str, key: &str, value: &str) {
        self.pod_labels
            .entry(workload.to_owned())
            .or_default()
            .insert(key.to_owned(), value.to_owned());
    }

    pub(crate) fn annotate_pods(&mut self, workload: &str, key: &str, value: &str) {
        self.pod_annotations
            .entry(workload.to_owned())
            .or_default()
            .insert(key.to_owned(), value.to_owned());
    }
}

/// The experiment's policy as the mesh's resources.
#[derive(Debug, Clone)]
pub struct Translation {
    /// Resources to apply, in order (each with `apiVersion`, `kind`, `metadata.name`, and
    /// `metadata.namespace` unless cluster-scoped).
    pub resources: Vec<Value>,
    pub enrollment: MeshEnrollment,
    /// What the mesh enforces (the policy as written unless a note says otherwise).
    pub enforced: EnforcedPolicy,
}

impl Translation {
    /// The translation as a reader (or `kubectl apply -f`) takes it: the notes and the
    /// enrollment as comments, then every resource as a YAML document.
    pub fn to_yaml(&self) -> String {
        let mut out = String::new();
        for note in &self.enforced.notes {
            out.push_str(&format!("# note: {note}\n"));
        }
        let e = &self.enrollment;
        for (what, map) in [
            ("pod labels", &e.pod_labels),
            ("pod annotations", &e.pod_annotations),
            ("service labels", &e.service_labels),
        ] {
            for (name, pairs) in map {
                let pairs: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
                out.push_str(&format!("# {what} of {name}: {}\n", pairs.join(", ")));
            }
        }
        for resource in &self.resources {
            out.push_str("---\n");
            // A JSON value always has a YAML form.
            out.push_str(&serde_yaml_ng::to_string(resource).unwrap_or_default());
        }
        out
    }
}

/// Which part of E1's resource breakdown a container of the mesh belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ComponentClass {
    /// In a workload's pod (Istio's `istio-proxy`, Linkerd's `linkerd-proxy`).
    Sidecar,
    NodeAgent,
    Waypoint,
    ControlPlane,
}

impl ComponentClass {
    /// How results name the role.
    pub fn role(self) -> &'static str {
        match self {
            ComponentClass::Sidecar => "sidecar",
            ComponentClass::NodeAgent => "node-agent",
            ComponentClass::Waypoint => "waypoint",
            ComponentClass::ControlPlane => "control-plane",
        }
    }
}

/// What the mesh is documented to do that verification must expect of it (E3's findings
/// among them), each with the sentence the report gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Documented {
    /// What the data path between nodes looks like on the wire.
    pub wire: &'static str,
    /// Behaviour a reader must know to judge a verification (may be empty).
    pub notes: &'static [&'static str],
}

/// The mesh's own CA as its proxies use it, found from its pods: where the verifier asks it
/// for SVIDs of the run's workloads (each with its service-account token), and which trust
/// root the workloads get. What lets the identity checks present the mesh's real
/// certificates, valid and expired, to its proxies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentityService {
    /// The certificate API it speaks.
    pub protocol: IdentityProtocol,
    /// `host:port`, as the node agents are told.
    pub address: String,
    /// The name its serving certificate carries.
    pub server_name: String,
    /// The audience its tokens must be for.
    pub token_audience: String,
    /// The cluster name it reviews tokens with (Istio's `ClusterID`).
    pub cluster_id: String,
    /// The ConfigMap holding the trust root, and its key.
    pub root_config_map: (String, String),
    /// The namespace of that ConfigMap: `None` for each workload's own (Istio publishes its
    /// root into every namespace), or the control plane's (Linkerd's trust anchors).
    pub root_namespace: Option<String>,
    /// Where a destination's proxy takes HBONE: on the pod's own address (ambient's in-pod
    /// redirection), at this port.
    pub hbone_port_in_pod: Option<u16>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdentityProtocol {
    /// `istio.v1.auth.IstioCertificateService/CreateCertificate`, SPIFFE IDs.
    Istio,
    /// `io.linkerd.proxy.identity.Identity/Certify`, identities as DNS names; the proxies
    /// take mTLS on the pod's own address with the destination's identity as the SNI.
    Linkerd,
}

/// A mesh the cluster runs. See the module's header.
pub trait InstalledMesh: Sync {
    /// What tells that it is installed.
    fn signature(&self) -> Signature;

    /// The installation `found` describes, or why the scenario cannot run.
    fn interpret(&self, found: &Found) -> Installation;

    /// Its enrollment and resources for the run.
    fn translate(&self, site: &InstalledSite<'_>) -> Result<Translation, Error>;

    /// The class of a container of `pod`, if it is the mesh's: an injected proxy in a
    /// workload's pod, a node agent, a waypoint or the control plane.
    fn component(&self, pod: &FoundPod, container: &str) -> Option<ComponentClass>;

    /// Its documented behaviour.
    fn documented(&self) -> Documented;

    /// The port of a destination pod where its proxy takes the mesh's connections from other
    /// proxies, on the pod's own address (ambient's HBONE 15008 under in-pod redirection,
    /// Linkerd's inbound 4143): what a pod's call to itself crosses on its loopback, the
    /// legs between the app and the proxy aside. `None`: not known.
    fn inbound_port_in_pod(&self) -> Option<u16> {
        None
    }

    /// The ports of a pod where the kubelet probes the mesh's proxy (its health and status
    /// endpoints, plaintext by design): no request of the application crosses them, so the
    /// wire evidence leaves their connections out, as it does the CA's.
    fn probe_ports(&self) -> &'static [u16] {
        &[]
    }

    /// Its CA, as its proxies found in `found` use it, where the verifier can be issued
    /// SVIDs by it (`None`: the identity checks cannot present its certificates).
    fn identity_service(&self, _found: &Found) -> Option<IdentityService> {
        None
    }
}

/// `mesh`'s translation of `policy` for `topology` placed on no cluster yet: the topology's
/// own namespace names, the mesh's default revision. What the policy as enforced, `mesh
/// render` and the golden tests read.
pub fn translate_unplaced(
    mesh: &dyn InstalledMesh,
    policy: &Policy,
    topology: &Topology,
) -> Result<Translation, Error> {
    let installation = Installation {
        version: None,
        mode: None,
        namespace: None,
        revision: None,
        unusable: None,
    };
    mesh.translate(&InstalledSite {
        topology,
        policy,
        namespaces: &BTreeMap::new(),
        installation: &installation,
    })
}

/// `metadata` for a resource of the run.
pub(crate) fn metadata(name: &str, namespace: Option<&str>) -> Value {
    let mut meta = serde_json::json!({ "name": name });
    if let Some(ns) = namespace {
        meta["namespace"] = Value::from(ns);
    }
    meta
}

/// A selector of `workload`'s pods.
pub(crate) fn workload_selector(workload: &str) -> Value {
    serde_json::json!({ "matchLabels": { WORKLOAD_LABEL: workload } })
}

/// A resource name from parts: lower case, `-` for anything else, at most 63 characters.
pub(crate) fn resource_name(parts: &[&str]) -> String {
    let joined = parts.join("-").to_ascii_lowercase();
    let mut name: String = joined
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    name.truncate(63);
    name.trim_matches('-').to_owned()
}

/// The version in an image reference's tag (`docker.io/istio/pilot:1.31.0` -> `1.31.0`).
fn image_tag(image: &str) -> Option<String> {
    let without_digest = image.split('@').next()?;
    let last = without_digest.rsplit('/').next()?;
    last.split_once(':').map(|(_, tag)| tag.to_owned())
}

/// Every topology workload whose namespace and name a policy's scope selects.
pub(crate) fn selects(namespace: Option<&str>, workload: Option<&str>, w: &Workload) -> bool {
    namespace.is_none_or(|n| n == w.namespace) && workload.is_none_or(|n| n == w.name)
}

/// The detection verdict shared by meshes with CRDs and a control plane.
pub(crate) fn present(found: &Found, mesh: &str) -> Result<(), String> {
    if found.crds.is_empty() {
        return Err(format!(
            "{mesh} is not installed on this cluster (none of its CRDs)"
        ));
    }
    if found.control_plane.is_empty() {
        return Err(format!(
            "{mesh}'s CRDs are installed but its control plane is not running"
        ));
    }
    if !found.control_plane.iter().any(|p| p.ready) {
        let names: Vec<String> = found
            .control_plane
            .iter()
            .map(|p| format!("{}/{}", p.namespace, p.name))
            .collect();
        return Err(format!(
            "{mesh}'s control plane is not ready ({})",
            names.join(", ")
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_selector_reads_as_the_api_server_reads_it_and_matches_every_term() {
        let selector = LabelSelector(&[("app", "consul"), ("component", "server")]);
        assert_eq!(selector.to_string(), "app=consul,component=server");
        let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert!(selector.matches(&labels(&[
            ("app", "consul"),
            ("component", "server"),
            ("extra", "x")
        ])));
        assert!(!selector.matches(&labels(&[("app", "consul")])));
        assert!(!selector.matches(&labels(&[("app", "consul"), ("component", "client")])));
    }

    #[test]
    fn a_config_map_is_found_by_name_in_its_namespace_or_any() {
        let mut found = Found::default();
        let at = |namespace: &str| FoundConfigMap {
            namespace: namespace.into(),
            name: "cilium-config".into(),
        };
        found.config_maps.insert(
            at("kube-system"),
            [("k".to_string(), "v".to_string())].into(),
        );
        let anywhere = ConfigMapRef::in_any_namespace("cilium-config");
        assert_eq!(anywhere.to_string(), "*/cilium-config");
        assert!(found.config_map(anywhere).is_some());
        let elsewhere = ConfigMapRef {
            namespace: Some("cilium"),
            name: "cilium-config",
        };
        assert!(found.config_map(elsewhere).is_none());
        assert!(found
            .config_map(ConfigMapRef::in_any_namespace("other"))
            .is_none());
    }

    #[test]
    fn names_and_tags() {
        assert_eq!(resource_name(&["Allow", "app/calc"]), "allow-app-calc");
        assert_eq!(
            image_tag("docker.io/istio/pilot:1.31.0"),
            Some("1.31.0".into())
        );
        assert_eq!(image_tag("localhost:5000/cilium/cilium"), None);
        assert_eq!(
            image_tag("quay.io/cilium/cilium:v1.20.2@sha256:abc"),
            Some("v1.20.2".into())
        );
    }

    #[test]
    fn principals_move_to_the_clusters_namespaces() {
        let topology = meshbench_topology::e3::topology(&[], crate::Ports::APP);
        let policy = Policy::from_yaml("{}").unwrap();
        let namespaces = BTreeMap::from([("default".to_owned(), "meshbench-r1".to_owned())]);
        let installation = Installation::absent("test");
        let site = InstalledSite {
            topology: &topology,
            policy: &policy,
            namespaces: &namespaces,
            installation: &installation,
        };
        assert_eq!(
            site.principal("cluster.local/ns/default/sa/client"),
            "cluster.local/ns/meshbench-r1/sa/client"
        );
        assert_eq!(
            site.principal("cluster.local/ns/app/sa/x"),
            "cluster.local/ns/app/sa/x"
        );
        assert_eq!(site.principal("*"), "*");
    }
}
