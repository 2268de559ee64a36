//! No mesh: plain HTTP between client and server (E1's `baseline`), and the negative control
//! of a verification, where every rule that needs a mesh must fail.

use crate::adapter::{Deploying, Enrolling, Enrollment, MeshAdapter, PolicySupport};
use crate::{ClusterMesh, ClusterSite, Deployment, Error, LabContext, MeshContext, PodAdditions};
use meshbench_topology::Pod;

pub(crate) struct Baseline;

pub(crate) const SCENARIOS: &[&dyn MeshAdapter] = &[&Baseline];

impl MeshAdapter for Baseline {
    fn name(&self) -> &'static str {
        "baseline"
    }

    fn aliases(&self) -> &'static [&'static str] {
        &["none"]
    }

    fn description(&self) -> String {
        "plain HTTP/1.1 between client and server".into()
    }

    fn enrollment(&self) -> Enrollment {
        Enrollment::Nothing
    }

    fn mtls(&self) -> bool {
        false
    }

    fn policy(&self) -> PolicySupport {
        PolicySupport::None
    }

    fn deploy<'a>(&'a self, ctx: &'a MeshContext<'a>) -> Deploying<'a> {
        Box::pin(async move {
            Ok(Deployment {
                components: vec![],
                url: ctx.service_url("http")?,
                client_tls: None,
            })
        })
    }

    fn enroll<'a>(&'a self, _lab: &'a LabContext<'a>) -> Enrolling<'a> {
        Box::pin(async { Ok(vec![]) })
    }

    fn on_cluster(&self) -> Option<&dyn ClusterMesh> {
        Some(self)
    }
}

/// Nothing is added to the pods.
impl ClusterMesh for Baseline {
    fn can_enroll(&self) -> bool {
        true
    }

    fn enroll_pod(&self, _site: &ClusterSite<'_>, _pod: &Pod) -> Result<PodAdditions, Error> {
        Ok(PodAdditions::default())
    }
}
