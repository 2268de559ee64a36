//! `meshbench serve`: a web UI and a REST API over the same library code as the CLI, so the two
//! cannot disagree. Runs (queued one at a time, since the lab is one machine), their live
//! progress over server-sent events, reports and downloads (results, CSVs, Fortio and SMP
//! documents), comparisons, costs, verifications, and E3's experimenter frontend.
//!
//! Module map (no two modules use each other: `router` puts `pages` and `api` behind `guard`,
//! and `error` and `sessions` are leaves): [`catalog`] reads the results directory (runs, their files, verifications);
//! [`jobs`] queues and runs runs and verifications on a worker thread and publishes their
//! progress; [`events`] carries the lab's events from tracing to the running job; `api`
//! answers JSON; `pages` renders HTML (plain forms that work without JavaScript; `static/`
//! adds live progress and E3's client); `guard` holds the security rules (allowed hosts,
//! bearer token or session, CSRF, origin checks); `sessions` keeps the logins; `untrusted`
//! reads the results directory without following links; `openapi` describes the API; `e3`
//! runs E3's experimenter against a calculator the server starts.
//!
//! Limits (defaults; SECURITY.md has them all): a spec or any request body 1 MiB (an E3 result
//! to analyze 8 MiB); the connection limits of [`meshbench_workload::ConnectionLimits::control`]
//! (256 connections, 10 s to say which protocol, 60 s for a request head, HTTP/2 closed after
//! 60 s without a stream); at most [`jobs::QUEUE_LIMIT`] queued jobs and
//! [`state::MAX_WATCHERS`] open event streams (64, 8 per caller); an E3 experiment at most
//! `e3::MAX_INTERACTIONS` requests (100,000), one at a time, and none while a job measures.

mod api;
pub mod catalog;
mod e3;
mod error;
pub mod events;
mod guard;
pub mod jobs;
mod openapi;
mod pages;
mod router;
pub mod sessions;
pub mod state;
mod untrusted;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use events::LabEvents;
use meshbench_lab::BuildInfo;

/// How `meshbench serve` is set up.
#[derive(Clone)]
pub struct ServeOptions {
    pub listen: SocketAddr,
    /// The results directory `run` writes to; runs started here go there too.
    pub results_dir: PathBuf,
    /// The token every request (or the session it logs in) must carry; required for any
    /// listen address but loopback, made at random on loopback when not given.
    pub token: Option<String>,
    /// Names the server answers to besides its own addresses (`--allowed-host`).
    pub allowed_hosts: Vec<String>,
    /// How long a login lasts.
    pub session_ttl: Duration,
    /// The meshbench binary, started once per lab component.
    pub exe: PathBuf,
    pub build: BuildInfo,
    /// The cluster runs may choose (`backend: kubernetes`), when serve was given one; each
    /// run gets its own `work_dir` and its progress lines go to the job's log.
    pub kube: Option<ClusterOptions>,
}

/// The cluster serve was given (`--kubeconfig`).
#[cfg(feature = "kubernetes")]
pub use meshbench_kube::KubeOptions as ClusterOptions;

/// Built without the Kubernetes backend (the `kubernetes` feature), there is no cluster to
/// give: the type has no value, so `kube` is always `None`.
#[cfg(not(feature = "kubernetes"))]
#[derive(Debug, Clone)]
pub enum ClusterOptions {}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "--listen {listen}: serving beyond loopback needs --token-file (or MESHBENCH_TOKEN): a \
         token every request must carry; or listen on 127.0.0.1, where serve makes one"
    )]
    TokenRequired { listen: SocketAddr },
    #[error("the token: must be at least {min} characters of printable ASCII without spaces")]
    WeakToken { min: usize },
    #[error("--results {path}: {source}")]
    Results {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("starting a server: {0}")]
    Bind(#[from] meshbench_workload::Error),
}

impl meshbench_role::InputFault for Error {
    fn is_bad_input(&self) -> bool {
        match self {
            Error::TokenRequired { .. } | Error::WeakToken { .. } | Error::Results { .. } => true,
            Error::Bind(e) => e.is_bad_input(),
        }
    }
}

/// A bound server: the address is known, nothing is served yet.
pub struct Server {
    bound: meshbench_workload::BoundServer,
    state: Arc<state::AppState>,
}

/// How long shutdown waits for open requests (event streams included) before dropping them.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

impl Server {
    /// Checks the options, starts the job worker and E3's calculator, and binds the listener.
    pub async fn bind(options: ServeOptions, lab_events: LabEvents) -> Result<Server, Error> {
        let token = guard::token_for(options.listen, options.token.clone())?;
        std::fs::create_dir_all(&options.results_dir).map_err(|source| Error::Results {
            path: options.results_dir.clone(),
            source,
        })?;
        let results_dir =
            std::path::absolute(&options.results_dir).map_err(|source| Error::Results {
                path: options.results_dir.clone(),
                source,
            })?;
        let calculator = e3::Calculator::start().await?;
        let jobs = jobs::Jobs::start(jobs::WorkerOptions {
            results_dir: results_dir.clone(),
            exe: options.exe.clone(),
            build: options.build.clone(),
            lab_events,
            kube: options.kube.clone(),
        });
        let bound = meshbench_workload::bind(&meshbench_workload::ServeOptions {
            listen: options.listen,
            tls: None,
            drain_timeout: DRAIN_TIMEOUT,
        })
        .await?
        .with_limits(meshbench_workload::ConnectionLimits::control());
        // The names allowed carry the port bound, which `--listen ...:0` learns only now.
        let addr = bound.local_addr();
        let state = Arc::new(state::AppState {
            results_dir,
            token,
            sessions: sessions::Sessions::new(options.session_ttl),
            cookie_name: format!("meshbench_session_{}", addr.port()),
            allowed_hosts: guard::allowed_hosts(addr, &options.allowed_hosts),
            jobs,
            calculator,
            cluster: options.kube.is_some(),
            watchers: Default::default(),
        });
        Ok(Server { bound, state })
    }

    /// The address that logs a browser in with the token, once (as Jupyter prints it).
    pub fn login_url(&self) -> String {
        let addr = self.local_addr();
        let host = if addr.ip().is_unspecified() {
            format!("127.0.0.1:{}", addr.port())
        } else {
            addr.to_string()
        };
        format!("http://{host}/login?token={}", self.state.token)
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.bound.local_addr()
    }

    /// Serves until `shutdown` resolves; a running job is then cancelled as Ctrl-C cancels a
    /// CLI run (finished cells kept, the run marked partial), and waited for.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) {
        let router = router::router(self.state.clone());
        let service = hyper_util::service::TowerToHyperService::new(router);
        self.bound.serve(service, shutdown).await;
        let jobs = self.state.jobs.clone();
        let _ = tokio::task::spawn_blocking(move || jobs.shut_down()).await;
    }
}
