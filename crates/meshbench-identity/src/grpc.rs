//! A gRPC channel to a mesh's certificate API, as its proxies open one: TLS 1.3 verifying the
//! server by name against the mesh's roots, ALPN `h2`, one HTTP/2 connection. Shared by the
//! Istio and Linkerd clients, which differ only in the call they make on it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};

/// One HTTP/2 connection as a tonic transport.
pub(crate) struct H2(http2::SendRequest<tonic::body::Body>);

type ResponseFuture = Pin<
    Box<dyn Future<Output = Result<http::Response<hyper::body::Incoming>, hyper::Error>> + Send>,
>;

impl tower_service::Service<http::Request<tonic::body::Body>> for H2 {
    type Response = http::Response<hyper::body::Incoming>;
    type Error = hyper::Error;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        Box::pin(self.0.send_request(request))
    }
}

/// Connects to `address` (`host:port`), verifying that the server is `server_name` under one of
/// the PEM certificates of `roots_pem`; the channel and the origin its calls name. `Err` says
/// what failed, for the caller's own error.
pub(crate) async fn connect(
    address: &str,
    server_name: &str,
    roots_pem: &str,
) -> Result<(H2, http::Uri), String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(roots_pem.as_bytes()) {
        let cert = cert.map_err(|e| format!("root: {e}"))?;
        roots.add(cert).map_err(|e| format!("root: {e}"))?;
    }
    if roots.is_empty() {
        return Err("the root given holds no PEM certificate".into());
    }
    let mut config = crate::tls::client_builder_with_roots(roots)
        .map_err(|e| e.to_string())?
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let name = ServerName::try_from(server_name.to_owned())
        .map_err(|e| format!("server name {server_name}: {e}"))?;
    let tcp = tokio::net::TcpStream::connect(address)
        .await
        .map_err(|e| e.to_string())?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| format!("TLS: {e}"))?;
    let (sender, connection) = http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    let origin: http::Uri = format!("https://{server_name}")
        .parse()
        .map_err(|e| format!("origin https://{server_name}: {e}"))?;
    Ok((H2(sender), origin))
}
