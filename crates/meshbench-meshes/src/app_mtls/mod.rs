//! No mesh, the apps do TLS 1.3 mTLS themselves (E1's `baseline-mtls`): the client checks the
//! server's SPIFFE ID, the server requires a certificate from the lab's CA.

use meshbench_identity::{ClientTlsFiles, ServerTlsFiles, SpiffeId};

use meshbench_topology::Pod;

use crate::adapter::{ClusterMesh, Deploying, LocalMesh, MeshAdapter};
use crate::cluster::{ClusterCell, ClusterEntry, PodAdditions};
use crate::description::{Description, Enrollment, IdentityCheck};
use crate::lab::{Deployment, MeshContext};
use crate::Error;

pub(crate) struct AppMtls;

pub(crate) const SCENARIOS: &[&dyn MeshAdapter] = &[&AppMtls];

impl MeshAdapter for AppMtls {
    fn describe(&self) -> Description {
        Description::new(
            "baseline-mtls",
            "client and server do TLS 1.3 mTLS themselves (rustls, ECDSA P-256 SVIDs, SPIFFE \
             IDs checked)",
            Enrollment::InApp,
        )
        .aliases(&["app-mtls"])
        .mtls((IdentityCheck::SpiffeId, IdentityCheck::ChainOnly))
    }

    fn local(&self) -> Option<&dyn LocalMesh> {
        Some(self)
    }

    fn cluster(&self) -> Option<&dyn ClusterMesh> {
        Some(self)
    }
}

impl LocalMesh for AppMtls {
    /// Its SVID, and client certificates required from the lab's CA.
    fn app_tls(&self, ctx: &MeshContext<'_>) -> Option<ServerTlsFiles> {
        let svid = ctx.server_svid();
        Some(ServerTlsFiles {
            cert: svid.cert,
            key: svid.key,
            client_ca: Some(ctx.pki.ca.clone()),
        })
    }

    fn deploy<'a>(&'a self, ctx: &'a MeshContext<'a>) -> Deploying<'a> {
        Box::pin(async move {
            let client = ctx.client_svid();
            Ok(Deployment {
                components: vec![],
                url: ctx.service_url("https")?,
                client_tls: Some(ClientTlsFiles {
                    cert: Some(client.cert),
                    key: Some(client.key),
                    ca: ctx.pki.ca.clone(),
                    expect_server_id: Some(SpiffeId::parse(&ctx.server_svid().id)?),
                }),
            })
        })
    }
}

/// The apps get their workloads' SVIDs; nothing else runs.
impl ClusterMesh for AppMtls {
    fn app_tls(&self, cell: &ClusterCell<'_>) -> Option<ServerTlsFiles> {
        let svid = ClusterCell::svid(cell.server);
        Some(ServerTlsFiles {
            cert: svid.cert,
            key: svid.key,
            client_ca: Some(ClusterCell::ca()),
        })
    }

    fn entry(&self, cell: &ClusterCell<'_>) -> Result<ClusterEntry, Error> {
        Ok(ClusterEntry {
            url: cell.service_url("https")?,
            client_tls: Some(crate::cluster::app_client_tls(cell)?),
        })
    }

    fn pod(&self, _cell: &ClusterCell<'_>, _pod: &Pod) -> Result<PodAdditions, Error> {
        Ok(PodAdditions {
            identity: true,
            ..PodAdditions::default()
        })
    }
}
