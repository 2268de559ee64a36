//! Built-in experiment profiles. Each is sized for a 2-core machine.

use std::time::Duration;

use meshbench_results::{LoadPoint, RunConfig, WorkloadConfig};

use meshbench_meshes::Mesh;

use crate::scenario::{describe, Placement};
use crate::Error;

pub const PROFILE_NAMES: &[&str] = &["quick", "smoke", "meshes"];

#[derive(Debug, Clone)]
pub struct Profile {
    pub name: String,
    pub scenarios: Vec<Mesh>,
    pub placements: Vec<Placement>,
    pub load_points: Vec<LoadPoint>,
    pub repetitions: u32,
    pub duration: Duration,
    pub warmup: Duration,
    pub request_timeout: Duration,
    pub sample_interval: Duration,
    pub server_delay: Duration,
    pub response_bytes: u64,
}

impl Profile {
    pub fn builtin(name: &str) -> Result<Self, Error> {
        let all = vec![Mesh::None, Mesh::AppMtls, Mesh::Sidecar];
        let point = |rps: f64, connections: u32| LoadPoint { rps, connections };
        match name {
            // The default: E1's baseline, baseline-mTLS and a sidecar mesh (our reference
            // sidecars) at loads a 2-core machine sustains. The server answers at once (no
            // sleep) so the cost of mTLS and proxies is not hidden under a 200 ms delay.
            "quick" => Ok(Profile {
                name: name.to_owned(),
                scenarios: all.clone(),
                placements: vec![Placement::IntraNode],
                load_points: vec![point(500.0, 8), point(2000.0, 32), point(4000.0, 64)],
                repetitions: 1,
                duration: Duration::from_secs(10),
                warmup: Duration::from_secs(2),
                request_timeout: Duration::from_secs(5),
                sample_interval: Duration::from_millis(200),
                server_delay: Duration::ZERO,
                response_bytes: 1024,
            }),
            // A seconds-long run of the same shape, for tests and a first check of a machine.
            "smoke" => Ok(Profile {
                name: name.to_owned(),
                scenarios: all,
                placements: vec![Placement::IntraNode],
                load_points: vec![point(200.0, 4), point(400.0, 8)],
                repetitions: 1,
                duration: Duration::from_secs(2),
                warmup: Duration::from_millis(500),
                request_timeout: Duration::from_secs(5),
                sample_interval: Duration::from_millis(100),
                server_delay: Duration::from_millis(1),
                response_bytes: 1024,
            }),
            // E1's comparison of mTLS architectures on the lab: no mesh, app-level mTLS, our
            // sidecar, our node agent (same-node traffic encrypted or not) and third-party
            // sidecars, with client and server on one node and on two.
            "meshes" => Ok(Profile {
                name: name.to_owned(),
                scenarios: vec![
                    Mesh::None,
                    Mesh::AppMtls,
                    Mesh::Sidecar,
                    Mesh::NodeAgent {
                        same_node_encryption: true,
                    },
                    Mesh::NodeAgent {
                        same_node_encryption: false,
                    },
                    Mesh::Envoy,
                    Mesh::Haproxy,
                    Mesh::Nginx,
                ],
                placements: vec![Placement::IntraNode, Placement::InterNode],
                load_points: vec![point(1000.0, 16)],
                repetitions: 1,
                duration: Duration::from_secs(10),
                warmup: Duration::from_secs(2),
                request_timeout: Duration::from_secs(5),
                sample_interval: Duration::from_millis(200),
                server_delay: Duration::ZERO,
                response_bytes: 1024,
            }),
            _ => Err(Error::UnknownProfile {
                name: name.to_owned(),
                known: PROFILE_NAMES.join(", "),
            }),
        }
    }

    /// Keeps only the named scenarios and placements (all when a list is empty). A name the
    /// profile does not have is an error naming it.
    pub fn select(&mut self, scenarios: &[String], placements: &[String]) -> Result<(), Error> {
        keep_named(&mut self.scenarios, scenarios, "--scenarios", |m| m.name())?;
        keep_named(&mut self.placements, placements, "--placements", |p| {
            p.name()
        })
    }

    pub fn cells(&self) -> usize {
        self.scenarios.len()
            * self.placements.len()
            * self.load_points.len()
            * self.repetitions as usize
    }

    /// Rough wall-clock length, for the progress estimate.
    pub fn estimated_duration(&self) -> Duration {
        let per_cell = self.warmup + self.duration + Duration::from_millis(700);
        per_cell * self.cells() as u32
    }

    pub fn describe(&self, platform: &str) -> RunConfig {
        RunConfig {
            profile: self.name.clone(),
            platform: platform.to_owned(),
            scenarios: self.scenarios.iter().map(|&s| describe(s)).collect(),
            placements: self
                .placements
                .iter()
                .map(|p| p.name().to_owned())
                .collect(),
            unavailable: Vec::new(),
            load_points: self.load_points.clone(),
            repetitions: self.repetitions,
            duration_seconds: self.duration.as_secs_f64(),
            warmup_seconds: self.warmup.as_secs_f64(),
            request_timeout_seconds: self.request_timeout.as_secs_f64(),
            sample_interval_ms: self.sample_interval.as_millis() as u64,
            workload: WorkloadConfig {
                role: "echo".to_owned(),
                delay_ms: self.server_delay.as_secs_f64() * 1e3,
                response_bytes: self.response_bytes,
                protocol: "http/1.1".to_owned(),
            },
        }
    }
}

/// Keeps the items whose name is in `wanted` (all of them when `wanted` is empty).
fn keep_named<T>(
    items: &mut Vec<T>,
    wanted: &[String],
    field: &'static str,
    name_of: impl Fn(&T) -> &'static str,
) -> Result<(), Error> {
    if let Some(unknown) = wanted
        .iter()
        .find(|w| !items.iter().any(|i| name_of(i) == w.as_str()))
    {
        return Err(Error::UnknownSelection {
            field,
            name: unknown.clone(),
            known: items.iter().map(&name_of).collect::<Vec<_>>().join(", "),
        });
    }
    if !wanted.is_empty() {
        items.retain(|i| wanted.iter().any(|w| w == name_of(i)));
    }
    Ok(())
}
