//! `meshbench load`: every load model, with results as a summary, our JSON, a Fortio JSON
//! export and an HdrHistogram interval log.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use clap::{Args, ValueEnum};
use http::{HeaderName, HeaderValue, Method};
use meshbench_identity::{ClientTlsFiles, SpiffeId};
use meshbench_loadgen::{
    run_load, Body, ClientTlsSpec, LoadConfig, LoadModel, LoadOutput, LoadSpec, Protocol,
    RequestFile, RequestSpec, Target,
};
use meshbench_role::RoleConfig;

use super::{args, BadInput};

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Model {
    /// Constant rate (--rps) spread over the connections; latency from the intended send time.
    Open,
    /// Each connection sends as soon as its previous request ended.
    Closed,
    /// One request at a time in groups (--group-size, --group-interval), as E3's experimenter.
    Sequential,
    /// --users each sending --requests-per-user back to back, as apache ab (E4).
    Users,
}

#[derive(Debug, Args)]
pub struct LoadArgs {
    /// Run the load spec in this YAML file (what the lab writes); no other flag may be given.
    #[arg(long, exclusive = true)]
    config: Option<PathBuf>,
    /// Target URL (http:// or https://).
    #[arg(long, required_unless_present = "config")]
    url: Option<String>,
    #[arg(long, value_enum, default_value = "open")]
    model: Model,
    /// Requests per second for the open model, spread evenly over the connections.
    #[arg(long, value_parser = args::positive_rate, allow_negative_numbers = true)]
    rps: Option<f64>,
    /// Keep-alive connections (open and closed models).
    #[arg(long, default_value_t = 16)]
    connections: u32,
    /// Measured duration, after warm-up.
    #[arg(long, value_parser = args::duration, conflicts_with = "requests")]
    duration: Option<Duration>,
    /// Stop after this many measured requests instead of after a duration.
    #[arg(long)]
    requests: Option<u64>,
    /// Warm-up time excluded from the results.
    #[arg(long, value_parser = args::duration, conflicts_with = "warmup_requests")]
    warmup: Option<Duration>,
    /// Warm-up requests excluded from the results.
    #[arg(long)]
    warmup_requests: Option<u64>,
    /// Sequential model: requests per group.
    #[arg(long, default_value_t = 10)]
    group_size: u64,
    /// Sequential model: pause between groups.
    #[arg(long, value_parser = args::duration, default_value = "0s")]
    group_interval: Duration,
    /// Users model: concurrent users.
    #[arg(long, default_value_t = 10)]
    users: u32,
    /// Users model: requests each user sends.
    #[arg(long, default_value_t = 10)]
    requests_per_user: u64,
    /// Per-request timeout.
    #[arg(long, value_parser = args::duration, default_value = "5s")]
    timeout: Duration,
    /// Generator threads; connections are spread over them.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// HTTP method.
    #[arg(long, default_value = "GET")]
    method: String,
    /// Request header "Name: value" (repeatable).
    #[arg(long = "header", short = 'H')]
    headers: Vec<String>,
    /// Request body.
    #[arg(long, conflicts_with_all = ["body_file", "payload_size"])]
    body: Option<String>,
    /// Request body from a file.
    #[arg(long, conflicts_with = "payload_size")]
    body_file: Option<PathBuf>,
    /// A request body of this many bytes (for example 1KiB).
    #[arg(long, value_parser = args::size)]
    payload_size: Option<u64>,
    /// HTTP/2: h2c for http://, h2 over TLS for https://.
    #[arg(long)]
    http2: bool,
    /// Unary gRPC over HTTP/2 (h2c or h2). The URL's path is the method; without one, Fortio's
    /// /fgrpc.PingServer/Ping (served by `meshbench workload grpc-echo`), whose message is built
    /// from --payload-size. --body/--body-file give any method's serialized message; headers
    /// become metadata.
    #[arg(long, conflicts_with_all = ["http2", "method"])]
    grpc: bool,
    /// HTTP/1.1 without keep-alive: one connection per request.
    #[arg(long, conflicts_with_all = ["http2", "grpc"])]
    no_keepalive: bool,
    /// Close each connection after this many requests.
    #[arg(long)]
    max_requests_per_connection: Option<u64>,
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
    /// Before measuring, send single requests until one gets an HTTP response, for at most
    /// this long (they are not measured).
    #[arg(long, value_parser = super::args::positive_duration)]
    wait_for_target: Option<std::time::Duration>,
    /// Write the result as JSON (meshbench's load schema).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Include every request (intended time, latency, outcome) in --json.
    #[arg(long, requires = "json")]
    samples: bool,
    /// Write a Fortio-compatible result JSON (for Fortio's UI).
    #[arg(long)]
    fortio_json: Option<PathBuf>,
    /// Write an HdrHistogram interval log, one histogram per second.
    #[arg(long)]
    hlog: Option<PathBuf>,
    /// Append each second of the window to this file as one JSON line while the load runs (a
    /// preview for watchers; --json's series is exact).
    #[arg(long)]
    live: Option<PathBuf>,
    /// Print nothing on success (results go to the files).
    #[arg(long)]
    quiet: bool,
}

pub fn run(a: LoadArgs) -> anyhow::Result<()> {
    let spec = match &a.config {
        Some(path) => LoadSpec::load(path)?,
        None => a.into_spec()?,
    };
    if let Some(gate) = &spec.start_gate {
        wait_at_gate(gate)?;
    }
    if let Some(limit) = spec.wait_for_target {
        wait_for_target(&spec, limit)?;
    }
    let config = load_config(&spec)?;
    let out = &spec.output;
    let started = SystemTime::now();
    let result = run_load(config)?;
    let report = result.to_report();
    if let Some(path) = &out.json {
        meshbench_results::write_json_atomic(path, &report)?;
    }
    if let Some(path) = &out.fortio_json {
        let fortio = meshbench_loadgen::export::fortio_json(&report, started)
            .expect("a report the generator just wrote has its own histogram");
        meshbench_results::write_json_atomic(path, &fortio)?;
    }
    if let Some(path) = &out.hlog {
        let mut file = std::io::BufWriter::new(std::fs::File::create(path)?);
        meshbench_loadgen::export::write_hlog(&result, started, &mut file)?;
        std::io::Write::flush(&mut file)?;
    }
    if !out.quiet {
        print!("{}", meshbench_report::load_summary(&report));
    }
    if out.stdout_json {
        println!("{}", serde_json::to_string(&report)?);
    }
    Ok(())
}

/// Waits until `gate` exists (the orchestrator opens it), for at most START_GATE_LIMIT.
pub(super) fn wait_at_gate(gate: &std::path::Path) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    while !gate.exists() {
        if started.elapsed() >= meshbench_loadgen::START_GATE_LIMIT {
            anyhow::bail!(
                "start_gate: {} did not appear within {}",
                gate.display(),
                humantime::format_duration(meshbench_loadgen::START_GATE_LIMIT)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Ok(())
}

/// Probes the target until a request gets an HTTP response, or fails naming the last outcome.
fn wait_for_target(spec: &LoadSpec, limit: std::time::Duration) -> anyhow::Result<()> {
    let probe = spec.probe();
    let started = std::time::Instant::now();
    loop {
        let report = run_load(load_config(&probe)?)?.to_report();
        if report.outcomes.keys().any(|o| o.starts_with("http_")) {
            return Ok(());
        }
        let last = report
            .outcomes
            .keys()
            .cloned()
            .collect::<Vec<_>>()
            .join(", ");
        tracing::info!(url = %spec.url, outcome = %last, "the target does not answer yet");
        if started.elapsed() >= limit {
            anyhow::bail!(
                "{}: no HTTP response within wait_for_target ({}); the last probe ended in {last}",
                spec.url,
                humantime::format_duration(limit)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

impl LoadArgs {
    /// The flags as the spec the lab would have written.
    fn into_spec(self) -> anyhow::Result<LoadSpec> {
        let model = match self.model {
            // clap's `required_if_eq` does not fire when `--model` is left at its default.
            Model::Open => LoadModel::OpenLoop {
                rps: self.rps.ok_or_else(|| {
                    BadInput("--rps is required by --model open (the default); --model closed sends as fast as it can".into())
                })?,
            },
            Model::Closed => LoadModel::ClosedLoop,
            Model::Sequential => LoadModel::Sequential {
                group_size: self.group_size,
                group_interval: self.group_interval,
            },
            Model::Users => LoadModel::Users {
                users: self.users,
                requests_per_user: self.requests_per_user,
            },
        };
        let protocol = if self.grpc {
            Protocol::Grpc
        } else if self.http2 {
            Protocol::Http2
        } else {
            Protocol::Http1 {
                keep_alive: !self.no_keepalive,
            }
        };
        let body = match (self.body, self.body_file, self.payload_size) {
            (Some(text), _, _) => Body::Text(text),
            (_, Some(path), _) => Body::File(path),
            (_, _, Some(size)) => Body::PayloadSize(size),
            _ => Body::Empty,
        };
        let tls = match self.cacert {
            Some(ca) => Some(ClientTlsSpec {
                cert: self.cert,
                key: self.key,
                ca,
                expect_server_id: self.expect_server_id,
            }),
            None if self.cert.is_some() => {
                return Err(BadInput("--cert needs --cacert to verify the server".into()).into())
            }
            None => None,
        };
        Ok(LoadSpec {
            url: self.url.expect("clap requires --url without --config"),
            model,
            connections: self.connections,
            duration: self.duration,
            requests: self.requests,
            warmup: self.warmup,
            warmup_requests: self.warmup_requests,
            timeout: self.timeout,
            threads: self.threads,
            protocol,
            request: RequestFile {
                method: self.method,
                headers: self.headers,
                body,
            },
            max_requests_per_connection: self.max_requests_per_connection,
            tls,
            wait_for_target: self.wait_for_target,
            start_gate: None,
            output: LoadOutput {
                json: self.json,
                samples: self.samples,
                fortio_json: self.fortio_json,
                hlog: self.hlog,
                live: self.live,
                quiet: self.quiet,
                stdout_json: false,
            },
        })
    }
}

/// A spec resolved into what the engine runs: the URL parsed, files read, TLS built. Fields
/// at fault are named by their flags (the spec's fields have the same names).
fn load_config(spec: &LoadSpec) -> anyhow::Result<LoadConfig> {
    let target = Target::parse(&spec.url)?;
    let request = request_spec(spec, &target)?;
    Ok(LoadConfig {
        tls: client_tls(spec.tls.as_ref(), &spec.url, &target)?,
        target,
        model: spec.model.clone(),
        connections: spec.connections,
        stop: spec.stop(),
        warmup: spec.warmup(),
        timeout: spec.timeout,
        protocol: spec.protocol,
        request,
        max_requests_per_connection: spec.max_requests_per_connection,
        threads: spec.threads,
        keep_samples: spec.output.samples,
        live: spec.output.live.clone(),
    })
}

fn request_spec(spec: &LoadSpec, target: &Target) -> anyhow::Result<RequestSpec> {
    let r = &spec.request;
    let method = Method::from_bytes(r.method.as_bytes())
        .map_err(|_| BadInput(format!("--method {:?} is not an HTTP method", r.method)))?;
    let headers = r
        .headers
        .iter()
        .map(|h| {
            let bad = || BadInput(format!("--header {h:?}: expected \"Name: value\""));
            let (name, value) = h.split_once(':').ok_or_else(bad)?;
            let name = HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| bad())?;
            let value = HeaderValue::from_str(value.trim()).map_err(|_| bad())?;
            Ok((name, value))
        })
        .collect::<Result<Vec<_>, BadInput>>()?;
    let grpc = spec.protocol == Protocol::Grpc;
    let pings = grpc && target.path_and_query.as_str() == "/";
    let body = match &r.body {
        Body::Text(text) => text.clone().into_bytes().into(),
        Body::File(path) => std::fs::read(path)
            .map_err(|e| BadInput(format!("--body-file {}: {e}", path.display())))?
            .into(),
        Body::PayloadSize(size) if pings => {
            meshbench_workload::ping_request(usize::try_from(*size)?).into()
        }
        Body::Empty if pings => meshbench_workload::ping_request(0).into(),
        Body::PayloadSize(_) if grpc => {
            return Err(BadInput(format!(
                "--payload-size builds Fortio's ping message, but --url {} names another method: give its serialized message with --body-file",
                spec.url
            ))
            .into())
        }
        Body::PayloadSize(size) => vec![b'x'; usize::try_from(*size)?].into(),
        Body::Empty => bytes::Bytes::new(),
    };
    Ok(RequestSpec {
        method,
        headers,
        body,
    })
}

fn client_tls(
    tls: Option<&ClientTlsSpec>,
    url: &str,
    target: &Target,
) -> anyhow::Result<Option<Arc<rustls::ClientConfig>>> {
    let Some(tls) = tls else {
        return Ok(None);
    };
    if !target.tls {
        return Err(BadInput(format!("--cacert given but --url {url} is not https")).into());
    }
    if tls.cert.is_some() != tls.key.is_some() {
        return Err(BadInput("--cert and --key go together".into()).into());
    }
    let expect_server_id = tls
        .expect_server_id
        .as_deref()
        .map(SpiffeId::parse)
        .transpose()?;
    let files = ClientTlsFiles {
        cert: tls.cert.clone(),
        key: tls.key.clone(),
        ca: tls.ca.clone(),
        expect_server_id,
    };
    // ALPN is chosen by the load generator for the protocol it speaks.
    Ok(Some(Arc::new(meshbench_identity::client_config(
        &files,
        &[],
    )?)))
}
