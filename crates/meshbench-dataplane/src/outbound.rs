//! The outbound path: take the app's plaintext connection and carry it to the destination's
//! sidecar over mTLS, presenting this workload's SVID and requiring the destination's.

use std::net::SocketAddr;
use std::sync::Arc;

use rustls_pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

pub(crate) struct Outbound {
    upstream: SocketAddr,
    tls: Option<TlsConnector>,
}

impl Outbound {
    pub(crate) fn new(upstream: SocketAddr, tls: Option<rustls::ClientConfig>) -> Self {
        Outbound {
            upstream,
            tls: tls.map(|c| TlsConnector::from(Arc::new(c))),
        }
    }

    pub(crate) async fn handle(&self, mut app: TcpStream) {
        let mut upstream = match TcpStream::connect(self.upstream).await {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(upstream = %self.upstream, error = %e, "upstream unreachable");
                return;
            }
        };
        let _ = upstream.set_nodelay(true);
        match &self.tls {
            Some(connector) => {
                // The verifier checks the SPIFFE ID; the name only feeds SNI.
                let name = ServerName::IpAddress(self.upstream.ip().into());
                match connector.connect(name, upstream).await {
                    Ok(mut tls) => {
                        let _ = tokio::io::copy_bidirectional(&mut app, &mut tls).await;
                    }
                    Err(e) => {
                        tracing::info!(upstream = %self.upstream, error = %e, "outbound mTLS refused");
                    }
                }
            }
            None => {
                let _ = tokio::io::copy_bidirectional(&mut app, &mut upstream).await;
            }
        }
    }
}
