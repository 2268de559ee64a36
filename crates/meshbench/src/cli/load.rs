//! `meshbench load`: every load model, with results as a summary, our JSON, a Fortio JSON
//! export and an HdrHistogram interval log.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use clap::{Args, ValueEnum};
use http::{HeaderName, HeaderValue, Method};
use meshbench_identity::{ClientTlsFiles, SpiffeId};
use meshbench_loadgen::{
    run_load, LoadConfig, LoadModel, Protocol, RequestSpec, Stop, Target, Warmup,
};

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
    /// Target URL (http:// or https://).
    #[arg(long)]
    url: String,
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
    /// Print nothing on success (results go to the files).
    #[arg(long)]
    quiet: bool,
}

pub fn run(a: LoadArgs) -> anyhow::Result<()> {
    let config = load_config(&a)?;
    let started = SystemTime::now();
    let result = run_load(config)?;
    let report = result.to_report();
    if let Some(path) = &a.json {
        meshbench_results::write_json_atomic(path, &report)?;
    }
    if let Some(path) = &a.fortio_json {
        let fortio = meshbench_loadgen::export::fortio_json(&result, started);
        meshbench_results::write_json_atomic(path, &fortio)?;
    }
    if let Some(path) = &a.hlog {
        let mut file = std::io::BufWriter::new(std::fs::File::create(path)?);
        meshbench_loadgen::export::write_hlog(&result, started, &mut file)?;
        std::io::Write::flush(&mut file)?;
    }
    if !a.quiet {
        print!("{}", meshbench_report::load_summary(&report));
    }
    Ok(())
}

fn load_config(a: &LoadArgs) -> anyhow::Result<LoadConfig> {
    let target = Target::parse(&a.url)?;
    let model = match a.model {
        // clap's `required_if_eq` does not fire when `--model` is left at its default.
        Model::Open => LoadModel::OpenLoop {
            rps: a.rps.ok_or_else(|| {
                BadInput("--rps is required by --model open (the default); --model closed sends as fast as it can".into())
            })?,
        },
        Model::Closed => LoadModel::ClosedLoop,
        Model::Sequential => LoadModel::Sequential {
            group_size: a.group_size,
            group_interval: a.group_interval,
        },
        Model::Users => LoadModel::Users {
            users: a.users,
            requests_per_user: a.requests_per_user,
        },
    };
    let stop = match (a.duration, a.requests, &model) {
        (Some(d), _, _) => Stop::After(d),
        (None, Some(n), _) => Stop::Requests(n),
        (
            None,
            None,
            LoadModel::Users {
                users,
                requests_per_user,
            },
        ) => Stop::Requests(u64::from(*users) * requests_per_user),
        (None, None, _) => Stop::After(Duration::from_secs(10)),
    };
    let warmup = match (a.warmup, a.warmup_requests) {
        (Some(d), _) => Warmup::Time(d),
        (None, Some(n)) => Warmup::Requests(n),
        (None, None) => Warmup::None,
    };
    let protocol = if a.grpc {
        Protocol::Grpc
    } else if a.http2 {
        Protocol::Http2
    } else {
        Protocol::Http1 {
            keep_alive: !a.no_keepalive,
        }
    };
    let request = request_spec(a, &target)?;
    Ok(LoadConfig {
        tls: client_tls(a, &target)?,
        target,
        model,
        connections: a.connections,
        stop,
        warmup,
        timeout: a.timeout,
        protocol,
        request,
        max_requests_per_connection: a.max_requests_per_connection,
        threads: a.threads,
        keep_samples: a.samples,
    })
}

fn request_spec(a: &LoadArgs, target: &Target) -> anyhow::Result<RequestSpec> {
    let method = Method::from_bytes(a.method.as_bytes())
        .map_err(|_| BadInput(format!("--method {:?} is not an HTTP method", a.method)))?;
    let headers = a
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
    let pings = a.grpc && target.path_and_query.as_str() == "/";
    let body = match (&a.body, &a.body_file, a.payload_size) {
        (Some(text), _, _) => text.clone().into_bytes().into(),
        (_, Some(path), _) => std::fs::read(path)
            .map_err(|e| BadInput(format!("--body-file {}: {e}", path.display())))?
            .into(),
        (_, _, size) if pings => {
            meshbench_workload::ping_request(usize::try_from(size.unwrap_or(0))?).into()
        }
        (_, _, Some(_)) if a.grpc => {
            return Err(BadInput(format!(
                "--payload-size builds Fortio's ping message, but --url {} names another method: give its serialized message with --body-file",
                a.url
            ))
            .into())
        }
        (_, _, Some(size)) => vec![b'x'; usize::try_from(size)?].into(),
        _ => bytes::Bytes::new(),
    };
    Ok(RequestSpec {
        method,
        headers,
        body,
    })
}

fn client_tls(a: &LoadArgs, target: &Target) -> anyhow::Result<Option<Arc<rustls::ClientConfig>>> {
    let Some(ca) = &a.cacert else {
        if a.cert.is_some() {
            return Err(BadInput("--cert needs --cacert to verify the server".into()).into());
        }
        return Ok(None);
    };
    if !target.tls {
        return Err(BadInput(format!("--cacert given but --url {} is not https", a.url)).into());
    }
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
    // ALPN is chosen by the load generator for the protocol it speaks.
    Ok(Some(Arc::new(meshbench_identity::client_config(
        &files,
        &[],
    )?)))
}
