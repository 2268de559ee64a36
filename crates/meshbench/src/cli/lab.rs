//! `meshbench lab ...`: housekeeping of the local lab.

use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum LabCommand {
    /// Remove what crashed runs left behind: processes in lab namespaces or cgroups, the
    /// namespaces (`mb-*`), their /etc/netns files, the cgroups (`meshbench/*`) and the
    /// proxy areas of runs no longer running (`/run/meshbench/run-*`).
    Clean {
        /// Only this lab (the id in its namespace names, `mb-<id>-...`).
        #[arg(long)]
        lab: Option<String>,
    },
}

pub fn run(command: LabCommand) -> anyhow::Result<()> {
    match command {
        LabCommand::Clean { lab } => {
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
