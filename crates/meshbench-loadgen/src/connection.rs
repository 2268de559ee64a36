//! One client connection of the generator: TCP (no Nagle), optional TLS, then HTTP/1.1
//! (keep-alive or not, the lean exchange of `http1`), HTTP/2 (hyper's low-level client) or
//! unary gRPC (tonic's client on that HTTP/2 connection, `grpc`). One request in flight per
//! connection; the load models decide when it is sent.

use std::sync::Arc;

use bytes::Bytes;
use http::uri::PathAndQuery;
use http::{header, HeaderMap, HeaderValue, Method, Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls_pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::config::{Protocol, RequestSpec};
use crate::error::BoxError;
use crate::grpc::{self, GrpcClient};
use crate::http1::Http1Connection;
use crate::{Error, Outcome, Target};

/// Opens connections to one target and builds its requests; shared by a thread's workers.
pub(crate) struct Connector {
    target: Target,
    tls: Option<(TlsConnector, ServerName<'static>)>,
    protocol: Protocol,
    uri: Uri,
    headers: HeaderMap,
    request: RequestSpec,
    /// HTTP/1.1: the whole request, serialized once.
    http1_request: Bytes,
    /// gRPC: the method called.
    grpc_method: PathAndQuery,
}

impl Connector {
    pub(crate) fn new(
        target: Target,
        tls: Option<Arc<rustls::ClientConfig>>,
        protocol: Protocol,
        request: RequestSpec,
    ) -> Result<Self, Error> {
        let invalid = |reason: String| Error::InvalidUrl {
            url: target.url.clone(),
            reason,
        };
        // HTTP/2 needs the absolute URI for its :scheme and :authority pseudo-headers (for
        // gRPC, tonic adds the method's path to this origin).
        let uri: Uri = match protocol {
            Protocol::Http2 => target.url.parse().map_err(|e| invalid(format!("{e}")))?,
            Protocol::Grpc => {
                let scheme = if target.tls { "https" } else { "http" };
                format!("{scheme}://{}", target.authority)
                    .parse()
                    .map_err(|e| invalid(format!("{e}")))?
            }
            Protocol::Http1 { .. } => target.path_and_query.clone().into(),
        };
        let grpc_method = match target.path_and_query.as_str() {
            "/" => PathAndQuery::from_static(grpc::DEFAULT_GRPC_METHOD),
            _ => target.path_and_query.clone(),
        };
        let mut headers = HeaderMap::new();
        if let Protocol::Http1 { keep_alive } = protocol {
            let host =
                HeaderValue::from_str(&target.authority).map_err(|e| invalid(e.to_string()))?;
            headers.insert(header::HOST, host);
            if !keep_alive {
                headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
        }
        for (name, value) in &request.headers {
            // A user's Host replaces ours; other headers add up.
            if name == header::HOST {
                headers.insert(name.clone(), value.clone());
            } else {
                headers.append(name.clone(), value.clone());
            }
        }
        let http1_request = serialize_http1(&request, &target, &headers);
        let tls = tls.map(|config| {
            // The connector, not its caller, knows which protocol to negotiate.
            let mut config = (*config).clone();
            config.alpn_protocols = match protocol {
                Protocol::Http2 | Protocol::Grpc => vec![b"h2".to_vec()],
                Protocol::Http1 { .. } => vec![b"http/1.1".to_vec()],
            };
            // Our SPIFFE verifier ignores the name, but rustls needs one for SNI.
            let name = ServerName::try_from(target.host.clone())
                .unwrap_or_else(|_| ServerName::try_from("localhost").expect("valid name"));
            (TlsConnector::from(Arc::new(config)), name)
        });
        Ok(Connector {
            target,
            tls,
            protocol,
            uri,
            headers,
            request,
            http1_request,
            grpc_method,
        })
    }

    pub(crate) async fn connect(&self) -> Result<Connection, BoxError> {
        let tcp = TcpStream::connect(self.target.addr).await?;
        tcp.set_nodelay(true)?;
        let sender = match &self.tls {
            Some((connector, name)) => {
                let tls = connector.connect(name.clone(), tcp).await?;
                self.handshake(tls).await?
            }
            None => self.handshake(tcp).await?,
        };
        Ok(Connection {
            sender,
            requests: 0,
        })
    }

    async fn handshake<T>(&self, io: T) -> Result<Sender, BoxError>
    where
        T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        Ok(match self.protocol {
            Protocol::Http1 { .. } => Sender::Http1(Http1Connection::new(Box::new(io))),
            Protocol::Http2 => Sender::Http2(h2_handshake(io).await?),
            Protocol::Grpc => Sender::Grpc(grpc::client(h2_handshake(io).await?, self.uri.clone())),
        })
    }

    fn request(&self) -> Request<Full<Bytes>> {
        let mut req = Request::new(Full::new(self.request.body.clone()));
        *req.method_mut() = self.request.method.clone();
        *req.uri_mut() = self.uri.clone();
        *req.headers_mut() = self.headers.clone();
        req
    }

    pub(crate) fn target(&self) -> &Target {
        &self.target
    }

    /// The HTTP/1.1 request, serialized.
    pub(crate) fn http1_request(&self) -> &Bytes {
        &self.http1_request
    }

    /// Whether the request is a HEAD (its response has no body whatever its headers say).
    pub(crate) fn is_head(&self) -> bool {
        self.request.method == Method::HEAD
    }

    /// Whether a connection must be closed after its `n`th request.
    pub(crate) fn keeps_connection_after(&self, n: u64, limit: Option<u64>) -> bool {
        let keep_alive = !matches!(self.protocol, Protocol::Http1 { keep_alive: false });
        keep_alive && limit.is_none_or(|max| n < max)
    }
}

async fn h2_handshake<T, B>(io: T) -> Result<http2::SendRequest<B>, BoxError>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    B: hyper::body::Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let (sender, driver) = http2::handshake(TokioExecutor::new(), TokioIo::new(io)).await?;
    // A driver error surfaces on the pending request; nothing to add here.
    tokio::spawn(async move { drop(driver.await) });
    Ok(sender)
}

enum Sender {
    Http1(Http1Connection),
    Http2(http2::SendRequest<Full<Bytes>>),
    Grpc(GrpcClient),
}

pub(crate) struct Connection {
    sender: Sender,
    pub(crate) requests: u64,
}

impl Connection {
    /// True when the connection can take another request (the server has not closed it).
    pub(crate) async fn is_reusable(&mut self) -> bool {
        match &mut self.sender {
            Sender::Http1(c) => c.is_reusable(),
            Sender::Http2(s) => !s.is_closed() && s.ready().await.is_ok(),
            // The same HTTP/2 readiness, through tonic's client.
            Sender::Grpc(c) => c.ready().await.is_ok(),
        }
    }

    /// Sends the connector's request and reads the whole response; returns how the peer
    /// answered.
    pub(crate) async fn exchange(&mut self, connector: &Connector) -> Result<Outcome, BoxError> {
        self.requests += 1;
        match &mut self.sender {
            Sender::Http1(c) => Ok(Outcome::Http(
                c.exchange(&connector.http1_request, connector.is_head())
                    .await?,
            )),
            // Boxed so that the HTTP/1.1 path's future stays small: it is moved per request.
            Sender::Grpc(client) => {
                Box::pin(grpc::call(
                    client,
                    &connector.grpc_method,
                    &connector.headers,
                    &connector.request.body,
                ))
                .await
            }
            Sender::Http2(s) => Box::pin(http2_exchange(s, connector)).await,
        }
    }
}

async fn http2_exchange(
    sender: &mut http2::SendRequest<Full<Bytes>>,
    connector: &Connector,
) -> Result<Outcome, BoxError> {
    let response = sender.send_request(connector.request()).await?;
    let status = response.status().as_u16();
    let mut body = response.into_body();
    while let Some(frame) = body.frame().await {
        frame?;
    }
    Ok(Outcome::Http(status))
}

/// `METHOD path HTTP/1.1`, the headers, a Content-Length for a body, then the body.
fn serialize_http1(request: &RequestSpec, target: &Target, headers: &HeaderMap) -> Bytes {
    let mut out = Vec::with_capacity(128 + request.body.len());
    out.extend_from_slice(request.method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.path_and_query.as_str().as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in headers {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if !request.body.is_empty() && !headers.contains_key(header::CONTENT_LENGTH) {
        out.extend_from_slice(format!("content-length: {}\r\n", request.body.len()).as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&request.body);
    out.into()
}
