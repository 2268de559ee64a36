//! The mesh seam: a mesh scenario is a [`Description`] (plain data) plus the parts it has,
//! each a small trait object: the local lab's ([`LocalMesh`], and [`LocalEnroll`] when it can
//! enroll a whole topology), a cluster's ([`ClusterMesh`], whose [`InstalledMesh`] is a
//! third-party mesh the cluster runs), and capabilities only some meshes have ([`OwnCa`],
//! [`OutboundRefusal`]). A mesh is one module (`src/<mesh>/`) implementing [`MeshAdapter`] for
//! each scenario it offers, plus one line in [`crate::registry`]; nothing outside its module
//! knows which mesh it is, and no mesh module uses another's: what several share (Envoy's
//! bootstrap, the third-party sidecar pair, our sidecar's file) are building blocks in modules
//! of their own.
//!
//! Invariants every part keeps:
//! - `deploy` and `enroll` start only what the mesh needs (its proxies, agents, control
//!   plane) around apps that already run, and return every component they started, so the
//!   caller's teardown stops them however the cell ends;
//! - what a proxy reads (configs, keys) goes through [`crate::LabContext::write`] and the run's
//!   proxy area, never into the results directory the proxy user may not reach;
//! - the description's security answers are what the verifier checks on the wire and in the
//!   reachability matrix, so they must be true of the deployed configuration.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;

use meshbench_identity::ServerTlsFiles;
use meshbench_lab::LabComponent;
use meshbench_policy::Policy;
use meshbench_topology::{Pod, Topology};

use crate::cluster::{
    ClusterCell, ClusterEntry, ClusterSite, NodeAgentPod, PlacedPod, PodAdditions,
};
use crate::description::{Description, EnforcedPolicy};
use crate::installed::{translate_unplaced, InstalledMesh};
use crate::lab::{Deployment, LabContext, MeshContext};
use crate::pki::MeshPki;
use crate::tool::Tool;
use crate::Error;

/// A future a part returns (the traits are used as `dyn`).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

/// What [`LocalMesh::deploy`] returns.
pub type Deploying<'a> = BoxFuture<'a, Result<Deployment, Error>>;

/// What [`LocalEnroll::enroll`] returns: every component it started.
pub type Enrolling<'a> = BoxFuture<'a, Result<Vec<LabComponent>, Error>>;

/// One scenario of a mesh: its description and its parts. See the module's invariants.
pub trait MeshAdapter: Sync {
    fn describe(&self) -> Description;

    /// How it runs on the local lab; `None` for a mesh that runs only where a cluster has it.
    fn local(&self) -> Option<&dyn LocalMesh> {
        None
    }

    /// How it runs on a cluster; `None` for a mesh that does not run on one yet.
    fn cluster(&self) -> Option<&dyn ClusterMesh> {
        None
    }

    /// Our policy as this mesh enforces it for `topology`'s enrolled workloads, in our own
    /// language, with what it could not express as written: `verify` expects what this
    /// returns, so a rule the mesh cannot express is reported, never silently dropped. A mesh
    /// a cluster runs enforces what its translation says; meshes that read the policy whole
    /// keep it as it is.
    fn enforced_policy(
        &self,
        policy: &Policy,
        topology: &Topology,
    ) -> Result<EnforcedPolicy, Error> {
        match self.cluster().and_then(|c| c.installed()) {
            Some(installed) => Ok(translate_unplaced(installed, policy, topology)?.enforced),
            None => Ok(EnforcedPolicy {
                policy: policy.clone(),
                notes: vec![],
            }),
        }
    }

    /// Its control plane's own CA, when it keeps one.
    fn own_ca(&self) -> Option<&dyn OwnCa> {
        None
    }

    /// Its proxies' refusal of some outbound calls, when they refuse any.
    fn outbound_refusal(&self) -> Option<&dyn OutboundRefusal> {
        None
    }
}

/// A mesh on the local lab.
pub trait LocalMesh: Sync {
    /// Every binary it needs beyond meshbench's own (a control plane and its proxy, say).
    fn tools(&self) -> Vec<Tool> {
        vec![]
    }

    /// The TLS the server app serves itself under this mesh (only when the app does mTLS).
    fn app_tls(&self, _ctx: &MeshContext<'_>) -> Option<ServerTlsFiles> {
        None
    }

    /// Starts the mesh around a client/server cell whose server app already runs, and says
    /// how the client reaches the server.
    fn deploy<'a>(&'a self, ctx: &'a MeshContext<'a>) -> Deploying<'a>;

    /// How it enrolls a whole topology, if it can.
    fn enroller(&self) -> Option<&dyn LocalEnroll> {
        None
    }
}

/// Enrolling every meshed workload of a lab's topology.
pub trait LocalEnroll: Sync {
    /// Starts the mesh for every meshed workload of the lab's topology (its apps already run).
    fn enroll<'a>(&'a self, lab: &'a LabContext<'a>) -> Enrolling<'a>;
}

/// A control plane with a CA of its own, whose certificates cannot be made to live seconds (a
/// minimum lifetime): rotation under load is checked by rotating its CA rather than by
/// short-lived SVIDs.
pub trait OwnCa: Sync {
    /// The directory of the CA its proxies trust, as [`CertificateAuthority::init`] keeps
    /// one: the identity checks issue their certificates from it.
    ///
    /// [`CertificateAuthority::init`]: meshbench_identity::CertificateAuthority::init
    fn dir(&self, pki: &MeshPki) -> PathBuf;

    /// Rotates the enrolled mesh's CA to a new root, so that every proxy renews its
    /// certificate.
    fn rotate<'a>(&'a self, lab: &'a LabContext<'a>) -> BoxFuture<'a, Result<(), Error>>;
}

/// Proxies that refuse some calls before they leave the caller's pod.
pub trait OutboundRefusal: Sync {
    /// Why an enrolled caller's own proxy refuses a call, if it does: to a service outside the
    /// mesh (`to_enrolled` false), or to the caller's own service. Most meshes pass the first
    /// through (Istio's ALLOW_ANY) and carry the second.
    fn refusal(&self, to_enrolled: bool, to_own_service: bool) -> Option<&'static str>;
}

/// A mesh's flavour on a cluster. See the module's header.
pub trait ClusterMesh: Sync {
    /// The TLS the server app serves itself (paths in its pod), when the app does mTLS.
    fn app_tls(&self, _cell: &ClusterCell<'_>) -> Option<ServerTlsFiles> {
        None
    }

    /// How the client reaches the server: by default the service by name in plaintext,
    /// which the mesh (if any) captures.
    fn entry(&self, cell: &ClusterCell<'_>) -> Result<ClusterEntry, Error> {
        Ok(ClusterEntry {
            url: cell.service_url("http")?,
            client_tls: None,
        })
    }

    /// What it adds to `pod`, one of the cell's pods (the client's too).
    fn pod(&self, _cell: &ClusterCell<'_>, _pod: &Pod) -> Result<PodAdditions, Error> {
        Ok(PodAdditions::default())
    }

    /// Whether it can enroll a whole topology on a cluster (E3's verification), where
    /// several workloads call each other and only the meshed ones are in the mesh.
    fn can_enroll(&self) -> bool {
        false
    }

    /// What it adds to `pod` when it enrolls a whole topology (only asked when
    /// [`ClusterMesh::can_enroll`]).
    fn enroll_pod(&self, _site: &ClusterSite<'_>, _pod: &Pod) -> Result<PodAdditions, Error> {
        Err(Error::Unsupported {
            mesh: "this mesh".into(),
            what: "enrolling a whole topology on a cluster",
        })
    }

    /// The node agents it runs once the apps' pods are running (`placed`: those pods, with
    /// their addresses, enrolled or not); none for a mesh without node agents.
    fn node_agents(
        &self,
        _site: &ClusterSite<'_>,
        _placed: &[PlacedPod<'_>],
    ) -> Result<Vec<NodeAgentPod>, Error> {
        Ok(vec![])
    }

    /// Whether it needs meshbench's CA service as its control plane.
    fn needs_ca(&self) -> bool {
        false
    }

    /// The mesh as the cluster already runs it, when meshbench injects nothing itself (its
    /// pods are then enrolled by the labels and annotations its translation gives).
    fn installed(&self) -> Option<&dyn InstalledMesh> {
        None
    }
}

/// A mesh the cluster already runs is a cluster part with nothing to add to the pods: the
/// mesh enrolls them itself.
impl<T: InstalledMesh> ClusterMesh for T {
    fn installed(&self) -> Option<&dyn InstalledMesh> {
        Some(self)
    }
}
