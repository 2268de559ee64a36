//! `meshbench lab ...`: housekeeping of the local lab, or of a cluster (`--backend kubernetes`).

use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum LabCommand {
    /// Remove what crashed runs left behind: processes in lab namespaces or cgroups, the
    /// namespaces (`mb-*`), their /etc/netns files, the cgroups (`meshbench/*`) and the
    /// proxy areas of runs no longer running (`/run/meshbench/run-*`).
    Clean {
        /// Only this lab (the id in its namespace names, `mb-<id>-...`).
        #[arg(long, conflicts_with = "kubernetes")]
        lab: Option<String>,
        /// Clean a cluster instead: delete every object labelled
        /// `app.kubernetes.io/managed-by=meshbench` (runs' namespaces, and pods, services,
        /// config maps and service accounts elsewhere) and wait until they are gone.
        #[arg(long)]
        kubernetes: bool,
        /// The same as `--kubernetes` with `kubernetes`; a lab backend (`netns`, `loopback`)
        /// cleans the local lab, as without it.
        #[arg(long, value_parser = super::args::backend, conflicts_with = "kubernetes")]
        backend: Option<super::args::RunBackend>,
        #[command(flatten)]
        cluster: super::args::KubeConnection,
    },
}

pub fn run(command: LabCommand) -> anyhow::Result<()> {
    let LabCommand::Clean {
        lab,
        kubernetes,
        backend,
        cluster,
    } = command;
    let kubernetes = kubernetes || backend == Some(super::args::RunBackend::Kubernetes);
    if kubernetes && lab.is_some() {
        return Err(super::BadInput(
            "--lab names a local lab; it cannot go with --backend kubernetes".into(),
        )
        .into());
    }
    match kubernetes {
        #[cfg(not(feature = "kubernetes"))]
        true => {
            let _ = cluster;
            Err(super::args::without_kubernetes("lab clean --kubernetes"))
        }
        #[cfg(feature = "kubernetes")]
        true => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let deleted = runtime.block_on(async {
                let (_, client) = meshbench_kube::connect(
                    cluster.kubeconfig.as_deref(),
                    cluster.context.as_deref(),
                )
                .await?;
                meshbench_kube::clean(&client).await
            })?;
            match deleted {
                0 => println!("nothing to clean"),
                n => println!("deleted {n} object(s) labelled by meshbench"),
            }
            Ok(())
        }
        false => {
            let report = meshbench_netlab::clean_all(lab.as_deref())?;
            let areas = match lab {
                None => meshbench_meshes::clean_stale_areas(),
                Some(_) => vec![],
            };
            for area in &areas {
                println!("  proxy area {}", area.display());
            }
            if report.is_empty() && areas.is_empty() {
                println!("nothing to clean");
            } else {
                println!(
                    "removed {} namespace(s), {} cgroup(s); killed {} process(es)",
                    report.namespaces.len(),
                    report.cgroups.len(),
                    report.processes_killed.len()
                );
                for ns in &report.namespaces {
                    println!("  netns {ns}");
                }
                for group in &report.cgroups {
                    println!("  cgroup {group}");
                }
            }
            Ok(())
        }
    }
}
