//! A run's cells in other tools' formats: Fortio's result JSON (Fortio's UI loads it) and the
//! Service Mesh Performance (SMP) result, one file per cell, under `<run>/export/<format>/`.
//! `meshbench export` and `meshbench serve` write and serve the same files.
//!
//! SMP is written in the protobuf JSON mapping of its `service_mesh_performance.proto`
//! (lowerCamelCase names): `config` (`PerformanceTestConfig`), `result`
//! (`PerformanceTestResult`: latencies in ms, actual QPS, start and end), `meshConfig`
//! (`ServiceMeshConfig`: sidecars and control plane in millicores and MB) and `env`
//! (`EnvironmentConfig`: the node, and every measured component as an `individualWorkload`).
//! SMP has no node-agent class: node agents are individual workloads, and their totals are
//! in `meshConfig.labels` (`nodeAgent.count`, `nodeAgent.cpuMCores`, `nodeAgent.memMb`).

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use meshbench_results::{Cell, ComponentResources, RunResult};
use serde_json::{json, Value};

use crate::Error;

/// The SMP version the documents follow.
pub const SMP_VERSION: &str = "v0.0.1";

/// Where [`write_exports`] puts a format's files, under the run directory.
pub const EXPORT_DIR: &str = "export";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportFormat {
    Fortio,
    Smp,
}

impl ExportFormat {
    pub const ALL: [ExportFormat; 2] = [ExportFormat::Fortio, ExportFormat::Smp];

    pub fn name(self) -> &'static str {
        match self {
            ExportFormat::Fortio => "fortio",
            ExportFormat::Smp => "smp",
        }
    }

    pub fn parse(name: &str) -> Option<ExportFormat> {
        ExportFormat::ALL.into_iter().find(|f| f.name() == name)
    }
}

/// A cell's file name stem: its position in the run and what it measured.
pub fn cell_stem(position: usize, cell: &Cell) -> String {
    let point = &cell.load_point;
    let placement = cell.placement.as_deref().unwrap_or("any");
    format!(
        "{:03}-{}-{}-{}rps-{}c-rep{}",
        position + 1,
        cell.scenario,
        placement,
        point.rps,
        point.connections,
        cell.repetition
    )
}

/// One cell as the format has it; `None` for a Fortio export of a cell whose histogram is not
/// one meshbench wrote.
pub fn export_cell(
    format: ExportFormat,
    result: &RunResult,
    position: usize,
    cell: &Cell,
) -> Option<Value> {
    match format {
        ExportFormat::Fortio => {
            meshbench_loadgen::export::fortio_json(&cell.load, cell_start(cell))
        }
        ExportFormat::Smp => Some(smp(result, position, cell)),
    }
}

/// Writes every cell of `result` in `format` under `<dir>/export/<format>/`; returns the paths.
pub fn write_exports(
    dir: &Path,
    result: &RunResult,
    format: ExportFormat,
) -> Result<Vec<PathBuf>, Error> {
    let out = dir.join(EXPORT_DIR).join(format.name());
    std::fs::create_dir_all(&out).map_err(|source| Error {
        path: out.display().to_string(),
        source,
    })?;
    let mut written = Vec::new();
    for (position, cell) in result.cells.iter().enumerate() {
        let Some(document) = export_cell(format, result, position, cell) else {
            continue;
        };
        let path = out.join(format!("{}.json", cell_stem(position, cell)));
        meshbench_results::write_json_atomic(&path, &document).map_err(|e| Error {
            path: path.display().to_string(),
            source: std::io::Error::other(e.to_string()),
        })?;
        written.push(path);
    }
    Ok(written)
}

/// When the cell's measured window began on the wall clock: from the generator's clock offset
/// where it recorded one, else the cell's start.
fn cell_start(cell: &Cell) -> SystemTime {
    let window = &cell.load.window;
    if let Some(offset) = window.realtime_offset_ns {
        let realtime = window.start_monotonic_ns as i128 + offset as i128;
        if let Ok(ns) = u64::try_from(realtime) {
            return SystemTime::UNIX_EPOCH + Duration::from_nanos(ns);
        }
    }
    humantime::parse_rfc3339(&cell.started_at).unwrap_or(SystemTime::UNIX_EPOCH)
}

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

/// Totals of a group of components, in SMP's units.
#[derive(Default)]
struct Totals {
    count: u32,
    millicores: f64,
    mb: f64,
}

impl Totals {
    fn of<'a>(components: impl Iterator<Item = &'a ComponentResources>) -> Totals {
        components.fold(Totals::default(), |t, c| Totals {
            count: t.count + 1,
            millicores: t.millicores + c.cpu_cores_mean * 1e3,
            mb: t.mb + c.rss_mib_mean * MB_PER_MIB,
        })
    }

    fn json(&self) -> Value {
        json!({
            "count": self.count,
            "cpuMCores": self.millicores.round() as i64,
            "memMb": self.mb.round() as i64,
        })
    }
}

const MB_PER_MIB: f64 = 1.048_576;

fn smp(result: &RunResult, position: usize, cell: &Cell) -> Value {
    let load = &cell.load;
    let id = format!(
        "{}-{}",
        result.started_at.replace(':', ""),
        cell_stem(position, cell)
    );
    let start = cell_start(cell);
    let end = start + Duration::from_secs_f64(load.window.seconds.max(0.0));
    let ms = |us: u64| us as f64 / 1e3;
    let labels = json!({
        "profile": result.config.profile,
        "scenario": cell.scenario,
        "placement": cell.placement.clone().unwrap_or_default(),
        "repetition": cell.repetition.to_string(),
        "platform": result.config.platform,
    });
    let role = |r: &'static str| move |c: &&ComponentResources| c.role == r;
    let sidecars = Totals::of(cell.resources.iter().filter(role("sidecar")));
    let agents = Totals::of(cell.resources.iter().filter(role("node-agent")));
    let control = Totals::of(cell.resources.iter().filter(role("control-plane")));
    let scenario = result
        .config
        .scenarios
        .iter()
        .find(|s| s.name == cell.scenario);
    let workloads: Vec<Value> = cell
        .resources
        .iter()
        .map(|c| {
            json!({
                "name": format!("{} ({})", c.component, c.role),
                "count": 1,
                "cpuMCores": (c.cpu_cores_mean * 1e3).round() as i64,
                "memMb": (c.rss_mib_mean * MB_PER_MIB).round() as i64,
            })
        })
        .collect();
    let protocol = match load.protocol.as_deref() {
        Some(p) if p.starts_with("grpc") => "grpc",
        _ => "http",
    };
    json!({
        "smpVersion": SMP_VERSION,
        "config": {
            "smpVersion": SMP_VERSION,
            "id": id,
            "name": format!("{} {}", result.config.profile, cell_stem(position, cell)),
            "labels": labels,
            "clients": [{
                "internal": true,
                "loadGenerator": "meshbench",
                "protocol": protocol,
                "connections": load.connections,
                "rps": load.requested_rps.map(|r| r.round() as i64).unwrap_or(0),
                "endpointUrl": [load.target],
            }],
            "duration": format!("{}s", load.window.seconds),
        },
        "result": {
            "smpVersion": SMP_VERSION,
            "id": id,
            "labels": labels,
            "startTime": rfc3339(start),
            "endTime": rfc3339(end),
            "latenciesMs": {
                "min": ms(load.latency.min_us),
                "average": load.latency.mean_us / 1e3,
                "p50": ms(load.latency.p50_us),
                "p90": ms(load.latency.p90_us),
                "p99": ms(load.latency.p99_us),
                "max": ms(load.latency.max_us),
            },
            "actualQPS": load.achieved_rps,
            "testId": id,
            "meshConfigId": cell.scenario,
            "envId": result.environment.hostname,
        },
        "meshConfig": {
            "smpVersion": SMP_VERSION,
            "id": cell.scenario,
            "labels": {
                "nodeAgent.count": agents.count.to_string(),
                "nodeAgent.cpuMCores": (agents.millicores.round() as i64).to_string(),
                "nodeAgent.memMb": (agents.mb.round() as i64).to_string(),
            },
            "sidecar": sidecars.json(),
            "meshControlPlane": control.json(),
            "mtlsEnabled": scenario.is_some_and(|s| s.mtls),
        },
        "env": {
            "smpVersion": SMP_VERSION,
            "id": result.environment.hostname,
            "node": [{
                "type": result.environment.cpu_model,
                "cores": result.environment.cpu_cores,
                "memMb": (result.environment.memory_total_mib as f64 * MB_PER_MIB).round() as i64,
            }],
            "individualWorkloads": workloads,
        },
    })
}
