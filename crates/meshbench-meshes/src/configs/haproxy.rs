//! HAProxy sidecars (`mode http` or `mode tcp`, one thread). HAProxy 2.6 cannot match URI
//! SANs: the outbound side checks the server's DNS SAN (`verifyhost`), the inbound side the
//! client's chain.

use std::net::SocketAddr;
use std::path::Path;

use crate::description::PolicySupport;
use crate::tool::Tool;

use super::{p, ProxyMode};

pub(crate) const HAPROXY: Tool = Tool::new("haproxy", "apt-get install -y haproxy", &["-v"]);

/// Why neither HAProxy nor nginx can carry E3's rules.
pub(crate) const CHAIN_ONLY: PolicySupport = PolicySupport::Unenforceable(
    "identity-based authorization (HAProxy 2.6 and nginx read a client certificate's \
     subject and chain, never its SPIFFE ID, so E3's rules cannot be enforced)",
);

/// How every HAProxy sidecar runs: in the foreground with its configuration `config`.
pub fn haproxy_args(config: &Path) -> Vec<String> {
    vec!["-db".into(), "-f".into(), p(config)]
}

/// Plaintext in on `listen`, mTLS to `upstream`, which must present `upstream_dns`.
pub fn haproxy_outbound(
    listen: SocketAddr,
    upstream: SocketAddr,
    upstream_dns: &str,
    crt: &Path,
    ca: &Path,
    mode: ProxyMode,
) -> String {
    format!(
        "{}\nfrontend outbound\n  bind {listen}\n  default_backend upstream\n\
         backend upstream\n{}  server inbound {upstream} ssl crt {} \
         ca-file {} verify required verifyhost {upstream_dns} sni str({upstream_dns}) \
         ssl-min-ver TLSv1.3 ssl-max-ver TLSv1.3\n",
        common(mode),
        reuse(mode),
        p(crt),
        p(ca)
    )
}

/// mTLS in on `listen` (client certificate required), plaintext to `app`.
pub fn haproxy_inbound(
    listen: SocketAddr,
    app: SocketAddr,
    crt: &Path,
    ca: &Path,
    mode: ProxyMode,
) -> String {
    format!(
        "{}\nfrontend inbound\n  bind {listen} ssl crt {} ca-file {} verify required \
         ssl-min-ver TLSv1.3 ssl-max-ver TLSv1.3\n  default_backend app\n\
         backend app\n{}  server app {app}\n",
        common(mode),
        p(crt),
        p(ca),
        reuse(mode)
    )
}

fn common(mode: ProxyMode) -> String {
    let mode = match mode {
        ProxyMode::Http => "http",
        ProxyMode::Tcp => "tcp",
    };
    format!(
        "global\n  nbthread 1\n  maxconn 8000\n\
         defaults\n  mode {mode}\n  timeout connect 5s\n  timeout client 60s\n  timeout server 60s\n"
    )
}

/// Pooled upstream connections, which only HTTP mode has.
fn reuse(mode: ProxyMode) -> &'static str {
    match mode {
        ProxyMode::Http => "  http-reuse always\n",
        ProxyMode::Tcp => "",
    }
}
