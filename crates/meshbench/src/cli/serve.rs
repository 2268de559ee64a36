//! `meshbench serve`: the web UI and REST API (`meshbench-serve`) over the results directory
//! `run` writes to. Ctrl-C stops serving; a running job is cancelled as Ctrl-C cancels a run.
//!
//! The token comes from `--token-file`, `MESHBENCH_TOKEN` or (visible in `ps`, so with a
//! warning) `--token`; on loopback without one, serve makes one and prints the login URL, as
//! Jupyter does. `MESHBENCH_TOKEN` is taken out of this process's environment before anything
//! starts, so no lab process inherits it.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;
use meshbench_serve::{LabEvents, ServeOptions, Server};

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on. Anything but loopback needs --token.
    #[arg(long, default_value = "127.0.0.1:8090")]
    listen: SocketAddr,
    /// The results directory (the one `meshbench run` writes to by default).
    #[arg(long, default_value = "meshbench-results")]
    results: PathBuf,
    /// A file holding the token every request (or the login) must carry: at least 16
    /// characters. Or set MESHBENCH_TOKEN. Without either, on loopback, serve makes one and
    /// prints the URL that logs in with it.
    #[arg(long, conflicts_with = "token")]
    token_file: Option<PathBuf>,
    /// The token itself (deprecated: every local user sees it in `ps`; use --token-file).
    #[arg(long)]
    token: Option<String>,
    /// Another name the server answers to (`Host`), besides 127.0.0.1, localhost, [::1] and
    /// the listen address: `NAME` (on the listen port, or bare behind a proxy) or `NAME:PORT`.
    /// Repeatable.
    #[arg(long = "allowed-host", value_name = "NAME")]
    allowed_hosts: Vec<String>,
    /// How long a login lasts.
    #[arg(long, default_value = "12h", value_parser = humantime::parse_duration)]
    session_ttl: std::time::Duration,
    /// Let runs go to this cluster too (`backend: kubernetes`), with --context and --image as
    /// `meshbench run --backend kubernetes` takes them.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig's context (default: its current one).
    #[arg(long, requires = "kubeconfig")]
    context: Option<String>,
    /// The meshbench image every pod runs.
    #[arg(long, requires = "kubeconfig", default_value = concat!("docker.io/library/meshbench:", env!("CARGO_PKG_VERSION")))]
    image: String,
}

/// The token from the flags or the environment, which loses it here (before any thread or
/// child exists).
fn given_token(a: &ServeArgs) -> anyhow::Result<Option<String>> {
    let from_env = std::env::var("MESHBENCH_TOKEN").ok();
    std::env::remove_var("MESHBENCH_TOKEN");
    if let Some(path) = &a.token_file {
        let text = std::fs::read_to_string(path)
            .map_err(|e| super::BadInput(format!("--token-file {}: {e}", path.display())))?;
        return Ok(Some(text.trim_end_matches(['\n', '\r']).to_owned()));
    }
    if a.token.is_some() {
        eprintln!(
            "meshbench serve: warning: --token is visible to every local user (ps, /proc); use --token-file or MESHBENCH_TOKEN"
        );
        return Ok(a.token.clone());
    }
    Ok(from_env.filter(|t| !t.is_empty()))
}

/// The open-file limit raised to its hard maximum: the lab's components and the connection cap
/// need more than the usual 1024.
fn raise_file_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let limit = getrlimit(Resource::Nofile);
    let (Some(current), Some(max)) = (limit.current, limit.maximum) else {
        return;
    };
    let wanted = max.min(1 << 20);
    if current < wanted {
        let raised = rustix::process::Rlimit {
            current: Some(wanted),
            maximum: limit.maximum,
        };
        match setrlimit(Resource::Nofile, raised) {
            Ok(()) => {
                eprintln!("meshbench serve: open-file limit raised from {current} to {wanted}")
            }
            Err(e) => eprintln!("meshbench serve: open-file limit stays {current} ({e})"),
        }
    }
}

/// The cluster runs may choose, when serve was given one.
#[cfg(feature = "kubernetes")]
fn cluster(a: &ServeArgs) -> anyhow::Result<Option<meshbench_serve::ClusterOptions>> {
    Ok(a.kubeconfig
        .clone()
        .map(|kubeconfig| meshbench_kube::KubeOptions {
            kubeconfig: Some(kubeconfig),
            context: a.context.clone(),
            image: a.image.clone(),
            ..Default::default()
        }))
}

#[cfg(not(feature = "kubernetes"))]
fn cluster(a: &ServeArgs) -> anyhow::Result<Option<meshbench_serve::ClusterOptions>> {
    match &a.kubeconfig {
        Some(_) => Err(super::args::without_kubernetes("serve --kubeconfig")),
        None => Ok(None),
    }
}

pub fn run(a: ServeArgs, lab_events: LabEvents) -> anyhow::Result<()> {
    let token = given_token(&a)?;
    let kube = cluster(&a)?;
    raise_file_limit();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let server = Server::bind(
            ServeOptions {
                listen: a.listen,
                results_dir: a.results.clone(),
                token,
                allowed_hosts: a.allowed_hosts.clone(),
                session_ttl: a.session_ttl,
                exe: std::env::current_exe()?,
                build: super::build_info(),
                kube,
            },
            lab_events,
        )
        .await?;
        let addr = server.local_addr();
        let login_url = server.login_url();
        // The ready line: what a script (or a test) waits for. It carries the login URL, which
        // holds the token, as Jupyter prints it: to the operator's terminal only.
        println!(
            "{}",
            serde_json::json!({"event": "ready", "role": "serve", "listen": addr.to_string(), "url": format!("http://{addr}/"), "login_url": login_url})
        );
        eprintln!(
            "meshbench serve: http://{addr}/ over {}\n  log in with: {login_url}",
            a.results.display()
        );
        server.serve(super::workload::shutdown_signal()).await;
        Ok(())
    })
}
