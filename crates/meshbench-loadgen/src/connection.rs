//! One client connection of the generator: TCP (no Nagle), optional TLS, HTTP/1.1 keep-alive
//! via hyper's low-level client, one request in flight at a time.

use std::error::Error as StdError;
use std::sync::Arc;

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request};
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use rustls_pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::Target;

pub(crate) type BoxError = Box<dyn StdError + Send + Sync>;

/// Opens connections to one target; shared by all of a run's connection tasks.
pub(crate) struct Connector {
    target: Target,
    /// Parsed once: building a request is on the generator's hot path.
    host: HeaderValue,
    tls: Option<(TlsConnector, ServerName<'static>)>,
}

impl Connector {
    pub(crate) fn new(
        target: Target,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Result<Self, crate::Error> {
        let host =
            HeaderValue::from_str(&target.authority).map_err(|e| crate::Error::InvalidUrl {
                url: target.url.clone(),
                reason: e.to_string(),
            })?;
        let tls = tls.map(|config| {
            // Our SPIFFE verifier ignores the name, but rustls needs one for SNI.
            let name = ServerName::try_from(target.host.clone())
                .unwrap_or_else(|_| ServerName::try_from("localhost").expect("valid name"));
            (TlsConnector::from(config), name)
        });
        Ok(Connector { target, host, tls })
    }

    pub(crate) async fn connect(&self) -> Result<Connection, BoxError> {
        let tcp = TcpStream::connect(self.target.addr).await?;
        tcp.set_nodelay(true)?;
        let sender = match &self.tls {
            Some((connector, name)) => {
                let tls = connector.connect(name.clone(), tcp).await?;
                handshake(TokioIo::new(tls)).await?
            }
            None => handshake(TokioIo::new(tcp)).await?,
        };
        Ok(Connection { sender })
    }

    pub(crate) fn request(&self) -> Request<Empty<Bytes>> {
        Request::builder()
            .method(Method::GET)
            .uri(self.target.path_and_query.clone())
            .header(header::HOST, self.host.clone())
            .body(Empty::new())
            .expect("request parts from a parsed URL are valid")
    }
}

async fn handshake<T>(io: TokioIo<T>) -> Result<SendRequest<Empty<Bytes>>, BoxError>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, driver) = http1::handshake(io).await?;
    tokio::spawn(async move {
        // The driver's error, if any, surfaces on the pending request; nothing to add here.
        let _ = driver.await;
    });
    Ok(sender)
}

pub(crate) struct Connection {
    sender: SendRequest<Empty<Bytes>>,
}

impl Connection {
    /// True when the connection can take another request (the server has not closed it).
    pub(crate) async fn is_reusable(&mut self) -> bool {
        !self.sender.is_closed() && self.sender.ready().await.is_ok()
    }

    /// Sends one request and reads the whole response body; returns the status.
    pub(crate) async fn exchange(&mut self, req: Request<Empty<Bytes>>) -> Result<u16, BoxError> {
        let response = self.sender.send_request(req).await?;
        let status = response.status().as_u16();
        let mut body = response.into_body();
        while let Some(frame) = body.frame().await {
            frame?;
        }
        Ok(status)
    }
}
