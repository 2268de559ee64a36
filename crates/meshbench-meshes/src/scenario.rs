//! The handle the runner, the verifier and the specs pass around ([`Scenario`]): a registered
//! scenario's description, read once, and its parts. Nothing here knows which mesh it is.

use std::path::PathBuf;
use std::sync::LazyLock;

use meshbench_identity::ServerTlsFiles;
use meshbench_lab::LabComponent;
use meshbench_policy::Policy;
use meshbench_topology::Topology;

use crate::adapter::{BoxFuture, ClusterMesh, LocalMesh, MeshAdapter};
use crate::description::{Description, EnforcedPolicy, Enrollment, IdentityCheck, PolicySupport};
use crate::installed::InstalledMesh;
use crate::lab::{Deployment, LabContext, MeshContext};
use crate::pki::MeshPki;
use crate::tool::{tool_version, Tool, Unavailable};
use crate::Error;

struct Registered {
    description: Description,
    adapter: &'static dyn MeshAdapter,
}

/// Every registered scenario with its description, in the registry's order.
static REGISTERED: LazyLock<Vec<Registered>> = LazyLock::new(|| {
    crate::registry::MODULES
        .iter()
        .flat_map(|scenarios| scenarios.iter())
        .map(|adapter| Registered {
            description: adapter.describe(),
            adapter: *adapter,
        })
        .collect()
});

/// A mesh scenario: a handle to its registered description and parts.
#[derive(Clone, Copy)]
pub struct Scenario(&'static Registered);

impl Scenario {
    /// The scenario of `name` (or an alias), if one is registered.
    pub fn parse(name: &str) -> Option<Scenario> {
        Scenario::all().find(|m| m.name() == name || m.aliases().contains(&name))
    }

    /// Every registered scenario, in the registry's order.
    pub fn all() -> impl Iterator<Item = Scenario> {
        REGISTERED.iter().map(Scenario)
    }

    pub fn names() -> Vec<&'static str> {
        Scenario::all().map(|m| m.name()).collect()
    }

    /// No mesh: the reference every overhead is measured against.
    pub fn baseline() -> Scenario {
        Scenario::all()
            .find(|m| m.is_baseline())
            .expect("the registry has a scenario without a mesh")
    }

    pub fn is_baseline(self) -> bool {
        self.enrollment() == Enrollment::Nothing
    }

    pub fn describe(self) -> &'static Description {
        &self.0.description
    }

    pub fn name(self) -> &'static str {
        self.0.description.name
    }

    pub fn aliases(self) -> &'static [&'static str] {
        self.0.description.aliases
    }

    /// One line for the results: what runs, with which TLS and identity checks.
    pub fn description(self) -> &'static str {
        &self.0.description.summary
    }

    pub fn enrollment(self) -> Enrollment {
        self.0.description.enrollment
    }

    pub fn mtls(self) -> bool {
        self.0.description.mtls
    }

    pub fn encrypts_same_node(self) -> bool {
        self.0.description.encrypts_same_node
    }

    pub fn encrypts_within_pod(self) -> bool {
        self.0.description.encrypts_within_pod
    }

    pub fn tunnels_within_node(self) -> bool {
        self.0.description.tunnels_within_node
    }

    pub fn identity(self) -> Option<(IdentityCheck, IdentityCheck)> {
        self.0.description.identity
    }

    pub fn policy(self) -> PolicySupport {
        self.0.description.policy
    }

    /// The SPIFFE ID the mesh gives the workload running as `service_account` in `namespace`.
    pub fn workload_identity(self, namespace: &str, service_account: &str) -> String {
        (self.0.description.identity_format)(namespace, service_account)
    }

    /// Its part for the local lab, if it runs there.
    pub fn local(self) -> Option<&'static dyn LocalMesh> {
        self.0.adapter.local()
    }

    /// Its flavour on a cluster, if it has one yet.
    pub fn cluster(self) -> Option<&'static dyn ClusterMesh> {
        self.0.adapter.cluster()
    }

    /// The mesh as a cluster runs it, when meshbench injects nothing itself.
    pub fn installed(self) -> Option<&'static dyn InstalledMesh> {
        self.cluster().and_then(|c| c.installed())
    }

    /// Whether it enrolls a whole topology on the local lab.
    pub fn can_enroll(self) -> bool {
        self.local().is_some_and(|l| l.enroller().is_some())
    }

    /// Whether it enrolls a whole topology on a cluster (what `verify` needs there).
    pub fn enrolls_on_cluster(self) -> bool {
        self.cluster().is_some_and(|c| c.can_enroll())
    }

    pub fn enforced_policy(
        self,
        policy: &Policy,
        topology: &Topology,
    ) -> Result<EnforcedPolicy, Error> {
        self.0.adapter.enforced_policy(policy, topology)
    }

    /// Why an enrolled caller's own proxy refuses a call before it leaves the pod, if it does.
    pub fn refuses_outbound(self, to_enrolled: bool, to_own_service: bool) -> Option<&'static str> {
        self.0
            .adapter
            .outbound_refusal()
            .and_then(|r| r.refusal(to_enrolled, to_own_service))
    }

    /// Whether its certificates are renewed by rotating its control plane's own CA.
    pub fn renews_by_ca_rotation(self) -> bool {
        self.0.adapter.own_ca().is_some()
    }

    /// The directory of the CA its proxies trust: ours, or its control plane's own.
    pub fn ca_dir(self, pki: &MeshPki) -> PathBuf {
        match self.0.adapter.own_ca() {
            Some(ca) => ca.dir(pki),
            None => pki.dir.clone(),
        }
    }

    /// Rotates the enrolled mesh's own CA (only meshes that [`Scenario::renews_by_ca_rotation`]).
    pub fn rotate_ca<'a>(self, lab: &'a LabContext<'a>) -> BoxFuture<'a, Result<(), Error>> {
        match self.0.adapter.own_ca() {
            Some(ca) => ca.rotate(lab),
            None => {
                let mesh = self.name();
                Box::pin(async move {
                    Err(Error::Unsupported {
                        mesh: mesh.into(),
                        what: "rotating the CA",
                    })
                })
            }
        }
    }

    /// The TLS the server app serves itself under this mesh on the local lab.
    pub fn app_tls(self, ctx: &MeshContext<'_>) -> Option<ServerTlsFiles> {
        self.local().and_then(|l| l.app_tls(ctx))
    }

    /// Every binary it needs on the local lab beyond meshbench's own.
    pub fn tools(self) -> Vec<Tool> {
        self.local().map(|l| l.tools()).unwrap_or_default()
    }

    /// The binary to run, or why the mesh cannot run on the local lab: it must have a local
    /// part, and every tool it needs must be installed.
    pub fn binary(self) -> Result<Option<PathBuf>, Unavailable> {
        if self.local().is_none() {
            return Err(Unavailable {
                mesh: self.name().into(),
                why: "it runs only on a cluster where the mesh is installed (meshbench run \
                      --backend kubernetes)"
                    .into(),
                install: String::new(),
            });
        }
        let mut first = None;
        for tool in self.tools() {
            first.get_or_insert(crate::tool::binary(self.name(), tool)?);
        }
        Ok(first)
    }

    /// Each third-party binary it runs with the version it reports (`envoy --version`,
    /// `consul version`): its first line of output, or why it could not be read.
    pub fn software_versions(self) -> Vec<(&'static str, String)> {
        self.tools()
            .into_iter()
            .map(|tool| (tool.binary, tool_version(tool)))
            .collect()
    }

    /// Whether `self` can enroll a topology, and if not, why.
    pub fn check_enrollable(self) -> Result<(), Error> {
        if self.enrollment() == Enrollment::Nothing || self.can_enroll() {
            return Ok(());
        }
        Err(Error::Unsupported {
            mesh: self.name().into(),
            what: match self.policy() {
                PolicySupport::Unenforceable(why) => why,
                _ => {
                    "enrolling a multi-workload topology (meshbench-sidecar, envoy-sidecar and \
                     the node agents can)"
                }
            },
        })
    }
}

impl PartialEq for Scenario {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name()
    }
}

impl Eq for Scenario {}

impl std::fmt::Debug for Scenario {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Scenario({})", self.name())
    }
}

/// Starts `mesh` around the server app (already running) and says how the client reaches it.
pub async fn deploy(mesh: Scenario, ctx: &MeshContext<'_>) -> Result<Deployment, Error> {
    mesh.binary()?;
    let local = mesh.local().ok_or_else(|| Error::Unsupported {
        mesh: mesh.name().into(),
        what: "the local lab",
    })?;
    local.deploy(ctx).await
}

/// Starts `mesh` for every meshed workload of the lab's topology (the apps already run).
/// The netns backend is required: enrollment means transparent capture.
pub async fn enroll(mesh: Scenario, lab: &LabContext<'_>) -> Result<Vec<LabComponent>, Error> {
    mesh.check_enrollable()?;
    if !lab.net.captures() {
        return Err(Error::Unsupported {
            mesh: mesh.name().into(),
            what: "enrolling workloads without transparent capture (use the netns backend)",
        });
    }
    if mesh.is_baseline() {
        // No mesh: nothing to start beside the apps.
        return Ok(vec![]);
    }
    let enroller = mesh
        .local()
        .and_then(|l| l.enroller())
        .ok_or_else(|| Error::Unsupported {
            mesh: mesh.name().into(),
            what: "enrolling a multi-workload topology",
        })?;
    enroller.enroll(lab).await
}

/// Meshes that can enroll an arbitrary topology on the local lab.
pub fn enrollable() -> Vec<Scenario> {
    Scenario::all().filter(|m| m.can_enroll()).collect()
}

/// Data planes that cannot enforce identity rules: a verification reports them as not
/// verified, which fails it, with the reason.
pub fn unenforceable() -> Vec<Scenario> {
    Scenario::all()
        .filter(|m| matches!(m.policy(), PolicySupport::Unenforceable(_)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_and_alias_parses_back_and_names_are_unique() {
        let names = Scenario::names();
        for name in &names {
            assert_eq!(Scenario::parse(name).unwrap().name(), *name);
        }
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), names.len(), "duplicate scenario names");
        for mesh in Scenario::all() {
            for alias in mesh.aliases() {
                assert_eq!(Scenario::parse(alias), Some(mesh));
                assert!(!names.contains(alias), "{alias} is also a name");
            }
        }
    }

    #[test]
    fn security_answers_agree_with_each_other() {
        for mesh in Scenario::all() {
            assert_eq!(mesh.identity().is_some(), mesh.mtls(), "{}", mesh.name());
            if !mesh.mtls() {
                assert!(!mesh.encrypts_same_node(), "{}", mesh.name());
            }
            if mesh.can_enroll() {
                assert!(
                    !matches!(mesh.policy(), PolicySupport::Unenforceable(_)),
                    "{}",
                    mesh.name()
                );
            }
        }
    }

    /// Every mesh's security answers and parts, one row each: a change to any of them is a
    /// change to what `verify` expects and what the results say, so it shows here first.
    #[test]
    fn the_security_answers_of_every_mesh() {
        use IdentityCheck::{ChainOnly, DnsName, SpiffeId};
        type Checks = Option<(IdentityCheck, IdentityCheck)>;
        type Row = (
            &'static str,
            Enrollment,
            bool,
            bool,
            bool,
            Checks,
            &'static str,
            &'static str,
        );
        const SPIFFE: Checks = Some((SpiffeId, SpiffeId));
        #[rustfmt::skip]
        let table: &[Row] = &[
            // name, enrollment, mtls, same node encrypted, tunnels within node, identity
            // checks, policy, parts (local L, enrolls locally E, cluster C, enrolls on a
            // cluster K, installed I, own CA R, refuses outbound O)
            ("baseline", Enrollment::Nothing, false, false, false, None, "none", "L C K"),
            ("baseline-mtls", Enrollment::InApp, true, true, false, Some((SpiffeId, ChainOnly)), "none", "L C"),
            ("meshbench-sidecar", Enrollment::SidecarPerPod, true, true, false, SPIFFE, "native", "L E C K"),
            ("meshbench-sidecar-no-metrics", Enrollment::SidecarPerPod, true, true, false, SPIFFE, "native", "L C"),
            ("meshbench-sidecar-l4-plaintext", Enrollment::SidecarPerPod, false, false, false, None, "none", "L C"),
            ("meshbench-sidecar-l4-plaintext-no-metrics", Enrollment::SidecarPerPod, false, false, false, None, "none", "L C"),
            ("meshbench-sidecar-l7", Enrollment::SidecarPerPod, true, true, false, SPIFFE, "native", "L C"),
            ("meshbench-sidecar-l7-no-metrics", Enrollment::SidecarPerPod, true, true, false, SPIFFE, "native", "L C"),
            ("meshbench-sidecar-l7-plaintext", Enrollment::SidecarPerPod, false, false, false, None, "none", "L C"),
            ("meshbench-sidecar-l7-plaintext-no-metrics", Enrollment::SidecarPerPod, false, false, false, None, "none", "L C"),
            ("meshbench-node-agent", Enrollment::AgentPerNode, true, true, true, SPIFFE, "native", "L E C K"),
            ("meshbench-node-agent-plain-same-node", Enrollment::AgentPerNode, true, false, false, SPIFFE, "native", "L E C K"),
            ("envoy-sidecar", Enrollment::SidecarPerPod, true, true, false, SPIFFE, "translated", "L E C K"),
            ("haproxy-sidecar", Enrollment::SidecarPerPod, true, true, false, Some((DnsName, ChainOnly)), "unenforceable", "L"),
            ("nginx-sidecar", Enrollment::SidecarPerPod, true, true, false, Some((DnsName, ChainOnly)), "unenforceable", "L"),
            ("consul-connect", Enrollment::SidecarPerPod, true, true, false, SPIFFE, "translated", "L E C I R O"),
            ("istio", Enrollment::SidecarPerPod, true, true, false, SPIFFE, "translated", "C I"),
            ("istio-ambient", Enrollment::AgentPerNode, true, true, true, SPIFFE, "translated", "C I"),
            ("linkerd", Enrollment::SidecarPerPod, true, true, false, Some((DnsName, DnsName)), "translated", "C I"),
            ("cilium", Enrollment::AgentPerNode, false, false, false, None, "translated", "C I"),
        ];
        let names: Vec<&str> = table.iter().map(|row| row.0).collect();
        assert_eq!(
            Scenario::names(),
            names,
            "every registered mesh has a row, in order"
        );
        for &(name, enrollment, mtls, same_node, tunnels, identity, policy, parts) in table {
            let mesh = Scenario::parse(name).unwrap();
            let policy_kind = match mesh.policy() {
                PolicySupport::None => "none",
                PolicySupport::Native => "native",
                PolicySupport::Translated(_) => "translated",
                PolicySupport::Unenforceable(_) => "unenforceable",
            };
            let has = [
                ("L", mesh.local().is_some()),
                ("E", mesh.can_enroll()),
                ("C", mesh.cluster().is_some()),
                ("K", mesh.enrolls_on_cluster()),
                ("I", mesh.installed().is_some()),
                ("R", mesh.renews_by_ca_rotation()),
                ("O", mesh.refuses_outbound(false, false).is_some()),
            ];
            let has: Vec<&str> = has.iter().filter(|(_, on)| *on).map(|(p, _)| *p).collect();
            assert_eq!(
                (
                    mesh.enrollment(),
                    mesh.mtls(),
                    mesh.encrypts_same_node(),
                    mesh.tunnels_within_node(),
                    mesh.identity(),
                    policy_kind,
                    has.join(" ").as_str()
                ),
                (enrollment, mtls, same_node, tunnels, identity, policy, parts),
                "{name}"
            );
        }
    }
}
