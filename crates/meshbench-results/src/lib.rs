//! meshbench's public result contract.
//!
//! Everything meshbench writes for other tools to read (`results.json` of a run, the JSON of
//! `meshbench load`) is defined here as plain DTOs, separate from the internal types of the
//! crates that produce them. The contract is versioned by [`SCHEMA_VERSION`]; the committed
//! JSON Schema in `schema/` is checked by a test so that any change to a field is deliberate.

mod background;
mod bench;
mod claims;
mod disruption;
mod environment;
mod io;
mod load;
pub mod noise;
mod rounds;
mod run;
mod samples;
mod verify;

pub use background::{Background, MachineBackground};
pub use bench::{BenchMeasurement, BenchRatio, BenchReport, Pacing, RatioInterval, TargetVerdict};
pub use claims::{Claim, ClaimAxis, ClaimCheck, ClaimMetric};
pub use disruption::{rfc3339_millis, Disruption, DisruptionKind};
pub use environment::{describe_environment, BuildInfo};
pub use io::{
    read_json, read_json_any, write_bytes_atomic, write_json_atomic, write_json_gz_atomic, Error,
    MAX_EXPANDED_BYTES,
};
pub use load::{
    is_success_outcome, EncodedHistogram, GeneratorStats, LatencySummary, LoadModel, LoadReport,
    MeasurementWindow, ModelParameters, RequestSample, SecondStats, HISTOGRAM_ENCODING,
};
pub use rounds::{RoundsStop, StopReason, UntilDecided};
pub use run::{
    CapacityConfig, Cell, ComponentResources, Environment, FailedCell, HandshakeTimes, LoadPoint,
    MachineCpu, MeshInstallation, OutlierPolicyConfig, RunConfig, RunResult, RunStatus,
    ScenarioConfig, SoftwareVersion, UnavailableScenario, WireObservation, WorkloadConfig,
};
pub use samples::{cores_per_interval, counter_at, Sample, SampleSeries};

pub use verify::{
    CaseVerification, IdentityCheck, MeshVerification, ProbeVerification, Verdict, VerifyReport,
    WireEvidence,
};

/// Version of the JSON contract. Bump it whenever a field is removed, renamed or changes
/// meaning; adding an optional field does not require a bump.
pub const SCHEMA_VERSION: u32 = 1;

/// JSON Schema of the `results.json` document, as committed in `schema/`.
pub fn run_result_schema() -> schemars::Schema {
    schemars::schema_for!(RunResult)
}

/// JSON Schema of the document `meshbench bench ... --json` writes.
pub fn bench_report_schema() -> schemars::Schema {
    schemars::schema_for!(BenchReport)
}

/// JSON Schema of the document `meshbench load --json` writes.
pub fn load_report_schema() -> schemars::Schema {
    schemars::schema_for!(LoadReport)
}

/// JSON Schema of the document `meshbench verify` writes (`verify.json`).
pub fn verify_report_schema() -> schemars::Schema {
    schemars::schema_for!(VerifyReport)
}
