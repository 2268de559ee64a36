//! HAProxy as a sidecar in each pod (mode http, one thread), TLS 1.3 mTLS. HAProxy 2.6 checks
//! the server's DNS SAN (the lab's SVIDs mirror the SPIFFE ID as `<sa>.<ns>.svc`) and only
//! the client's chain, so identity rules cannot be enforced: it runs cells, not
//! verifications.

use std::path::Path;

use crate::adapter::MeshAdapter;
use crate::configs::haproxy::{self as config, CHAIN_ONLY, HAPROXY};
use crate::configs::ProxyMode;
use crate::description::{IdentityCheck, PolicySupport};
use crate::third_party::{PairedProxy, Side, ThirdParty};
use crate::tool::Tool;

pub(crate) struct Haproxy;

pub(crate) const SCENARIOS: &[&dyn MeshAdapter] = &[&ThirdParty(Haproxy)];

impl PairedProxy for Haproxy {
    const NAME: &'static str = "haproxy-sidecar";
    const TOOL: Tool = HAPROXY;
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
        crate::configs::haproxy_args(config)
    }
}
