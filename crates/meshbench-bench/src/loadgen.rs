//! `meshbench bench loadgen`: meshbench's load generator against wrk, Fortio and oha on the
//! same echo target, the generators pinned to one CPU and the target to another.
//!
//! Cases: closed loop over 16 connections (throughput and client CPU per request, against wrk,
//! Fortio and oha); a fixed 5k rps (client CPU per 100k requests, against Fortio `-uniform` and
//! oha `-q`); a fixed 1k rps over 16 connections (the p50 measurement floor, against both).
//! Our p50 is the corrected one (from each request's intended send time to the kernel's
//! arrival time of the answer's last bytes); theirs is measured from the actual send to when
//! they read the answer, so a late send counts against us only, and their own wake-up after
//! the answer counts against them only.
//! Last, each fixed-rate tool runs once more at 5k rps under a packet capture on loopback, and
//! the spacing of its requests on the wire is reported (`pacing`): CPU per request at a fixed
//! rate mostly counts wake-ups, and a tool that sends in bursts wakes less often.
//! A peer may be left out by name (`--without oha`): it is then not run, nothing is compared
//! with it, and the report says so and which targets went unjudged. A peer neither installed
//! nor left out is an error.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use meshbench_lab::BuildInfo;
use meshbench_loadgen::{LoadModel, LoadSpec};
use meshbench_netlab::which;
use meshbench_results::{BenchMeasurement, BenchRatio, BenchReport, SCHEMA_VERSION};

use crate::floor::closed::closed_floor;
use crate::floor::paced::paced_floor;
use crate::floor::{FloorRun, CLOSED_FLOOR, PACED_FLOOR};
use crate::process::{run_measured, run_meshbench_load, start_echo, version_of};
use crate::Error;

pub(crate) const FORTIO_INSTALL: &str =
    "install it with `GOBIN=/usr/local/bin go install fortio.org/fortio@v1.68.2` (newer versions do not install)";
pub(crate) const WRK_INSTALL: &str = "install it with `apt-get install wrk`";
pub(crate) const OHA_INSTALL: &str = "install it with `cargo install --locked oha@1.16.0`";

#[derive(Debug, Clone)]
pub struct LoadgenBenchOptions {
    /// The meshbench binary (generator and target).
    pub meshbench: PathBuf,
    pub duration: Duration,
    /// Rounds of every case and tool, interleaved; ratios compare medians.
    pub repetitions: u32,
    pub generator_cpu: usize,
    pub target_cpu: usize,
    pub response_bytes: u64,
    pub work_dir: PathBuf,
    pub build: BuildInfo,
    /// Peers not to run (`--without`): the report says what was left out.
    pub without: Vec<LoadgenPeer>,
}

/// A third-party load generator the benchmark runs beside meshbench's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LoadgenPeer {
    Wrk,
    Fortio,
    Oha,
}

impl LoadgenPeer {
    pub const ALL: [LoadgenPeer; 3] = [LoadgenPeer::Wrk, LoadgenPeer::Fortio, LoadgenPeer::Oha];

    /// Its binary's name, which is also how the report and `--without` name it.
    pub fn name(self) -> &'static str {
        match self {
            LoadgenPeer::Wrk => "wrk",
            LoadgenPeer::Fortio => "fortio",
            LoadgenPeer::Oha => "oha",
        }
    }

    fn install(self) -> &'static str {
        match self {
            LoadgenPeer::Wrk => WRK_INSTALL,
            LoadgenPeer::Fortio => FORTIO_INSTALL,
            LoadgenPeer::Oha => OHA_INSTALL,
        }
    }
}

impl std::str::FromStr for LoadgenPeer {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|peer| peer.name() == s)
            .ok_or_else(|| format!("`{s}` is not a peer of bench loadgen (wrk, fortio, oha)"))
    }
}

/// Where each peer that runs is; `None` for one left out.
struct Peers {
    wrk: Option<PathBuf>,
    fortio: Option<PathBuf>,
    oha: Option<PathBuf>,
}

fn find_peers(without: &[LoadgenPeer]) -> Result<Peers, Error> {
    let find = |peer: LoadgenPeer| {
        if without.contains(&peer) {
            return Ok(None);
        }
        which(peer.name())
            .map(Some)
            .ok_or_else(|| Error::MissingPeer {
                tool: peer.name().to_owned(),
                install: format!(
                    "{}, or leave it out with `--without {}`",
                    peer.install(),
                    peer.name()
                ),
            })
    };
    Ok(Peers {
        wrk: find(LoadgenPeer::Wrk)?,
        fortio: find(LoadgenPeer::Fortio)?,
        oha: find(LoadgenPeer::Oha)?,
    })
}

pub(crate) fn secs(d: Duration) -> String {
    format!("{}s", d.as_secs().max(1))
}

pub(crate) fn measurement(
    case: &str,
    tool: &str,
    version: &str,
    requests: u64,
    seconds: f64,
    cpu_seconds: f64,
    p50_us: Option<f64>,
) -> BenchMeasurement {
    BenchMeasurement {
        case: case.to_owned(),
        tool: tool.to_owned(),
        tool_version: version.to_owned(),
        repetition: None,
        requests,
        seconds,
        requests_per_second: requests as f64 / seconds.max(1e-9),
        cpu_seconds,
        cpu_us_per_request: cpu_seconds * 1e6 / requests.max(1) as f64,
        p50_us,
        p99_us: None,
        errors: None,
        memory_bytes: None,
        pacing: None,
    }
}

/// One case of the benchmark: its name, the target and who measures it.
#[derive(Clone, Copy)]
struct Case<'a> {
    opts: &'a LoadgenBenchOptions,
    peers: &'a Peers,
    name: &'a str,
    url: &'a str,
    target: std::net::SocketAddr,
}

fn run_meshbench(c: &Case<'_>, model: LoadModel) -> Result<BenchMeasurement, Error> {
    let (opts, case, url) = (c.opts, c.name, c.url);
    let mut spec = LoadSpec::new(url, model);
    spec.connections = 16;
    spec.duration = Some(opts.duration);
    let (report, cpu_seconds) = run_meshbench_load(
        &opts.meshbench,
        spec,
        &opts.work_dir,
        &format!("{case}.meshbench"),
        opts.generator_cpu,
        None,
    )?;
    Ok(measurement(
        case,
        "meshbench",
        &opts.build.version,
        report.sent,
        report.window.seconds,
        cpu_seconds,
        Some(report.latency.p50_us as f64),
    ))
}

/// The evenly paced floor ([`crate::floor::paced`]) as a measurement row.
fn run_paced_floor(c: &Case<'_>, rps: u32) -> Result<BenchMeasurement, Error> {
    let (opts, case, target) = (c.opts, c.name, c.target);
    let run = paced_floor(target, rps, 16, opts.duration, opts.generator_cpu)?;
    let min_answer_bytes = run.requests.saturating_sub(16) * opts.response_bytes;
    if run.answer_bytes < min_answer_bytes {
        return Err(Error::Output {
            tool: PACED_FLOOR.into(),
            reason: format!(
                "{} bytes of answers to {} requests of {} B responses: the target fell behind",
                run.answer_bytes, run.requests, opts.response_bytes
            ),
        });
    }
    Ok(floor_row(opts, case, PACED_FLOOR, run))
}

/// The closed-loop floor ([`crate::floor::closed`]) as a measurement row.
fn run_closed_floor(c: &Case<'_>) -> Result<BenchMeasurement, Error> {
    let (opts, case, target) = (c.opts, c.name, c.target);
    let run = closed_floor(target, 16, opts.duration, opts.generator_cpu)?;
    Ok(floor_row(opts, case, CLOSED_FLOOR, run))
}

/// A floor times no request, so its row has no latency.
fn floor_row(
    opts: &LoadgenBenchOptions,
    case: &str,
    tool: &str,
    run: FloorRun,
) -> BenchMeasurement {
    measurement(
        case,
        tool,
        &opts.build.version,
        run.requests,
        run.seconds,
        run.cpu_seconds,
        None,
    )
}

/// What a peer's output says: requests, seconds measured and the median latency (µs).
type PeerFigures = (u64, f64, Option<f64>);

/// Runs a peer's `command` on the generator's CPU and reads its figures from its output (or
/// the files it wrote) with `figures`.
fn run_peer(
    opts: &LoadgenBenchOptions,
    case: &str,
    tool: &str,
    binary: &std::path::Path,
    version_args: &[&str],
    mut command: Command,
    figures: impl FnOnce(&std::process::Output) -> Result<PeerFigures, Error>,
) -> Result<BenchMeasurement, Error> {
    let run = run_measured(&mut command, opts.generator_cpu, tool)?;
    let (requests, seconds, p50_us) = figures(&run.output)?;
    let version = version_of(binary, version_args);
    Ok(measurement(
        case,
        tool,
        &version,
        requests,
        seconds,
        run.cpu_seconds,
        p50_us,
    ))
}

fn run_wrk(c: &Case<'_>, wrk: &Path) -> Result<BenchMeasurement, Error> {
    let (opts, case, url) = (c.opts, c.name, c.url);
    let mut command = Command::new(wrk);
    command
        .args(["-t1", "-c16", "--latency", "-d"])
        .arg(secs(opts.duration))
        .arg(url);
    run_peer(opts, case, "wrk", wrk, &["-v"], command, |output| {
        let text = String::from_utf8_lossy(&output.stdout);
        let bad = |reason: &str| Error::Output {
            tool: "wrk".into(),
            reason: format!("{reason} in:\n{text}"),
        };
        // "  123456 requests in 5.00s, 130.00MB read"
        let (requests, seconds) = text
            .lines()
            .find_map(|l| {
                let (n, rest) = l.trim().split_once(" requests in ")?;
                let secs = rest.split(',').next()?.trim().strip_suffix('s')?;
                Some((n.parse::<u64>().ok()?, secs.parse::<f64>().ok()?))
            })
            .ok_or_else(|| bad("no request count"))?;
        // Latency distribution: "     50%   95.00us"
        let p50_us = text.lines().find_map(|l| {
            let value = l.trim().strip_prefix("50%")?.trim();
            parse_wrk_duration_us(value)
        });
        Ok((requests, seconds, p50_us))
    })
}

fn parse_wrk_duration_us(value: &str) -> Option<f64> {
    let (number, factor) = if let Some(v) = value.strip_suffix("us") {
        (v, 1.0)
    } else if let Some(v) = value.strip_suffix("ms") {
        (v, 1e3)
    } else if let Some(v) = value.strip_suffix('s') {
        (v, 1e6)
    } else {
        return None;
    };
    number.parse::<f64>().ok().map(|n| n * factor)
}

/// A peer's JSON result, and the error to raise for a field missing from it.
fn tool_json(
    tool: &'static str,
    path: &std::path::Path,
) -> Result<(serde_json::Value, impl Fn(String) -> Error), Error> {
    let bad = move |reason: String| Error::Output {
        tool: tool.into(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    let value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    Ok((value, bad))
}

fn run_fortio(c: &Case<'_>, fortio: &Path, qps: u32) -> Result<BenchMeasurement, Error> {
    let (opts, case, url) = (c.opts, c.name, c.url);
    let json = opts.work_dir.join(format!("{case}.fortio.json"));
    let mut command = Command::new(fortio);
    command
        // 1 µs histogram resolution: Fortio's default 1 ms buckets turn sub-millisecond
        // latencies into interpolation (the pitfall in the reference experiments).
        .args(["load", "-quiet", "-r", "0.000001", "-c", "16", "-qps"])
        .arg(qps.to_string())
        .arg("-t")
        .arg(secs(opts.duration))
        .arg("-json")
        .arg(&json);
    if qps > 0 {
        command.arg("-uniform");
    }
    command.arg(url);
    run_peer(opts, case, "fortio", fortio, &["version"], command, |_| {
        let (v, bad) = tool_json("fortio", &json)?;
        let requests = v["DurationHistogram"]["Count"]
            .as_u64()
            .ok_or_else(|| bad("no DurationHistogram.Count".into()))?;
        let seconds = v["ActualDuration"].as_f64().unwrap_or(0.0) / 1e9;
        let p50_us = v["DurationHistogram"]["Percentiles"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["Percentile"] == 50.0))
            .and_then(|p| p["Value"].as_f64())
            .map(|s| s * 1e6);
        Ok((requests, seconds, p50_us))
    })
}

/// oha: `qps == 0` is its closed loop (each of the 16 workers sends as soon as its previous
/// response ended); otherwise `-q` paces requests with tokio's timer.
fn run_oha(c: &Case<'_>, oha: &Path, qps: u32) -> Result<BenchMeasurement, Error> {
    let (opts, case, url) = (c.opts, c.name, c.url);
    let json = opts.work_dir.join(format!("{case}.oha.json"));
    let mut command = Command::new(oha);
    command
        .args(["--no-tui", "-c", "16", "--output-format", "json", "-z"])
        .arg(secs(opts.duration))
        .arg("-o")
        .arg(&json);
    if qps > 0 {
        command.arg("-q").arg(qps.to_string());
    }
    command.arg(url);
    run_peer(opts, case, "oha", oha, &["--version"], command, |_| {
        let (v, bad) = tool_json("oha", &json)?;
        let count = |key: &str| {
            v[key]
                .as_object()
                .map_or(0, |m| m.values().filter_map(|n| n.as_u64()).sum::<u64>())
        };
        let requests = count("statusCodeDistribution") + count("errorDistribution");
        let seconds = v["summary"]["total"]
            .as_f64()
            .ok_or_else(|| bad("no summary.total".into()))?;
        let p50_us = v["latencyPercentiles"]["p50"].as_f64().map(|s| s * 1e6);
        Ok((requests, seconds, p50_us))
    })
}

/// The median (midpoint of the two middle values for an even count); `None` when empty.
pub(crate) fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    (!values.is_empty()).then(|| meshbench_stats::percentile(&values, 50.0))
}

/// A figure the ratios compare: its name, and how to read it off a measurement.
type Metric = (&'static str, fn(&BenchMeasurement) -> Option<f64>);
const RPS: Metric = ("requests per second", |x| Some(x.requests_per_second));
const CPU: Metric = ("client CPU us per request", |x| Some(x.cpu_us_per_request));
const CPU_100K: Metric = ("client CPU s per 100k requests", |x| {
    Some(x.cpu_us_per_request * 1e5 / 1e6)
});
const P50: Metric = ("p50 us", |x| x.p50_us);

/// Ours over a peer's figure, each the median over the repetitions of the case.
fn ratio(
    measurements: &[BenchMeasurement],
    case: &str,
    (metric, value): Metric,
    peer: &str,
    target: Option<f64>,
) -> Option<BenchRatio> {
    let median_of = |tool: &str| {
        median(
            measurements
                .iter()
                .filter(|m| m.case == case && m.tool == tool)
                .filter_map(&value)
                .collect(),
        )
    };
    let ours = median_of("meshbench")?;
    let theirs = median_of(peer)?;
    let repetitions = measurements
        .iter()
        .filter(|m| m.case == case && m.tool == "meshbench")
        .count() as u32;
    let r = ours / theirs;
    Some(BenchRatio {
        case: case.to_owned(),
        repetitions: (repetitions > 1).then_some(repetitions),
        metric: metric.to_owned(),
        peer: peer.to_owned(),
        ours,
        theirs,
        ratio: r,
        interval: None,
        target: target.map(|t| format!("<= {t}")),
        met: target.map(|t| r <= t),
        verdict: None,
    })
}

/// Runs the load generator benchmark. Every peer not left out must be installed: a missing
/// one is an error naming its install command, never a silent skip.
pub fn bench_loadgen(opts: &LoadgenBenchOptions) -> Result<BenchReport, Error> {
    let peers = find_peers(&opts.without)?;
    std::fs::create_dir_all(&opts.work_dir).map_err(|source| Error::Io {
        path: opts.work_dir.clone(),
        source,
    })?;
    let (target, target_addr) = start_echo(
        &opts.meshbench,
        opts.target_cpu,
        opts.response_bytes,
        &opts.work_dir.join("target.log"),
        None,
    )?;
    let url = format!("http://{target_addr}/");
    let mut m = Vec::new();

    let case = |name| Case {
        opts,
        peers: &peers,
        name,
        url: &url,
        target: target_addr,
    };
    let (closed, fixed, floor) = (case("closed-loop-16"), case("fixed-5k"), case("floor-1k"));
    for repetition in 1..=opts.repetitions.max(1) {
        let start = m.len();
        m.push(run_meshbench(&closed, LoadModel::ClosedLoop)?);
        if let Some(wrk) = &peers.wrk {
            m.push(run_wrk(&closed, wrk)?);
        }
        if let Some(fortio) = &peers.fortio {
            m.push(run_fortio(&closed, fortio, 0)?);
        }
        if let Some(oha) = &peers.oha {
            m.push(run_oha(&closed, oha, 0)?);
        }
        m.push(run_closed_floor(&closed)?);

        m.push(run_meshbench(&fixed, LoadModel::OpenLoop { rps: 5000.0 })?);
        if let Some(fortio) = &peers.fortio {
            m.push(run_fortio(&fixed, fortio, 5000)?);
        }
        if let Some(oha) = &peers.oha {
            m.push(run_oha(&fixed, oha, 5000)?);
        }
        m.push(run_paced_floor(&fixed, 5000)?);

        m.push(run_meshbench(&floor, LoadModel::OpenLoop { rps: 1000.0 })?);
        if let Some(fortio) = &peers.fortio {
            m.push(run_fortio(&floor, fortio, 1000)?);
        }
        if let Some(oha) = &peers.oha {
            m.push(run_oha(&floor, oha, 1000)?);
        }
        for x in &mut m[start..] {
            x.repetition = Some(repetition);
        }
    }
    let mut notes = Vec::new();
    match measure_pacing(&case(PACING_CASE)) {
        Ok(rows) => m.extend(rows),
        Err(e) => notes.push(format!("{PACING_CASE}: not measured: {e}")),
    }
    drop(target);

    let compared = [
        (closed, RPS, "wrk", None),
        (closed, RPS, "fortio", None),
        (closed, CPU, "wrk", Some(0.8)),
        (closed, CPU, "fortio", None),
        (closed, CPU, "oha", None),
        (closed, CPU, CLOSED_FLOOR, None),
        (fixed, CPU_100K, "fortio", None),
        (fixed, CPU_100K, "oha", Some(0.5)),
        (fixed, CPU_100K, PACED_FLOOR, None),
        (floor, CPU_100K, "oha", None),
        (floor, P50, "fortio", Some(1.0)),
        (floor, P50, "oha", None),
    ];
    let ratios = compared
        .iter()
        .filter_map(|(case, metric, peer, target)| ratio(&m, case.name, *metric, peer, *target))
        .collect();
    for peer in &opts.without {
        let unjudged: Vec<String> = compared
            .iter()
            .filter(|(_, _, against, _)| *against == peer.name())
            .filter_map(|(case, (metric, _), _, target)| {
                target.map(|t| format!("{metric} <= {t}x in {}", case.name))
            })
            .collect();
        notes.push(left_out_note(peer.name(), &unjudged));
    }

    notes.extend(closed_floor_note(&m, closed.name));
    notes.extend(paced_floor_note(&m, fixed.name));

    Ok(BenchReport {
        schema_version: SCHEMA_VERSION,
        kind: "meshbench.bench".to_owned(),
        bench: "loadgen".to_owned(),
        environment: meshbench_lab::describe_environment(&opts.build),
        setup: vec![
            format!(
                "target: meshbench workload echo, 1 thread, {} B responses, pinned to CPU {}",
                opts.response_bytes, opts.target_cpu
            ),
            format!("generators pinned to CPU {}, one at a time", opts.generator_cpu),
            format!(
                "{} rounds of every case and tool, interleaved; ratios compare the medians (raw outputs: the last round's)",
                opts.repetitions.max(1)
            ),
            format!(
                "each case runs {} per tool; CPU is the tool process's user + system time (getrusage of the reaped child)",
                secs(opts.duration)
            ),
            "wrk: -t1 -c16 --latency; fortio: -c 16 -r 0.000001 (1 us resolution), -uniform at a fixed rate; oha: -c 16, -q at a fixed rate (its default multi-threaded runtime, all threads on the generator CPU); meshbench: one thread".to_owned(),
            "p50: meshbench's from each request's intended send time (coordinated-omission corrected) to the kernel's arrival time of the answer (SO_TIMESTAMPNS); Fortio's and oha's from the actual send to their read of the answer".to_owned(),
            format!("{PACED_FLOOR}: a thread of the bench on the generator CPU sends GET / to the target at a fixed rate over 16 connections, sleeping to each slot (clock_nanosleep) and reading any waiting answer without blocking; no clock per request, no histogram, no parsing; CPU is the thread's (CLOCK_THREAD_CPUTIME_ID)"),
            format!("{CLOSED_FLOOR}: a thread of the bench on the generator CPU keeps one GET / outstanding on each of 16 connections (epoll, edge-triggered), and knows an answer is complete by counting its bytes (all answers have the length of the first); one clock read per wake-up, no clock per request, no parsing, no histogram; CPU is the thread's"),
            format!("{PACING_CASE}: each fixed-rate tool once more at {PACING_RPS} rps with tcpdump on lo; the gaps between requests are from the capture's timestamps, and the CPU of these runs (the capture adds to it) is not compared"),
        ],
        measurements: m,
        ratios,
        notes,
    })
}

/// Says that `peer` was left out by request, and which targets against it went unjudged.
fn left_out_note(peer: &str, unjudged: &[String]) -> String {
    let targets = if unjudged.is_empty() {
        String::new()
    } else {
        format!(
            "; the target{} against it ({}) {} not judged",
            if unjudged.len() == 1 { "" } else { "s" },
            unjudged.join(", "),
            if unjudged.len() == 1 { "is" } else { "are" }
        )
    };
    format!(
        "{peer}: left out (--without {peer}): not run, and nothing is compared with it{targets}"
    )
}

/// The median client CPU per request of `tool` in `case`.
fn median_cpu(m: &[BenchMeasurement], case: &str, tool: &str) -> Option<f64> {
    median(
        m.iter()
            .filter(|x| x.case == case && x.tool == tool)
            .map(|x| x.cpu_us_per_request)
            .collect(),
    )
}

/// Says what the closed-loop floor leaves of the target against wrk.
fn closed_floor_note(m: &[BenchMeasurement], case: &str) -> Option<String> {
    let floor = median_cpu(m, case, CLOSED_FLOOR)?;
    let wrk = median_cpu(m, case, "wrk")?;
    let ours = median_cpu(m, case, "meshbench")?;
    Some(format!(
        "{case}: a client that only sends and counts answer bytes costs {floor:.2} us of CPU per request here, {:.2}x wrk's {wrk:.2} us; \
         meshbench, which also times, frames and records every request, costs {ours:.2} us, {:+.1}% against that floor (rounds vary by a few percent)",
        floor / wrk,
        (ours / floor - 1.0) * 100.0,
    ))
}

/// Says what the evenly paced floor means for the fixed-rate target against oha.
fn paced_floor_note(m: &[BenchMeasurement], case: &str) -> Option<String> {
    let floor = median_cpu(m, case, PACED_FLOOR)?;
    let oha = median_cpu(m, case, "oha")?;
    Some(format!(
        "{case}: an evenly paced sender that only sleeps to each slot, reads and sends costs {floor:.1} us of CPU per request here, {:.2}x oha's {oha:.1} us: \
         a generator that spaces its requests evenly cannot go below that, so a target under {:.2}x oha can only be met by sending in bursts (see {PACING_CASE})",
        floor / oha,
        floor / oha,
    ))
}

const PACING_CASE: &str = "pacing-5k";
const PACING_RPS: u32 = 5000;

/// Each fixed-rate tool at [`PACING_RPS`] under a capture of loopback; the rows carry the
/// spacing of the requests as the kernel sent them. Needs tcpdump and the right to capture.
fn measure_pacing(pacing: &Case<'_>) -> Result<Vec<BenchMeasurement>, Error> {
    type Run<'r> = Box<dyn Fn() -> Result<BenchMeasurement, Error> + 'r>;
    let rps = f64::from(PACING_RPS);
    let mut runs: Vec<(&str, Run<'_>)> = vec![(
        "meshbench",
        Box::new(move || run_meshbench(pacing, LoadModel::OpenLoop { rps })),
    )];
    if let Some(fortio) = pacing.peers.fortio.as_deref() {
        runs.push((
            "fortio",
            Box::new(move || run_fortio(pacing, fortio, PACING_RPS)),
        ));
    }
    if let Some(oha) = pacing.peers.oha.as_deref() {
        runs.push(("oha", Box::new(move || run_oha(pacing, oha, PACING_RPS))));
    }
    let mut rows = Vec::new();
    for (tool, run) in runs {
        let pcap = pacing
            .opts
            .work_dir
            .join(format!("{PACING_CASE}.{tool}.pcap"));
        let capture = meshbench_netlab::WireCapture::start_host("lo", &pcap)?;
        let measured = run();
        let pcap = capture.stop();
        let mut row = measured?;
        let times = meshbench_netlab::send_times_to_port(&pcap, pacing.target.port());
        // Tens of megabytes of 1 KiB responses: the figures are what is kept.
        let _ = std::fs::remove_file(&pcap);
        row.pacing = crate::pacing::pacing(&times?, f64::from(PACING_RPS));
        rows.push(row);
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_is_named_as_its_binary_and_an_unknown_name_is_refused() {
        for peer in LoadgenPeer::ALL {
            assert_eq!(peer.name().parse::<LoadgenPeer>(), Ok(peer));
        }
        let refused = "ab".parse::<LoadgenPeer>().unwrap_err();
        assert!(refused.contains("`ab`") && refused.contains("wrk, fortio, oha"));
    }

    #[test]
    fn a_peer_left_out_is_named_with_the_targets_it_leaves_unjudged() {
        assert_eq!(
            left_out_note(
                "oha",
                &["client CPU s per 100k requests <= 0.5x in fixed-5k".into()]
            ),
            "oha: left out (--without oha): not run, and nothing is compared with it; the target \
             against it (client CPU s per 100k requests <= 0.5x in fixed-5k) is not judged"
        );
        assert_eq!(
            left_out_note("wrk", &[]),
            "wrk: left out (--without wrk): not run, and nothing is compared with it"
        );
    }

    #[test]
    fn a_peer_left_out_is_not_looked_for() {
        let none = find_peers(&LoadgenPeer::ALL).unwrap();
        assert!(none.wrk.is_none() && none.fortio.is_none() && none.oha.is_none());
    }
}
