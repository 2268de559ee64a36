//! What the third-party sidecars (Envoy, HAProxy, nginx) share in a client/server cell: one
//! proxy per pod, the server's inbound terminating mTLS in front of the app, the client's
//! outbound originating it, each started as the proxy user, and the pods' capture (netns) or
//! explicit proxy ports (loopback). Each mesh module says only how its proxy is configured
//! and started ([`PairedProxy`]).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use meshbench_lab::Readiness;
use meshbench_netlab::SidecarCapture;

use crate::adapter::{ClusterMesh, Deploying, LocalEnroll, LocalMesh, MeshAdapter};
use crate::description::{Description, Enrollment, IdentityCheck, PolicySupport};
use crate::lab::{Deployment, MeshContext, Place};
use crate::pki::WorkloadSvid;
use crate::ports::Ports;
use crate::tool::Tool;
use crate::Error;

/// One side of the pair, as a proxy's configuration needs it.
pub(crate) struct Side<'a> {
    /// The server's inbound proxy (else the client's outbound).
    pub inbound: bool,
    pub listen: SocketAddr,
    /// The app (inbound) or the server's inbound proxy (outbound).
    pub target: SocketAddr,
    pub own: &'a WorkloadSvid,
    pub peer: &'a WorkloadSvid,
    pub ca: &'a Path,
    /// A directory the proxy user may write (logs, temporary files).
    pub dir: &'a Path,
}

/// How a third-party sidecar is configured and started, and what it can check: everything a
/// [`ThirdParty`] scenario needs to know about its proxy.
pub(crate) trait PairedProxy: Sync + 'static {
    const NAME: &'static str;
    const TOOL: Tool;
    /// What it checks of the server (as the client's proxy) and of the client (as the
    /// server's).
    const IDENTITY: (IdentityCheck, IdentityCheck);
    const POLICY: PolicySupport;
    /// Its config file's extension.
    const EXTENSION: &'static str;

    /// What runs, beyond the TLS and identity checks the description adds.
    fn what(&self) -> &'static str;

    fn config(&self, side: &Side<'_>) -> String;

    /// Its command line, given its written config and its writable directory.
    fn args(&self, config: &Path, dir: &Path) -> Vec<String>;

    /// How it enrolls a whole topology, if it can.
    fn enroller(&self) -> Option<&dyn LocalEnroll> {
        None
    }

    /// Its flavour on a cluster, if it has one.
    fn on_cluster(&self) -> Option<&dyn ClusterMesh> {
        None
    }
}

/// A third-party proxy as a sidecar in each pod, TLS 1.3 mTLS between them.
pub(crate) struct ThirdParty<P>(pub P);

impl<P: PairedProxy> MeshAdapter for ThirdParty<P> {
    fn describe(&self) -> Description {
        let (of_server, of_client) = P::IDENTITY;
        let identity = if of_server == of_client {
            format!("peer identity: {}", of_server.describe())
        } else {
            format!(
                "server identity: {}, client identity: {}",
                of_server.describe(),
                of_client.describe()
            )
        };
        let summary = format!("{}, TLS 1.3 mTLS, {identity}", self.0.what());
        Description::new(P::NAME, summary, Enrollment::SidecarPerPod)
            .mtls(P::IDENTITY)
            .policy(P::POLICY)
    }

    fn local(&self) -> Option<&dyn LocalMesh> {
        Some(self)
    }

    fn cluster(&self) -> Option<&dyn ClusterMesh> {
        self.0.on_cluster()
    }
}

impl<P: PairedProxy> LocalMesh for ThirdParty<P> {
    fn tools(&self) -> Vec<Tool> {
        vec![P::TOOL]
    }

    fn deploy<'a>(&'a self, ctx: &'a MeshContext<'a>) -> Deploying<'a> {
        Box::pin(deploy_pair(&self.0, ctx))
    }

    fn enroller(&self) -> Option<&dyn LocalEnroll> {
        self.0.enroller()
    }
}

/// The proxy's binary, or why it cannot run here.
pub(crate) fn binary<P: PairedProxy>() -> Result<PathBuf, Error> {
    Ok(crate::tool::binary(P::NAME, P::TOOL)?)
}

/// Starts `proxy` in both pods and captures their traffic into it.
async fn deploy_pair<P: PairedProxy>(
    proxy: &P,
    ctx: &MeshContext<'_>,
) -> Result<Deployment, Error> {
    let binary = binary::<P>()?;
    let net = ctx.net;
    let (client, server) = (ctx.client_pod, ctx.server_pod);
    let (client_ip, server_ip) = (ctx.pod_ip(client)?, ctx.pod_ip(server)?);
    let captures = net.captures();
    let (inbound_listen, app, outbound_listen, upstream) = if captures {
        (
            SocketAddr::from(([0, 0, 0, 0], Ports::INBOUND)),
            SocketAddr::from(([127, 0, 0, 1], Ports::APP)),
            SocketAddr::from(([127, 0, 0, 1], Ports::OUTBOUND)),
            net.service_addr(ctx.service)?,
        )
    } else {
        (
            SocketAddr::new(server_ip, Ports::INBOUND),
            SocketAddr::new(server_ip, Ports::APP),
            SocketAddr::new(client_ip, Ports::OUTBOUND),
            ctx.across_link(SocketAddr::new(server_ip, Ports::INBOUND))?,
        )
    };
    let (client_svid, server_svid) = (ctx.client_svid(), ctx.server_svid());
    let prefix = P::NAME.trim_end_matches("-sidecar");
    let mut components = vec![];
    for (pod, inbound) in [(server, true), (client, false)] {
        let name = format!("{}-{prefix}", pod.name);
        let dir = ctx.proxy_dir(&name)?;
        let side = if inbound {
            Side {
                inbound,
                listen: inbound_listen,
                target: app,
                own: &server_svid,
                peer: &client_svid,
                ca: &ctx.pki.ca,
                dir: &dir,
            }
        } else {
            Side {
                inbound,
                listen: outbound_listen,
                target: upstream,
                own: &client_svid,
                peer: &server_svid,
                ca: &ctx.pki.ca,
                dir: &dir,
            }
        };
        let config = ctx.write(&format!("{name}.{}", P::EXTENSION), &proxy.config(&side))?;
        components.push(
            ctx.start(
                &name,
                "sidecar",
                Place::Pod(&pod.name),
                true,
                &binary,
                proxy.args(&config, &dir),
                Readiness::Listening(side.listen.port()),
            )
            .await?,
        );
    }
    let url = if captures {
        ctx.pod_capture(
            server,
            &SidecarCapture {
                outbound_port: Ports::OUTBOUND,
                inbound_port: Ports::INBOUND,
                outbound_only: Some(vec![]),
                inbound_only: Some(vec![Ports::APP]),
                inbound_ports_excluded: vec![],
            },
        )?;
        ctx.pod_capture(
            client,
            &SidecarCapture {
                outbound_port: Ports::OUTBOUND,
                inbound_port: Ports::INBOUND,
                outbound_only: Some(vec![(upstream, Ports::OUTBOUND)]),
                inbound_only: Some(vec![]),
                inbound_ports_excluded: vec![],
            },
        )?;
        ctx.service_url("http")?
    } else {
        format!("http://{outbound_listen}/")
    };
    Ok(Deployment {
        components,
        url,
        client_tls: None,
    })
}
