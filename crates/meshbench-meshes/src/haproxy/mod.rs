//! HAProxy as a sidecar in each pod (mode http, one thread), TLS 1.3 mTLS. HAProxy 2.6 checks
//! the server's DNS SAN (the lab's SVIDs mirror the SPIFFE ID as `<sa>.<ns>.svc`) and only
//! the client's chain, so identity rules cannot be enforced: it runs cells, not
//! verifications.

pub(crate) mod config;

use std::path::Path;

use crate::adapter::{MeshAdapter, PolicySupport, Tool};
use crate::configs::{IdentityCheck, ProxyMode};
use crate::third_party::{PairedProxy, Side, ThirdParty};

pub(crate) struct Haproxy;

pub(crate) const SCENARIOS: &[&dyn MeshAdapter] = &[&ThirdParty(Haproxy)];

/// Why neither HAProxy nor nginx can carry E3's rules.
pub(crate) const CHAIN_ONLY: PolicySupport = PolicySupport::Unenforceable(
    "identity-based authorization (HAProxy 2.6 and nginx read a client certificate's \
     subject and chain, never its SPIFFE ID, so E3's rules cannot be enforced)",
);

impl PairedProxy for Haproxy {
    const NAME: &'static str = "haproxy-sidecar";
    const TOOL: Tool = Tool::new("haproxy", "apt-get install -y haproxy", &["-v"]);
    const IDENTITY: (IdentityCheck, IdentityCheck) =
        (IdentityCheck::DnsName, IdentityCheck::ChainOnly);
    const POLICY: PolicySupport = CHAIN_ONLY;
    const EXTENSION: &'static str = "cfg";

    fn what(&self) -> &'static str {
        "HAProxy sidecar in each pod (mode http, one thread)"
    }

    fn config(&self, side: &Side<'_>) -> String {
        if side.inbound {
            config::haproxy_inbound(
                side.listen,
                side.target,
                &side.own.combined,
                side.ca,
                ProxyMode::Http,
            )
        } else {
            config::haproxy_outbound(
                side.listen,
                side.target,
                &side.peer.dns_name,
                &side.own.combined,
                side.ca,
                ProxyMode::Http,
            )
        }
    }

    fn args(&self, config: &Path, _dir: &Path) -> Vec<String> {
        vec!["-db".into(), "-f".into(), config.display().to_string()]
    }
}
