//! `meshbench workload <role>`: the lab's application servers.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use meshbench_identity::ServerTlsFiles;
use meshbench_lab::ReadyEvent;
use meshbench_workload::{EchoConfig, EchoService, ServeOptions};

use super::{args, BadInput};

#[derive(Debug, Subcommand)]
pub enum WorkloadCommand {
    /// HTTP/1.1 and h2c server that waits --delay, then answers --response-size bytes.
    Echo(EchoArgs),
}

#[derive(Debug, Args)]
pub struct EchoArgs {
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Time to wait before answering (E1's server sleeps 200ms).
    #[arg(long, value_parser = args::duration, default_value = "0s")]
    delay: Duration,
    #[arg(long, value_parser = args::size, default_value = "1KiB")]
    response_size: u64,
    #[command(flatten)]
    tls: ServerTlsArgs,
    /// Runtime worker threads (default: one per core).
    #[arg(long)]
    threads: Option<usize>,
}

#[derive(Debug, Args)]
struct ServerTlsArgs {
    /// Serve TLS 1.3 with this certificate (PEM).
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Require client certificates issued by this CA (mTLS).
    #[arg(long, requires = "tls_cert")]
    client_ca: Option<PathBuf>,
}

impl ServerTlsArgs {
    fn files(&self) -> Option<ServerTlsFiles> {
        Some(ServerTlsFiles {
            cert: self.tls_cert.clone()?,
            key: self.tls_key.clone()?,
            client_ca: self.client_ca.clone(),
        })
    }
}

pub fn run(command: WorkloadCommand) -> anyhow::Result<()> {
    match command {
        WorkloadCommand::Echo(a) => {
            let response_size = usize::try_from(a.response_size).map_err(|_| {
                BadInput(format!("--response-size {} is too large", a.response_size))
            })?;
            let service = EchoService::new(&EchoConfig {
                delay: a.delay,
                response_size,
            });
            let options = ServeOptions {
                listen: a.listen,
                tls: a.tls.files(),
                drain_timeout: Duration::from_secs(5),
            };
            serve(a.threads, options, service)
        }
    }
}

fn serve(
    threads: Option<usize>,
    options: ServeOptions,
    service: EchoService,
) -> anyhow::Result<()> {
    if threads == Some(0) {
        return Err(BadInput("--threads must be at least 1".into()).into());
    }
    let runtime = meshbench_workload::runtime(threads)?;
    runtime.block_on(async move {
        let server = meshbench_workload::bind(&options).await?;
        let ready = ReadyEvent::ready(Some(server.local_addr().to_string()));
        println!("{}", serde_json::to_string(&ready)?);
        server.serve(service, shutdown_signal()).await;
        Ok(())
    })
}

/// Resolves on SIGTERM or Ctrl-C.
pub(crate) async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("installing a SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
