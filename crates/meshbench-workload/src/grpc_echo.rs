//! The grpc-echo role: unary gRPC with the echo's delay and size knobs. It speaks Fortio's
//! ping service (`fgrpc.PingServer/Ping`), so Fortio's gRPC load generator can drive it, and
//! the standard `grpc.health.v1.Health` service.
//!
//! A reply echoes the request's sequence number and payload and carries the server's receive
//! time in `ts` (nanoseconds since the Unix epoch), as Fortio's does. The delay is the
//! request's `delayNanos` when set, else the metadata `x-echo-delay`, else the server's
//! `--delay` mix. With `x-echo-size` or a server `--response-size`, the reply's payload is
//! that many bytes instead of the request's.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tonic::{Request, Response, Status};

use crate::mix::{parse_delay, parse_size, Mix, Tickets, MAX_DELAY};

/// The generated protobuf types, client and server.
#[allow(clippy::all, clippy::pedantic)]
pub mod proto {
    include!("generated/fgrpc.rs");
}

use proto::ping_server_server::{PingServer, PingServerServer};
use proto::PingMessage;

#[derive(Debug, Clone)]
pub struct GrpcEchoConfig {
    pub delay: Mix<Duration>,
    /// `None`: echo the request's payload.
    pub response_size: Option<Mix<usize>>,
}

pub struct GrpcEcho {
    config: GrpcEchoConfig,
    tickets: Tickets,
}

impl GrpcEcho {
    pub fn new(config: &GrpcEchoConfig) -> Self {
        GrpcEcho {
            config: config.clone(),
            tickets: Tickets::default(),
        }
    }
}

fn metadata_mix<T: Clone>(
    request: &Request<PingMessage>,
    knob: &'static str,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<Option<Mix<T>>, Status> {
    let Some(value) = request.metadata().get(format!("x-echo-{knob}").as_str()) else {
        return Ok(None);
    };
    let text = value
        .to_str()
        .map_err(|_| Status::invalid_argument(format!("x-echo-{knob}: not ASCII")))?;
    Mix::parse(knob, text, parse)
        .map(Some)
        .map_err(|e| Status::invalid_argument(e.to_string()))
}

#[tonic::async_trait]
impl PingServer for GrpcEcho {
    async fn ping(&self, request: Request<PingMessage>) -> Result<Response<PingMessage>, Status> {
        let received = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
        let ticket = self.tickets.next();
        let delay_override = metadata_mix(&request, "delay", parse_delay)?;
        let size_override = metadata_mix(&request, "size", parse_size)?;
        let message = request.into_inner();
        let delay = if message.delay_nanos > 0 {
            let asked = Duration::from_nanos(message.delay_nanos.unsigned_abs());
            if asked > MAX_DELAY {
                return Err(Status::invalid_argument(format!(
                    "delayNanos: {} is longer than the {}s limit",
                    message.delay_nanos,
                    MAX_DELAY.as_secs()
                )));
            }
            asked
        } else {
            delay_override
                .and_then(|m| m.pick(ticket))
                .or_else(|| self.config.delay.pick(ticket))
                .unwrap_or_default()
        };
        let size = size_override.and_then(|m| m.pick(ticket)).or_else(|| {
            self.config
                .response_size
                .as_ref()
                .and_then(|m| m.pick(ticket))
        });
        if !delay.is_zero() {
            match meshbench_time::PreciseTimer::new() {
                Ok(mut timer) => {
                    let _ = timer.sleep(delay).await;
                }
                Err(_) => tokio::time::sleep(delay).await,
            }
        }
        let payload = match size {
            Some(size) => "x".repeat(size),
            None => message.payload,
        };
        Ok(Response::new(PingMessage {
            seq: message.seq,
            ts: received,
            payload,
            delay_nanos: message.delay_nanos,
        }))
    }
}

/// A serialized `PingMessage` carrying `payload_bytes` bytes: the request a gRPC load run
/// sends to Fortio's ping method, encoded once per run.
pub fn ping_request(payload_bytes: usize) -> Vec<u8> {
    prost::Message::encode_to_vec(&PingMessage {
        payload: "x".repeat(payload_bytes),
        ..PingMessage::default()
    })
}

/// The gRPC services (ping and health) as one hyper service for [`crate::BoundServer::serve`].
pub async fn grpc_echo_service(
    config: &GrpcEchoConfig,
) -> hyper_util::service::TowerToHyperService<tonic::service::Routes> {
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter.set_serving::<PingServerServer<GrpcEcho>>().await;
    let echo = PingServerServer::from_arc(Arc::new(GrpcEcho::new(config)));
    let routes = tonic::service::Routes::new(echo).add_service(health);
    hyper_util::service::TowerToHyperService::new(routes)
}
