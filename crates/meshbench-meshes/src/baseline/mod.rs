//! No mesh: plain HTTP between client and server (E1's `baseline`), and the negative control
//! of a verification, where every rule that needs a mesh must fail.

use meshbench_topology::Pod;

use crate::adapter::{ClusterMesh, Deploying, LocalMesh, MeshAdapter};
use crate::cluster::{ClusterSite, PodAdditions};
use crate::description::{Description, Enrollment};
use crate::lab::{Deployment, MeshContext};
use crate::Error;

pub(crate) struct Baseline;

pub(crate) const SCENARIOS: &[&dyn MeshAdapter] = &[&Baseline];

impl MeshAdapter for Baseline {
    fn describe(&self) -> Description {
        Description::new(
            "baseline",
            "plain HTTP/1.1 between client and server",
            Enrollment::Nothing,
        )
        .aliases(&["none"])
    }

    fn local(&self) -> Option<&dyn LocalMesh> {
        Some(self)
    }

    fn cluster(&self) -> Option<&dyn ClusterMesh> {
        Some(self)
    }
}

impl LocalMesh for Baseline {
    fn deploy<'a>(&'a self, ctx: &'a MeshContext<'a>) -> Deploying<'a> {
        Box::pin(async move {
            Ok(Deployment {
                components: vec![],
                url: ctx.service_url("http")?,
                client_tls: None,
            })
        })
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
