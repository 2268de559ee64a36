//! nginx as a sidecar in each pod (one worker), TLS 1.3 mTLS, checking the server's DNS SAN
//! and only the client's chain (so, like HAProxy, it cannot enforce identity rules); and
//! E3's gateway, which is nginx too.

pub(crate) mod config;

use std::path::{Path, PathBuf};

use crate::adapter::{MeshAdapter, PolicySupport, Tool};
use crate::configs::IdentityCheck;
use crate::third_party::{PairedProxy, Side, ThirdParty};
use crate::Error;

pub(crate) struct Nginx;

pub(crate) const SCENARIOS: &[&dyn MeshAdapter] = &[&ThirdParty(Nginx)];

impl PairedProxy for Nginx {
    const NAME: &'static str = "nginx-sidecar";
    const TOOL: Tool = Tool::new("nginx", "apt-get install -y nginx-light", &["-v"]);
    const IDENTITY: (IdentityCheck, IdentityCheck) =
        (IdentityCheck::DnsName, IdentityCheck::ChainOnly);
    const POLICY: PolicySupport = crate::haproxy::CHAIN_ONLY;
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

/// nginx, for E3's gateway.
pub(crate) fn binary() -> Result<PathBuf, Error> {
    crate::third_party::binary::<Nginx>()
}
