//! The mesh seam: what every mesh the lab can run answers, behind one trait, and the handle
//! ([`Mesh`]) the runner, the verifier and the specs pass around. A mesh is one module
//! (`src/<mesh>/`) implementing [`MeshAdapter`] for each scenario it offers, plus one line in
//! [`crate::registry`]; nothing outside its module matches on which mesh it is.
//!
//! Invariants every adapter keeps:
//! - `deploy` and `enroll` start only what the mesh needs (its proxies, agents, control
//!   plane) around apps that already run, and return every component they started, so the
//!   caller's teardown stops them however the cell ends;
//! - what a proxy reads (configs, keys) goes through [`crate::LabContext::write`] and the run's
//!   proxy area, never into the results directory the proxy user may not reach;
//! - the answers about security (`mtls`, `encrypts_same_node`, `identity`, `policy`) are what
//!   the verifier checks on the wire and in the reachability matrix, so they must be true of
//!   the deployed configuration, not of the product in general.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;

use meshbench_identity::ServerTlsFiles;
use meshbench_lab::LabComponent;
use meshbench_policy::Policy;
use meshbench_topology::Topology;

use crate::cluster::ClusterMesh;
use crate::configs::IdentityCheck;
use crate::{Deployment, Error, LabContext, MeshContext, MeshPki};

/// A future an adapter returns (the trait is used as `dyn`).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

/// What [`MeshAdapter::deploy`] returns.
pub type Deploying<'a> = BoxFuture<'a, Result<Deployment, Error>>;

/// What [`MeshAdapter::enroll`] returns: every component it started.
pub type Enrolling<'a> = BoxFuture<'a, Result<Vec<LabComponent>, Error>>;

/// The answer of a mesh that cannot enroll a whole topology.
pub(crate) fn cannot_enroll(mesh: &'static str) -> Enrolling<'static> {
    Box::pin(async move {
        Err(Error::Unsupported {
            mesh: mesh.into(),
            what: "enrolling a multi-workload topology",
        })
    })
}

/// What a mesh puts beside a workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enrollment {
    /// Nothing: the apps talk directly.
    Nothing,
    /// No proxy; the apps do TLS themselves.
    InApp,
    /// A proxy in every meshed pod, capturing its traffic both ways.
    SidecarPerPod,
    /// An agent on every node holding its pods' identities (ztunnel's shape).
    AgentPerNode,
}

/// How the lab's policy (Istio-style PeerAuthentication and AuthorizationPolicy) reaches the
/// mesh's data plane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicySupport {
    /// No mesh, no policy: the negative control.
    None,
    /// The data plane reads our policy file as it is.
    Native,
    /// Translated into the data plane's own configuration (named).
    Translated(&'static str),
    /// The data plane cannot express it; the reason.
    Unenforceable(&'static str),
}

/// What a mesh enforces of a policy ([`MeshAdapter::enforced_policy`]).
#[derive(Debug, Clone)]
pub struct EnforcedPolicy {
    /// The policy as enforced, in our own language.
    pub policy: Policy,
    /// Each difference from the policy as written, or how it was expressed, as a sentence.
    pub notes: Vec<String>,
}

/// A third-party binary a mesh runs, and how to install it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tool {
    pub binary: &'static str,
    pub install: &'static str,
    /// The arguments that print its version.
    pub version_args: &'static [&'static str],
}

impl Tool {
    pub const fn new(
        binary: &'static str,
        install: &'static str,
        version_args: &'static [&'static str],
    ) -> Self {
        Tool {
            binary,
            install,
            version_args,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("mesh {mesh} is unavailable: {why}")]
pub struct Unavailable {
    pub mesh: String,
    pub why: String,
    /// The command that installs what is missing (empty when no command can).
    pub install: String,
}

impl Unavailable {
    /// `tool` is not on the PATH.
    pub fn missing_tool(mesh: &str, tool: Tool) -> Self {
        Unavailable {
            mesh: mesh.into(),
            why: format!(
                "`{}` is not installed; install it with: {}",
                tool.binary, tool.install
            ),
            install: tool.install.into(),
        }
    }
}

/// One scenario of a mesh. See the module's invariants.
pub trait MeshAdapter: Sync {
    /// The name specs, `--scenarios` and results use.
    fn name(&self) -> &'static str;

    /// Other names a spec may use.
    fn aliases(&self) -> &'static [&'static str] {
        &[]
    }

    /// One line for the results: what runs, with which TLS and identity checks.
    fn description(&self) -> String;

    /// The binary it needs beyond meshbench's own, if any.
    fn tool(&self) -> Option<Tool> {
        None
    }

    /// Every binary it needs beyond meshbench's own (a control plane and its proxy, say).
    fn tools(&self) -> Vec<Tool> {
        self.tool().into_iter().collect()
    }

    /// Why the local lab cannot run it whatever is installed, if it cannot (a mesh that
    /// runs only where a cluster has it installed).
    fn local_lab(&self) -> Result<(), &'static str> {
        Ok(())
    }

    fn enrollment(&self) -> Enrollment;

    /// Whether client and server talk mutually authenticated TLS.
    fn mtls(&self) -> bool;

    /// Whether traffic between two workloads on one node is encrypted (Cilium's choice is not
    /// to).
    fn encrypts_same_node(&self) -> bool {
        self.mtls()
    }

    /// Whether a node's agent tunnels same-node traffic to itself, so that the encrypted leg
    /// is on the node's loopback rather than on a pod's interface.
    fn tunnels_within_node(&self) -> bool {
        false
    }

    /// What each side verifies about its peer beyond the chain (client of server, server of
    /// client); `None` without mTLS. What the verifier can prove is bounded by it.
    fn identity(&self) -> Option<(IdentityCheck, IdentityCheck)> {
        None
    }

    fn policy(&self) -> PolicySupport;

    /// The SPIFFE ID the mesh gives the workload running as `service_account` in
    /// `namespace` (ours by default; a third-party control plane names its own).
    fn workload_identity(&self, namespace: &str, service_account: &str) -> String {
        crate::spiffe_id(namespace, service_account)
    }

    /// Why an enrolled caller's own proxy refuses a call before it leaves the pod, if it
    /// does: to a service outside the mesh (`to_enrolled` false), or to the caller's own
    /// service. Most meshes pass the first through (Istio's ALLOW_ANY) and carry the second.
    fn refuses_outbound(&self, _to_enrolled: bool, _to_own_service: bool) -> Option<&'static str> {
        None
    }

    /// The directory of the CA this mesh's proxies trust, as [`CertificateAuthority::init`]
    /// keeps one: the identity checks issue their certificates from it. Ours by default; a
    /// control plane with a CA of its own keeps it there once enrolled.
    ///
    /// [`CertificateAuthority::init`]: meshbench_identity::CertificateAuthority::init
    fn ca_dir(&self, pki: &MeshPki) -> PathBuf {
        pki.dir.clone()
    }

    /// Whether the mesh's certificates cannot be made to live seconds (a control plane's
    /// minimum lifetime), so that rotation under load is checked by rotating its CA
    /// ([`MeshAdapter::rotate_ca`]) rather than by short-lived SVIDs.
    fn renews_by_ca_rotation(&self) -> bool {
        false
    }

    /// Rotates the enrolled mesh's CA to a new root, so that every proxy renews its
    /// certificate; only meshes that [`MeshAdapter::renews_by_ca_rotation`].
    fn rotate_ca<'a>(&'a self, _lab: &'a LabContext<'a>) -> BoxFuture<'a, Result<(), Error>> {
        let mesh = self.name();
        Box::pin(async move {
            Err(Error::Unsupported {
                mesh: mesh.into(),
                what: "rotating the CA",
            })
        })
    }

    /// Our policy as this mesh enforces it for `topology`'s enrolled workloads, in our own
    /// language, with what it could not express as written: `verify` expects what this
    /// returns, so a rule the mesh cannot express is reported, never silently dropped. Meshes
    /// that read or translate the policy whole keep it as it is.
    fn enforced_policy(
        &self,
        policy: &Policy,
        _topology: &Topology,
    ) -> Result<EnforcedPolicy, Error> {
        Ok(EnforcedPolicy {
            policy: policy.clone(),
            notes: vec![],
        })
    }

    /// The TLS the server app serves itself under this mesh (only when the app does mTLS).
    fn app_tls(&self, _ctx: &MeshContext<'_>) -> Option<ServerTlsFiles> {
        None
    }

    /// Starts the mesh around a client/server cell whose server app already runs, and says
    /// how the client reaches the server.
    fn deploy<'a>(&'a self, ctx: &'a MeshContext<'a>) -> Deploying<'a>;

    /// Whether [`MeshAdapter::enroll`] can enroll an arbitrary topology.
    fn can_enroll(&self) -> bool {
        false
    }

    /// Starts the mesh for every meshed workload of the lab's topology (its apps already run).
    fn enroll<'a>(&'a self, _lab: &'a LabContext<'a>) -> Enrolling<'a> {
        cannot_enroll(self.name())
    }

    /// The mesh on a cluster, if it runs on one yet.
    fn on_cluster(&self) -> Option<&dyn ClusterMesh> {
        None
    }
}

/// A mesh scenario: a handle to its registered adapter.
#[derive(Clone, Copy)]
pub struct Mesh(&'static dyn MeshAdapter);

impl Mesh {
    /// The scenario of `name` (or an alias), if one is registered.
    pub fn parse(name: &str) -> Option<Mesh> {
        Mesh::all().find(|m| m.name() == name || m.aliases().contains(&name))
    }

    /// Every registered scenario, in the registry's order.
    pub fn all() -> impl Iterator<Item = Mesh> {
        crate::registry::MODULES
            .iter()
            .flat_map(|scenarios| scenarios.iter())
            .map(|adapter| Mesh(*adapter))
    }

    /// Its flavour on a cluster, if it has one yet.
    pub fn cluster(self) -> Option<&'static dyn ClusterMesh> {
        self.0.on_cluster()
    }

    /// Whether it enrolls a whole topology on a cluster (what `verify` needs there).
    pub fn enrolls_on_cluster(self) -> bool {
        self.cluster().is_some_and(|c| c.can_enroll())
    }

    /// No mesh: the reference every overhead is measured against.
    pub fn baseline() -> Mesh {
        Mesh(&crate::baseline::Baseline)
    }

    pub fn is_baseline(self) -> bool {
        self.enrollment() == Enrollment::Nothing
    }

    pub fn names() -> Vec<&'static str> {
        Mesh::all().map(|m| m.name()).collect()
    }

    /// The binary to run, or why the mesh cannot run here: every tool it needs must be
    /// installed.
    pub fn binary(self) -> Result<Option<PathBuf>, Unavailable> {
        self.local_lab().map_err(|why| Unavailable {
            mesh: self.name().into(),
            why: why.into(),
            install: String::new(),
        })?;
        let mut first = None;
        for tool in self.tools() {
            let path = meshbench_netlab::which(tool.binary)
                .ok_or_else(|| Unavailable::missing_tool(self.name(), tool))?;
            first.get_or_insert(path);
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

impl std::ops::Deref for Mesh {
    type Target = dyn MeshAdapter;

    fn deref(&self) -> &Self::Target {
        self.0
    }
}

impl PartialEq for Mesh {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name()
    }
}

impl Eq for Mesh {}

impl std::fmt::Debug for Mesh {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Mesh({})", self.name())
    }
}

/// A version line without the binary's path some tools start it with (`/usr/local/bin/envoy
/// version: <sha>/1.40.0/Clean/RELEASE/BoringSSL`), its spaces collapsed.
fn version_of_line(line: &str) -> String {
    let line = line.split_once(" version: ").map_or(line, |(_, v)| v);
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn tool_version(tool: Tool) -> String {
    let Some(path) = meshbench_netlab::which(tool.binary) else {
        return "not installed".into();
    };
    match std::process::Command::new(&path)
        .args(tool.version_args)
        .output()
    {
        Ok(out) => String::from_utf8_lossy(&out.stdout)
            .lines()
            .chain(String::from_utf8_lossy(&out.stderr).lines())
            .map(str::trim)
            .find(|line| !line.is_empty())
            .map(version_of_line)
            .unwrap_or_else(|| format!("no version from `{}`", path.display())),
        Err(e) => format!("cannot run `{}`: {e}", path.display()),
    }
}

/// Meshes that can enroll an arbitrary topology.
pub fn enrollable() -> Vec<Mesh> {
    Mesh::all().filter(|m| m.can_enroll()).collect()
}

/// Data planes that cannot enforce identity rules: a verification reports them as not
/// verified, which fails it, with the reason.
pub fn unenforceable() -> Vec<Mesh> {
    Mesh::all()
        .filter(|m| matches!(m.policy(), PolicySupport::Unenforceable(_)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_line_loses_the_binarys_path() {
        assert_eq!(
            version_of_line("/usr/local/bin/envoy  version: abc/1.40.0/Clean/RELEASE/BoringSSL"),
            "abc/1.40.0/Clean/RELEASE/BoringSSL"
        );
        assert_eq!(version_of_line("Consul  v1.22.7"), "Consul v1.22.7");
    }

    #[test]
    fn every_name_and_alias_parses_back_and_names_are_unique() {
        let names = Mesh::names();
        for name in &names {
            assert_eq!(Mesh::parse(name).unwrap().name(), *name);
        }
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), names.len(), "duplicate scenario names");
        for mesh in Mesh::all() {
            for alias in mesh.aliases() {
                assert_eq!(Mesh::parse(alias), Some(mesh));
                assert!(!names.contains(alias), "{alias} is also a name");
            }
        }
    }

    #[test]
    fn security_answers_agree_with_each_other() {
        for mesh in Mesh::all() {
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
}
