//! The target of a load run: a parsed `http://` or `https://` URL, resolved once up front so
//! DNS never shows up in measured latency.

use std::net::{SocketAddr, ToSocketAddrs};

use http::uri::{PathAndQuery, Scheme};
use http::Uri;

use crate::Error;

#[derive(Debug, Clone)]
pub struct Target {
    pub url: String,
    pub tls: bool,
    pub host: String,
    /// `host[:port]`, sent as the Host header.
    pub authority: String,
    pub path_and_query: PathAndQuery,
    pub addr: SocketAddr,
}

impl Target {
    pub fn parse(url: &str) -> Result<Self, Error> {
        let invalid = |reason: &str| Error::InvalidUrl {
            url: url.to_owned(),
            reason: reason.to_owned(),
        };
        let uri: Uri = url
            .parse()
            .map_err(|e: http::uri::InvalidUri| invalid(&e.to_string()))?;
        let tls = match uri.scheme() {
            Some(s) if *s == Scheme::HTTP => false,
            Some(s) if *s == Scheme::HTTPS => true,
            _ => return Err(invalid("scheme must be http or https")),
        };
        let authority = uri.authority().ok_or_else(|| invalid("missing host"))?;
        let host = authority.host().trim_matches(|c| c == '[' || c == ']');
        let port = authority.port_u16().unwrap_or(if tls { 443 } else { 80 });
        let addr = (host, port)
            .to_socket_addrs()
            .map_err(|source| Error::Resolve {
                host: host.to_owned(),
                source,
            })?
            .next()
            .ok_or_else(|| invalid("host resolves to no address"))?;
        Ok(Target {
            url: url.to_owned(),
            tls,
            host: host.to_owned(),
            authority: authority.as_str().to_owned(),
            path_and_query: uri
                .path_and_query()
                .cloned()
                .unwrap_or_else(|| PathAndQuery::from_static("/")),
            addr,
        })
    }
}
