//! `meshbench serve`: the web UI and REST API (`meshbench-serve`) over the results directory
//! `run` writes to. Ctrl-C stops serving; a running job is cancelled as Ctrl-C cancels a run.

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
    /// A bearer token every request must carry (also accepted as the cookie the login page
    /// sets); at least 16 characters. Also read from MESHBENCH_TOKEN.
    #[arg(long, env = "MESHBENCH_TOKEN", hide_env_values = true)]
    token: Option<String>,
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

pub fn run(a: ServeArgs, lab_events: LabEvents) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let server = Server::bind(
            ServeOptions {
                listen: a.listen,
                results_dir: a.results.clone(),
                token: a.token,
                exe: std::env::current_exe()?,
                build: super::build_info(),
                kube: a.kubeconfig.map(|kubeconfig| meshbench_kube::KubeOptions {
                    kubeconfig: Some(kubeconfig),
                    context: a.context,
                    image: a.image,
                    ..Default::default()
                }),
            },
            lab_events,
        )
        .await?;
        let addr = server.local_addr();
        // The ready line: what a script (or a test) waits for.
        println!(
            "{}",
            serde_json::json!({"event": "ready", "role": "serve", "listen": addr.to_string(), "url": format!("http://{addr}/")})
        );
        eprintln!(
            "meshbench serve: http://{addr}/ over {}",
            a.results.display()
        );
        server.serve(super::workload::shutdown_signal()).await;
        Ok(())
    })
}
