//! The local lab: meshbench's embedded platform. It starts lab components (workload servers,
//! load generators) as real child processes of the meshbench binary, learns when each is
//! ready, samples every component's CPU and memory, and describes the machine for results.
//!
//! Time is CLOCK_MONOTONIC nanoseconds throughout, the same clock the load generator stamps
//! its measurement window with, so resource figures cover exactly that window.

mod cgroup;
mod component;
mod launch;
mod machine;
mod process;
mod sampler;

pub use cgroup::{destroy_lab_dir, Cgroup, CgroupFs, CgroupReading};
pub use component::{LabComponent, Readiness, LAB_EVENTS};
pub use launch::{which, Launch};
pub use machine::{
    parse_cpu_mhz, parse_proc_stat, read_cpu_mhz, read_machine_sample, MachineSample, MachineSeries,
};
pub use meshbench_results::{describe_environment, BuildInfo};
pub use meshbench_results::{Sample, SampleSeries};
pub use process::{ComponentProcess, Ended, ReadyEvent};
pub use sampler::{sample_process, ResourceSampler, SampleTarget, Sampled};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot start {component}: {source}")]
    Spawn {
        component: String,
        source: std::io::Error,
    },
    #[error("{component} exited before it was ready ({status}); its stderr said: {stderr}")]
    ExitedEarly {
        component: String,
        status: String,
        stderr: String,
    },
    #[error("{component} was not ready within {seconds} s")]
    NotReady { component: String, seconds: u64 },
    #[error("{component} wrote an unreadable ready line {line:?}")]
    BadReadyLine { component: String, line: String },
    #[error(transparent)]
    Topology(#[from] meshbench_topology::Error),
    #[error("cgroup {path}")]
    Cgroup {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("{component} failed ({status}): {stderr}")]
    Failed {
        component: String,
        status: String,
        stderr: String,
    },
}

impl meshbench_role::InputFault for Error {
    /// Whether the error is the user's input (exit code 2) rather than a failure.
    fn is_bad_input(&self) -> bool {
        matches!(self, Error::Topology(_))
    }
}
