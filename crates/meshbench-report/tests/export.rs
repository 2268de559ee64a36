//! Exports carry the cell's own figures in the other tool's units: Fortio's seconds and
//! return codes, SMP's milliseconds, millicores and MB.

use meshbench_report::export::{export_cell, write_exports, ExportFormat};
use meshbench_results::{read_json, ComponentResources, RunResult};

fn example() -> RunResult {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../meshbench-results/schema/example-results-v1.json"
    );
    read_json(std::path::Path::new(path)).unwrap()
}

fn component(name: &str, role: &str, cores: f64, mib: f64) -> ComponentResources {
    ComponentResources {
        component: name.to_owned(),
        role: role.to_owned(),
        source: "procfs".to_owned(),
        samples: 10,
        cpu_cores_mean: cores,
        cpu_cores_max: cores,
        rss_mib_mean: mib,
        rss_mib_max: mib,
        working_set_mib_mean: None,
        working_set_mib_max: None,
        node: None,
    }
}

#[test]
fn smp_has_the_cells_latencies_rate_and_each_components_share() {
    let mut result = example();
    let cell = &mut result.cells[1];
    cell.resources = vec![
        component("client-sidecar", "sidecar", 0.05, 10.0),
        component("server-sidecar", "sidecar", 0.07, 12.0),
        component("node-1-agent", "node-agent", 0.02, 20.0),
        component("ca", "control-plane", 0.001, 30.0),
    ];
    let cell = result.cells[1].clone();
    let smp = export_cell(ExportFormat::Smp, &result, 1, &cell).unwrap();
    let latencies = &smp["result"]["latenciesMs"];
    assert_eq!(
        latencies["p99"].as_f64().unwrap(),
        cell.load.latency.p99_us as f64 / 1e3
    );
    assert_eq!(
        latencies["p50"].as_f64().unwrap(),
        cell.load.latency.p50_us as f64 / 1e3
    );
    assert_eq!(smp["result"]["actualQPS"], cell.load.achieved_rps);
    assert_eq!(smp["meshConfig"]["sidecar"]["count"], 2);
    assert_eq!(smp["meshConfig"]["sidecar"]["cpuMCores"], 120);
    // 22 MiB is 23.07 MB.
    assert_eq!(smp["meshConfig"]["sidecar"]["memMb"], 23);
    assert_eq!(smp["meshConfig"]["meshControlPlane"]["cpuMCores"], 1);
    assert_eq!(smp["meshConfig"]["labels"]["nodeAgent.cpuMCores"], "20");
    assert_eq!(
        smp["env"]["individualWorkloads"].as_array().unwrap().len(),
        4
    );
    assert_eq!(
        smp["config"]["clients"][0]["connections"],
        cell.load.connections
    );
    let start = humantime::parse_rfc3339(smp["result"]["startTime"].as_str().unwrap()).unwrap();
    let end = humantime::parse_rfc3339(smp["result"]["endTime"].as_str().unwrap()).unwrap();
    let seconds = end.duration_since(start).unwrap().as_secs_f64();
    assert!(
        (seconds - cell.load.window.seconds).abs() < 0.01,
        "{seconds}"
    );
}

#[test]
fn fortio_files_one_per_cell_with_its_return_codes_and_histogram() {
    let result = example();
    let dir = tempfile::tempdir().unwrap();
    let paths = write_exports(dir.path(), &result, ExportFormat::Fortio).unwrap();
    assert_eq!(paths.len(), result.cells.len());
    for (path, cell) in paths.iter().zip(&result.cells) {
        assert!(path.starts_with(dir.path().join("export/fortio")));
        let fortio: serde_json::Value = read_json(path).unwrap();
        let ok = cell.load.outcomes.get("http_200").copied().unwrap_or(0);
        assert_eq!(fortio["RetCodes"]["200"], ok);
        assert_eq!(
            fortio["DurationHistogram"]["Count"],
            cell.load.latency.count
        );
        assert_eq!(fortio["ActualQPS"], cell.load.achieved_rps);
    }
}
