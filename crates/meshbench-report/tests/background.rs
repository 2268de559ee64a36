//! Noise judged against the platform's own background: on a cluster the CPU outside a cell's
//! pods is flagged only past what the nodes run anyway (and its measured variation), on the
//! local lab past a fixed limit as before; a load generator the cell's own components delayed
//! is the system's cost, and one the hypervisor or another process delayed is noise.

use meshbench_report::trust::{
    background_level, cell_flags, generator_delay, machine_share, BACKGROUND_Z,
};
use meshbench_report::{render_markdown, Analysis};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use meshbench_results::{
    read_json, Background, GeneratorStats, MachineBackground, MachineCpu, RunResult,
};

fn example() -> RunResult {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../meshbench-results/schema/example-results-v1.json"
    );
    read_json(std::path::Path::new(path)).unwrap()
}

/// The example's cells on a cluster's node-1 (its machine read through its kubelet), each
/// with `outside` cores beyond its components, and the machine's background `cores` per
/// second before the first cell.
fn on_cluster(outside: f64, background: Option<Vec<f64>>) -> RunResult {
    let mut result = example();
    for cell in &mut result.cells {
        for r in &mut cell.resources {
            r.node = Some("node-1".into());
        }
        let components: f64 = cell.resources.iter().map(|r| r.cpu_cores_mean).sum();
        cell.machines = vec![MachineCpu::tasks_only(
            "kubelet-summary",
            "node-1",
            2,
            components + outside,
        )];
    }
    result.backgrounds = background
        .into_iter()
        .map(|cores| Background {
            started_at: "2026-11-28T20:00:00Z".into(),
            before_cell: 0,
            interval_seconds: 1.0,
            machines: vec![MachineBackground {
                source: "kubelet-summary".into(),
                node: Some("node-1".into()),
                same_machine_nodes: vec!["node-2".into()],
                cpus: 2,
                cores,
            }],
        })
        .collect();
    result
}

/// 60 s of a background that is idle or busy at `busy` cores, second by second at random.
fn bursty(busy: f64) -> Vec<f64> {
    let mut rng = StdRng::seed_from_u64(3);
    (0..60)
        .map(|_| if rng.random_bool(0.5) { busy } else { 0.0 })
        .collect()
}

fn other_flags(result: &RunResult) -> Vec<String> {
    result
        .cells
        .iter()
        .flat_map(|c| cell_flags(result, c))
        .filter(|f| f.starts_with("other processes"))
        .collect()
}

#[test]
fn on_a_cluster_the_nodes_own_background_is_not_noise_and_a_hog_beside_it_is() {
    // The kubelets and control planes idle at 0.30 cores; a cell with 0.40 outside its pods
    // is within what they take anyway (it was flagged against the fixed 0.25 before).
    let quiet = on_cluster(0.40, Some(vec![0.30; 30]));
    assert!(other_flags(&quiet).is_empty(), "{:?}", other_flags(&quiet));
    let level = background_level(&quiet, &quiet.cells[0]).unwrap();
    assert!((level.mean_cores - 0.30).abs() < 1e-9, "{level:?}");
    assert_eq!(level.seconds, 30.0);

    // A core spinning beside the same cell is.
    let hog = on_cluster(1.30, Some(vec![0.30; 30]));
    let flags = other_flags(&hog);
    assert_eq!(flags.len(), hog.cells.len(), "{flags:?}");
    assert!(flags[0].contains("outside the cell's pods"), "{flags:?}");
    assert!(
        flags[0].contains("+1.00 over the nodes' background of 0.30"),
        "{flags:?}"
    );

    // Without a background the cluster is judged as the local lab is, against 0.25.
    let unmeasured = on_cluster(0.40, None);
    assert_eq!(other_flags(&unmeasured).len(), unmeasured.cells.len());
}

#[test]
fn a_background_that_varies_widens_the_limit_by_its_measured_spread() {
    // Idle or 1.5 cores busy, second by second: a 10 s window's mean varies by about
    // 0.75 / sqrt(10) = 0.24 cores, so 3 standard deviations (about 0.7) exceed 0.25.
    let background = bursty(1.5);
    let result = on_cluster(0.0, Some(background.clone()));
    let level = background_level(&result, &result.cells[0]).unwrap();
    let sd = level.window_sd_cores.unwrap();
    assert!(BACKGROUND_Z * sd > 0.5, "{level:?}");
    assert!(BACKGROUND_Z * sd < 1.2, "{level:?}");
    // 0.4 over the mean is within 3 sd of a window's mean, but not within 0.25.
    let result = on_cluster(level.mean_cores + 0.4, Some(background.clone()));
    assert!(
        other_flags(&result).is_empty(),
        "{:?}",
        other_flags(&result)
    );
    // Far past it is flagged.
    let result = on_cluster(level.mean_cores + 1.5, Some(background));
    assert_eq!(other_flags(&result).len(), result.cells.len());
}

#[test]
fn on_the_local_lab_anything_outside_the_lab_counts_whatever_ran_before() {
    // The lab's machine has no platform: a hog that was running before the first cell
    // (and so is in the background) is still flagged.
    let mut result = example();
    for cell in &mut result.cells {
        let components: f64 = cell.resources.iter().map(|r| r.cpu_cores_mean).sum();
        cell.machines = vec![MachineCpu {
            node: None,
            source: "/proc/stat".into(),
            ..MachineCpu::tasks_only("/proc/stat", "x", 2, components + 1.0)
        }];
    }
    result.backgrounds = vec![Background {
        started_at: "2026-11-28T20:00:00Z".into(),
        before_cell: 0,
        interval_seconds: 0.1,
        machines: vec![MachineBackground {
            source: "/proc/stat".into(),
            node: None,
            same_machine_nodes: vec![],
            cpus: 2,
            cores: vec![1.0; 50],
        }],
    }];
    let flags = other_flags(&result);
    assert_eq!(flags.len(), result.cells.len(), "{flags:?}");
    assert!(
        flags[0].contains("outside the lab (threshold 0.25; 1.00 cores"),
        "{flags:?}"
    );
    // The report shows the background beside the cell's figure.
    let report = render_markdown(&result, &Analysis::of(&result), None);
    assert!(report.contains("(background 1.00"), "{report}");
    assert!(report.contains("Background: the busy cores of every process on this machine"));
}

fn generator(late_while_idle: u64, saturated: bool) -> GeneratorStats {
    GeneratorStats {
        threads: 1,
        cpu_seconds: 1.0,
        cpu_us_per_request: 10.0,
        late_while_idle,
        limited: true,
        saturated: Some(saturated),
        untrusted_timestamps: 0,
    }
}

#[test]
fn a_generator_late_without_an_outside_cause_is_not_noise_and_the_mesh_is_charged_its_excess() {
    // The baseline's generator sends 1.5% of its requests late, the mesh's 5%, neither
    // saturated, nothing outside the cell: the machine's own lateness, and 3.5 points the mesh
    // added.
    let mut result = on_cluster(0.05, Some(vec![0.05; 30]));
    for cell in &mut result.cells {
        let per_thousand = if cell.scenario == "baseline" { 15 } else { 50 };
        cell.load.generator = Some(generator(cell.load.sent * per_thousand / 1000, false));
    }
    let flagged = |r: &RunResult| -> Vec<String> {
        (r.cells.iter())
            .flat_map(|c| cell_flags(r, c))
            .filter(|f| f.starts_with("generator"))
            .collect()
    };
    assert!(flagged(&result).is_empty(), "{:?}", flagged(&result));
    let mesh = result
        .cells
        .iter()
        .find(|c| c.scenario != "baseline")
        .unwrap();
    let delay = generator_delay(&result, mesh).unwrap();
    assert!((delay.late_share - 0.05).abs() < 1e-9, "{delay:?}");
    assert!(
        (delay.baseline_share.unwrap() - 0.015).abs() < 1e-9,
        "{delay:?}"
    );
    assert!((delay.added().unwrap() - 0.035).abs() < 1e-9, "{delay:?}");
    let base = result
        .cells
        .iter()
        .find(|c| c.scenario == "baseline")
        .unwrap();
    assert_eq!(generator_delay(&result, base).unwrap().added(), Some(0.0));
    let report = render_markdown(&result, &Analysis::of(&result), None);
    assert!(
        report.contains("Load generator late without an outside cause (not noise)"),
        "{report}"
    );
    assert!(
        report.contains("up to 1.5% in the baseline's own cells"),
        "{report}"
    );
    assert!(
        report.contains("up to 3.5 points more than the baseline in baseline-mtls"),
        "{report}"
    );

    // The same lateness with 0.06 cores stolen (more than 5% of one CPU) is the hypervisor's.
    let mut stolen = result.clone();
    for cell in &mut stolen.cells {
        cell.machines[0].steal_cores = Some(0.06);
    }
    let flags = flagged(&stolen);
    assert_eq!(flags.len(), stolen.cells.len(), "{flags:?}");
    assert!(
        flags[0].contains("the hypervisor took 0.060 cores"),
        "{flags:?}"
    );
    assert!(generator_delay(&stolen, &stolen.cells[0]).is_none());

    // Beside a hog it is the hog's.
    let mut hog = on_cluster(1.5, Some(vec![0.05; 30]));
    for cell in &mut hog.cells {
        cell.load.generator = Some(generator(cell.load.sent / 50, false));
    }
    assert!(flagged(&hog)[0].contains("while other processes ran beside the cell"));

    // A saturated generator is its own limit, whatever else ran.
    for cell in &mut result.cells {
        cell.load.generator = Some(generator(0, true));
    }
    assert!(flagged(&result)[0].starts_with("generator-limited"));
    assert!(machine_share(&result.cells[0]).is_some());
}

#[test]
fn a_cell_is_judged_against_the_background_of_its_own_round() {
    let mut result = on_cluster(0.5, Some(vec![0.1; 30]));
    let mut later = result.backgrounds[0].clone();
    later.before_cell = 1;
    later.machines[0].cores = vec![0.4; 30];
    result.backgrounds.push(later);
    result.cells.truncate(2);
    // First cell: 0.5 against 0.1 (+0.4, flagged); second: against 0.4 (+0.1, not).
    assert_eq!(cell_flags(&result, &result.cells[0]).len(), 1);
    assert!(cell_flags(&result, &result.cells[1]).is_empty());
}
