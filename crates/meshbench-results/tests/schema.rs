//! Guards the public result contract: the committed JSON Schemas must match the DTOs, and a
//! document written by a previous build of this schema version must still parse.
//!
//! After a deliberate change: bump `SCHEMA_VERSION` if the change is breaking, then rerun with
//! `MESHBENCH_UPDATE_SCHEMA=1` and commit the regenerated files.

use std::path::PathBuf;

use meshbench_results::{
    bench_report_schema, load_report_schema, read_json, run_result_schema, verify_report_schema,
    write_json_atomic, RunResult, RunStatus, SCHEMA_VERSION,
};

fn schema_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("schema")
}

fn check_schema(file: &str, schema: schemars::Schema) {
    let path = schema_dir().join(file);
    let generated = serde_json::to_string_pretty(&schema).unwrap() + "\n";
    if std::env::var_os("MESHBENCH_UPDATE_SCHEMA").is_some() {
        std::fs::write(&path, &generated).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run with MESHBENCH_UPDATE_SCHEMA=1",
            path.display()
        )
    });
    assert_eq!(
        committed,
        generated,
        "the result DTOs no longer match {}: a public contract changed. Bump SCHEMA_VERSION if \
         the change is breaking, then regenerate with MESHBENCH_UPDATE_SCHEMA=1",
        path.display()
    );
}

#[test]
fn run_result_schema_matches_committed_contract() {
    check_schema(
        &format!("results-v{SCHEMA_VERSION}.schema.json"),
        run_result_schema(),
    );
}

#[test]
fn load_report_schema_matches_committed_contract() {
    check_schema(
        &format!("load-v{SCHEMA_VERSION}.schema.json"),
        load_report_schema(),
    );
}

#[test]
fn bench_report_schema_matches_committed_contract() {
    check_schema(
        &format!("bench-v{SCHEMA_VERSION}.schema.json"),
        bench_report_schema(),
    );
}

#[test]
fn verify_report_schema_matches_committed_contract() {
    check_schema(
        &format!("verify-v{SCHEMA_VERSION}.schema.json"),
        verify_report_schema(),
    );
}

#[test]
fn example_document_of_this_version_parses_and_round_trips() {
    let example = schema_dir().join(format!("example-results-v{SCHEMA_VERSION}.json"));
    let parsed: RunResult = read_json(&example).expect("example document parses");
    assert_eq!(parsed.schema_version, SCHEMA_VERSION);
    assert_eq!(parsed.kind, "meshbench.run");
    assert_eq!(parsed.status, RunStatus::Complete);
    let cell = &parsed.cells[0];
    let sent: u64 = cell.load.outcomes.values().sum();
    assert_eq!(
        sent, cell.load.sent,
        "outcome classes add up to sent requests"
    );

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("nested/results.json");
    write_json_atomic(&out, &parsed).unwrap();
    let again: RunResult = read_json(&out).unwrap();
    assert_eq!(again, parsed);
    assert!(
        !out.with_extension("json.tmp").exists(),
        "no temp file left"
    );
}

#[test]
fn unknown_fields_are_rejected_so_typos_do_not_pass_silently() {
    let example = schema_dir().join(format!("example-results-v{SCHEMA_VERSION}.json"));
    let mut value: serde_json::Value =
        serde_json::from_slice(&std::fs::read(example).unwrap()).unwrap();
    value["environment"]["cpu_modle"] = serde_json::json!("typo");
    assert!(serde_json::from_value::<RunResult>(value).is_err());
}

#[test]
fn example_verification_of_this_version_parses_and_round_trips() {
    // Recorded from `meshbench verify --mesh meshbench-sidecar` on the netns lab.
    let example = schema_dir().join(format!("example-verify-v{SCHEMA_VERSION}.json"));
    let parsed: meshbench_results::VerifyReport = read_json(&example).expect("example parses");
    assert_eq!(parsed.schema_version, SCHEMA_VERSION);
    assert!(parsed.passed);
    assert_eq!(parsed.meshes[0].mesh, "meshbench-sidecar");
    assert!(parsed.meshes[0].cases.iter().all(|c| !c.probes.is_empty()));
    let again: meshbench_results::VerifyReport =
        serde_json::from_value(serde_json::to_value(&parsed).unwrap()).unwrap();
    assert_eq!(again, parsed);
}
