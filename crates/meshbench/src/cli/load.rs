//! `meshbench load`: constant-rate open-loop load against a URL.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use meshbench_identity::{ClientTlsFiles, SpiffeId};
use meshbench_loadgen::{run_open_loop, OpenLoopConfig, Target};

use super::{args, BadInput};

#[derive(Debug, Args)]
pub struct LoadArgs {
    /// Target URL (http:// or https://).
    #[arg(long)]
    url: String,
    /// Requests per second, spread evenly over the connections.
    #[arg(long, value_parser = args::positive_rate)]
    rps: f64,
    /// Keep-alive connections.
    #[arg(long, default_value_t = 16)]
    connections: u32,
    /// Measured duration (after warm-up).
    #[arg(long, value_parser = args::duration, default_value = "10s")]
    duration: Duration,
    /// Warm-up before the measured window, excluded from results.
    #[arg(long, value_parser = args::duration, default_value = "0s")]
    warmup: Duration,
    /// Per-request timeout.
    #[arg(long, value_parser = args::duration, default_value = "5s")]
    timeout: Duration,
    /// Generator threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Client certificate (PEM) for mTLS.
    #[arg(long, requires = "key")]
    cert: Option<PathBuf>,
    /// Client private key (PEM).
    #[arg(long, requires = "cert")]
    key: Option<PathBuf>,
    /// CA bundle that must have issued the server's certificate.
    #[arg(long)]
    cacert: Option<PathBuf>,
    /// Accept only a server presenting this SPIFFE ID.
    #[arg(long, requires = "cacert")]
    expect_server_id: Option<String>,
    /// Write the result as JSON (meshbench's load schema).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Print nothing on success (results go to --json).
    #[arg(long)]
    quiet: bool,
}

pub fn run(a: LoadArgs) -> anyhow::Result<()> {
    let target = Target::parse(&a.url)?;
    let tls = match &a.cacert {
        Some(ca) => {
            let expect_server_id = a
                .expect_server_id
                .as_deref()
                .map(SpiffeId::parse)
                .transpose()?;
            let files = ClientTlsFiles {
                cert: a.cert.clone(),
                key: a.key.clone(),
                ca: ca.clone(),
                expect_server_id,
            };
            Some(Arc::new(meshbench_identity::client_config(
                &files,
                &[b"http/1.1"],
            )?))
        }
        None if a.cert.is_some() => {
            return Err(BadInput("--cert needs --cacert to verify the server".into()).into())
        }
        None => None,
    };
    if tls.is_some() && !target.tls {
        return Err(BadInput(format!("--cacert given but --url {} is not https", a.url)).into());
    }
    let result = run_open_loop(OpenLoopConfig {
        target,
        tls,
        rps: a.rps,
        connections: a.connections,
        duration: a.duration,
        warmup: a.warmup,
        timeout: a.timeout,
        threads: a.threads,
    })?;
    let report = result.to_report();
    if let Some(path) = &a.json {
        meshbench_results::write_json_atomic(path, &report)?;
    }
    if !a.quiet {
        print!("{}", meshbench_report::load_summary(&report));
    }
    Ok(())
}
