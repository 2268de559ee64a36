//! Parsers for argument values, so a malformed value is rejected by clap with the argument's
//! name and exit code 2.

use std::time::Duration;

pub fn duration(value: &str) -> Result<Duration, String> {
    humantime::parse_duration(value)
        .map_err(|e| format!("{e} (expected a duration such as 10s, 250ms or 1m)"))
}

/// A duration above zero, for timeouts (a zero timeout would fail everything at once).
pub fn positive_duration(value: &str) -> Result<Duration, String> {
    match duration(value)? {
        Duration::ZERO => Err("expected a duration above zero".to_owned()),
        d => Ok(d),
    }
}

/// A count of at least one.
pub fn at_least_one(value: &str) -> Result<usize, String> {
    match value.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("{value:?} is not a whole number of at least 1")),
    }
}

pub fn positive_rate(value: &str) -> Result<f64, String> {
    match value.parse::<f64>() {
        Ok(rate) if rate.is_finite() && rate > 0.0 => Ok(rate),
        _ => Err("expected a positive number of requests per second".to_owned()),
    }
}

pub fn size(value: &str) -> Result<u64, String> {
    value
        .parse::<bytesize::ByteSize>()
        .map(|b| b.as_u64())
        .map_err(|e| format!("{e} (expected a size such as 1024, 1KiB or 16KB)"))
}

/// A fraction strictly between 0 and 1, such as the point of an SVID's life to renew it at.
pub fn fraction(value: &str) -> Result<f64, String> {
    match value.parse::<f64>() {
        Ok(f) if f > 0.0 && f < 1.0 => Ok(f),
        _ => Err("expected a fraction between 0 and 1, such as 0.5".to_owned()),
    }
}

/// A price or another amount that may be zero but not negative.
pub fn non_negative(value: &str) -> Result<f64, String> {
    match value.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("{value:?} is not a non-negative number")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_units_users_write() {
        assert_eq!(duration("200ms").unwrap(), Duration::from_millis(200));
        assert_eq!(size("1KiB").unwrap(), 1024);
        assert_eq!(size("1024").unwrap(), 1024);
        assert!(positive_rate("0").is_err());
        assert!(positive_rate("NaN").is_err());
        assert!(duration("10x").is_err());
        assert!(positive_duration("0s").is_err());
        assert_eq!(positive_duration("2s").unwrap(), Duration::from_secs(2));
        assert!(at_least_one("0").is_err());
        assert_eq!(fraction("0.5").unwrap(), 0.5);
        assert!(fraction("1").is_err());
    }
}

/// Where a run's cells happen: the local lab with one of its network backends, or a cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunBackend {
    Lab(meshbench_netlab::Backend),
    Kubernetes,
}

impl RunBackend {
    pub fn name(self) -> &'static str {
        match self {
            RunBackend::Lab(backend) => backend.name(),
            RunBackend::Kubernetes => "kubernetes",
        }
    }
}

pub fn backend(value: &str) -> Result<RunBackend, String> {
    match value {
        "kubernetes" | "k8s" => Ok(RunBackend::Kubernetes),
        other => other
            .parse()
            .map(RunBackend::Lab)
            .map_err(|_| format!("unknown backend {other:?}; known: netns, loopback, kubernetes")),
    }
}

/// Which cluster.
#[derive(Debug, Clone, clap::Args)]
pub struct KubeConnection {
    /// The kubeconfig (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long)]
    pub kubeconfig: Option<std::path::PathBuf>,
    /// The kubeconfig's context (default: its current one).
    #[arg(long)]
    pub context: Option<String>,
}

/// The cluster, and the image its pods run.
#[derive(Debug, Clone, clap::Args)]
pub struct KubeTarget {
    #[command(flatten)]
    pub cluster: KubeConnection,
    /// The meshbench image every pod runs (`meshbench image build` writes one; push it where
    /// the cluster pulls from, or import it into the nodes' containerd).
    #[arg(long, default_value = concat!("docker.io/library/meshbench:", env!("CARGO_PKG_VERSION")))]
    pub image: String,
}

/// What a cluster command says in a binary built without the Kubernetes backend (the
/// `kubernetes` cargo feature, off by default so that a first build takes minutes less):
/// `command` names what was asked, and the error is the input's (exit code 2).
#[cfg(not(feature = "kubernetes"))]
pub fn without_kubernetes(command: &str) -> anyhow::Error {
    super::BadInput(format!(
        "{command}: this meshbench was built without the Kubernetes backend; build it with \
         `cargo build --release --features kubernetes`"
    ))
    .into()
}

#[cfg(feature = "kubernetes")]
impl KubeTarget {
    /// The platform's options; the run's identities are kept under `work_dir` while it runs.
    pub fn options(&self, work_dir: &std::path::Path) -> meshbench_kube::KubeOptions {
        meshbench_kube::KubeOptions {
            kubeconfig: self.cluster.kubeconfig.clone(),
            context: self.cluster.context.clone(),
            image: self.image.clone(),
            work_dir: work_dir.to_owned(),
            ..Default::default()
        }
    }
}

/// How to run on a cluster (`--backend kubernetes`).
#[derive(Debug, Clone, clap::Args)]
pub struct KubeArgs {
    #[command(flatten)]
    pub target: KubeTarget,
    /// Split each cell's load over this many load generator pods (constant-rate and
    /// closed-loop points; each gets its share of the connections and of the rate), their
    /// latency histograms merged exactly.
    #[arg(long, default_value = "1", value_parser = at_least_one_u32)]
    pub generators: u32,
}

fn at_least_one_u32(value: &str) -> Result<u32, String> {
    at_least_one(value).and_then(|n| u32::try_from(n).map_err(|e| e.to_string()))
}

impl KubeArgs {
    /// Connects to the cluster; every object the run creates is labelled with `run`, and its
    /// identities are kept under `work_dir` while it runs; with `capture_wire`, each cell's
    /// traffic is recorded.
    #[cfg(feature = "kubernetes")]
    pub async fn connect(
        &self,
        run: &str,
        work_dir: &std::path::Path,
        capture_wire: bool,
    ) -> anyhow::Result<Box<dyn meshbench_experiment::platform::Platform>> {
        let options = meshbench_kube::KubeOptions {
            generators: self.generators,
            capture_wire,
            progress: Some(std::sync::Arc::new(|line: &str| eprintln!("  {line}"))),
            ..self.target.options(work_dir)
        };
        Ok(Box::new(
            meshbench_kube::KubePlatform::connect(&options, run).await?,
        ))
    }

    #[cfg(not(feature = "kubernetes"))]
    pub async fn connect(
        &self,
        _run: &str,
        _work_dir: &std::path::Path,
        _capture_wire: bool,
    ) -> anyhow::Result<Box<dyn meshbench_experiment::platform::Platform>> {
        Err(without_kubernetes("--backend kubernetes"))
    }
}
