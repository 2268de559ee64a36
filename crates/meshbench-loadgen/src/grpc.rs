//! Unary gRPC over one of the generator's HTTP/2 connections. tonic's client does the gRPC
//! part (framing, `grpc-status` from trailers or a trailers-only response, HTTP status
//! mapping); the connection underneath stays ours, one per worker, so gRPC runs obey the same
//! load models and connection limits as HTTP. Messages are opaque bytes, encoded once per run
//! by the caller: the generator never spends CPU on protobuf.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, BufMut, Bytes};
use http::uri::PathAndQuery;
use http::{HeaderMap, Uri};
use hyper::body::Incoming;
use hyper::client::conn::http2;
use tonic::body::Body;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::metadata::MetadataMap;
use tonic::Status;

use crate::error::BoxError;
use crate::Outcome;

/// Fortio's ping method, which `meshbench workload grpc-echo` serves: the method a `--grpc`
/// run calls when its URL names no path.
pub const DEFAULT_GRPC_METHOD: &str = "/fgrpc.PingServer/Ping";

/// hyper's HTTP/2 sender as the tower service tonic's client runs on.
#[derive(Clone)]
pub(crate) struct H2Service(pub(crate) http2::SendRequest<Body>);

type ResponseFuture =
    Pin<Box<dyn Future<Output = Result<http::Response<Incoming>, hyper::Error>> + Send>>;

impl tower_service::Service<http::Request<Body>> for H2Service {
    type Response = http::Response<Incoming>;
    type Error = hyper::Error;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        Box::pin(self.0.send_request(request))
    }
}

pub(crate) type GrpcClient = tonic::client::Grpc<H2Service>;

pub(crate) fn client(sender: http2::SendRequest<Body>, origin: Uri) -> GrpcClient {
    tonic::client::Grpc::with_origin(H2Service(sender), origin)
}

/// Sends one unary call and classifies how it ended: `grpc_<code>` when the server (or a
/// proxy) answered with a gRPC status, a connection class when the transport failed.
pub(crate) async fn call(
    client: &mut GrpcClient,
    method: &PathAndQuery,
    metadata: &HeaderMap,
    message: &Bytes,
) -> Result<Outcome, BoxError> {
    client.ready().await.map_err(|e| -> BoxError { e.into() })?;
    let request = tonic::Request::from_parts(
        MetadataMap::from_headers(metadata.clone()),
        tonic::Extensions::default(),
        message.clone(),
    );
    match client.unary(request, method.clone(), RawCodec).await {
        Ok(_) => Ok(Outcome::Grpc(tonic::Code::Ok as i32)),
        Err(status) => classify(status),
    }
}

/// A status tonic made from a transport error carries that error as its source; any other
/// status came from the peer.
fn classify(status: Status) -> Result<Outcome, BoxError> {
    if std::error::Error::source(&status).is_some() {
        return Err(Box::new(status));
    }
    Ok(Outcome::Grpc(status.code() as i32))
}

/// Messages as they are on the wire: the request is sent as given, the response discarded.
#[derive(Debug, Clone, Copy, Default)]
struct RawCodec;

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = ();
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> Self::Encoder {
        RawCodec
    }

    fn decoder(&mut self) -> Self::Decoder {
        RawCodec
    }
}

impl Encoder for RawCodec {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = ();
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<()>, Status> {
        src.advance(src.remaining());
        Ok(Some(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_from_the_peer_are_grpc_outcomes_transport_errors_are_not() {
        let denied = Status::permission_denied("no");
        assert_eq!(
            classify(denied).unwrap().to_string(),
            "grpc_permission_denied"
        );
        let reset = Status::from_error(Box::new(std::io::Error::from(
            std::io::ErrorKind::ConnectionReset,
        )));
        let err = classify(reset).unwrap_err();
        assert_eq!(Outcome::classify(err.as_ref()), Outcome::ConnectionReset);
    }
}
