//! nginx as a sidecar in each pod (one worker), TLS 1.3 mTLS, checking the server's DNS SAN
//! and only the client's chain (so, like HAProxy, it cannot enforce identity rules).

use std::path::Path;

use crate::adapter::MeshAdapter;
use crate::configs::haproxy::CHAIN_ONLY;
use crate::configs::nginx::{self as config, NGINX};
use crate::description::{IdentityCheck, PolicySupport};
use crate::third_party::{PairedProxy, Side, ThirdParty};
use crate::tool::Tool;

pub(crate) struct Nginx;

pub(crate) const SCENARIOS: &[&dyn MeshAdapter] = &[&ThirdParty(Nginx)];

impl PairedProxy for Nginx {
    const NAME: &'static str = "nginx-sidecar";
    const TOOL: Tool = NGINX;
    const IDENTITY: (IdentityCheck, IdentityCheck) =
        (IdentityCheck::DnsName, IdentityCheck::ChainOnly);
    const POLICY: PolicySupport = CHAIN_ONLY;
    const EXTENSION: &'static str = "conf";

    fn what(&self) -> &'static str {
        "nginx sidecar in each pod (one worker)"
    }

    fn config(&self, side: &Side<'_>) -> String {
        let tls = config::NginxTls {
            cert: &side.own.cert,
            key: &side.own.key,
            ca: side.ca,
        };
        if side.inbound {
            config::nginx_inbound(side.dir, side.listen, side.target, &tls)
        } else {
            config::nginx_outbound(
                side.dir,
                side.listen,
                side.target,
                &side.peer.dns_name,
                &tls,
            )
        }
    }

    fn args(&self, config: &Path, dir: &Path) -> Vec<String> {
        vec![
            "-p".into(),
            dir.display().to_string(),
            "-e".into(),
            dir.join("error.log").display().to_string(),
            "-c".into(),
            config.display().to_string(),
        ]
    }
}
