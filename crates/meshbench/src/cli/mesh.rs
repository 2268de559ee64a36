//! `meshbench mesh ...`: the meshes a cluster runs (Istio, Istio ambient, Linkerd, Cilium,
//! Consul): which are installed, what meshbench would apply for an experiment's policy, and
//! whether the cluster accepts it.

use std::io::Write;
use std::path::PathBuf;

use clap::Subcommand;
use meshbench_experiment::{Application, Placement};
use meshbench_meshes::Scenario;
use meshbench_policy::Policy;

#[derive(Debug, Subcommand)]
pub enum MeshCommand {
    /// Which meshes the cluster runs: their CRDs, control plane, version and mode.
    Detect {
        #[command(flatten)]
        cluster: super::args::KubeConnection,
    },
    /// Print what meshbench applies to run an application under a mesh: its resources
    /// (YAML), the labels and annotations that enroll the pods, and what the mesh could not
    /// express. Needs no cluster.
    Render(RenderArgs),
    /// Validate it on the cluster without running anything: every resource as a server-side
    /// dry run (the mesh's CRD schemas, its admission webhooks), every workload's pod created
    /// as a dry run (what the mesh's injector adds). Exit 1 when the cluster refuses any.
    Check {
        #[command(flatten)]
        what: RenderArgs,
        #[command(flatten)]
        target: super::args::KubeTarget,
    },
}

#[derive(Debug, clap::Args)]
pub struct RenderArgs {
    /// The mesh (a scenario the cluster runs: istio, istio-ambient, linkerd, cilium,
    /// consul-connect).
    #[arg(long)]
    mesh: String,
    /// The application whose workloads and policy are rendered.
    #[arg(long, default_value = "zero-trust-app")]
    application: String,
    /// A policy file to render instead of the application's own.
    #[arg(long)]
    policy: Option<PathBuf>,
}

impl RenderArgs {
    fn resolve(&self) -> anyhow::Result<(Scenario, meshbench_topology::Topology, Policy)> {
        let mesh = Scenario::parse(&self.mesh).ok_or_else(|| {
            super::BadInput(format!(
                "--mesh {:?}: unknown mesh; known: {}",
                self.mesh,
                Scenario::names().join(", ")
            ))
        })?;
        if mesh.cluster().and_then(|c| c.installed()).is_none() {
            let installed: Vec<&str> = Scenario::all()
                .filter(|m| m.cluster().and_then(|c| c.installed()).is_some())
                .map(|m| m.name())
                .collect();
            return Err(super::BadInput(format!(
                "--mesh {}: not a mesh a cluster runs (meshbench brings it); one of: {}",
                mesh.name(),
                installed.join(", ")
            ))
            .into());
        }
        let application = Application::parse(&self.application).ok_or_else(|| {
            super::BadInput(format!(
                "--application {:?}: unknown; known: {}",
                self.application,
                Application::NAMES.join(", ")
            ))
        })?;
        let policy = match &self.policy {
            Some(path) => {
                Policy::load(path).map_err(|e| super::BadInput(format!("--policy: {e}")))?
            }
            None => Policy::from_yaml(&application.policy_yaml())?,
        };
        Ok((mesh, application.topology(Placement::IntraNode, 1), policy))
    }
}

pub fn run(command: MeshCommand) -> anyhow::Result<()> {
    match command {
        MeshCommand::Detect { cluster } => detect(&cluster),
        MeshCommand::Render(args) => render(&args),
        MeshCommand::Check { what, target } => check(&what, &target),
    }
}

#[cfg(feature = "kubernetes")]
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

#[cfg(not(feature = "kubernetes"))]
fn detect(_: &super::args::KubeConnection) -> anyhow::Result<()> {
    Err(super::args::without_kubernetes("mesh detect"))
}

#[cfg(feature = "kubernetes")]
fn detect(cluster: &super::args::KubeConnection) -> anyhow::Result<()> {
    let found = runtime()?.block_on(async {
        let (_, client) =
            meshbench_kube::connect(cluster.kubeconfig.as_deref(), cluster.context.as_deref())
                .await?;
        meshbench_kube::installed::detect_all(&client).await
    })?;
    for (scenario, installation) in found {
        let facts: Vec<String> = [
            installation
                .version
                .as_ref()
                .map(|v| format!("version {v}")),
            installation.mode.as_ref().map(|m| format!("mode {m}")),
            installation.namespace.as_ref().map(|n| format!("in {n}")),
            installation
                .revision
                .as_ref()
                .map(|r| format!("revision {r}")),
        ]
        .into_iter()
        .flatten()
        .collect();
        match &installation.unusable {
            None => println!("{scenario:<16} installed: {}", facts.join(", ")),
            Some(why) => println!("{scenario:<16} unavailable: {why}"),
        }
    }
    Ok(())
}

fn render(args: &RenderArgs) -> anyhow::Result<()> {
    let (mesh, topology, policy) = args.resolve()?;
    let installed = mesh
        .cluster()
        .and_then(|c| c.installed())
        .expect("resolved");
    let translation = meshbench_meshes::translate_unplaced(installed, &policy, &topology)?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "# {}: {}", mesh.name(), mesh.description())?;
    for line in documented(mesh, installed) {
        writeln!(out, "# {line}")?;
    }
    write!(out, "{}", translation.to_yaml())?;
    Ok(())
}

/// What the mesh is documented to do that a reader of its verification must know.
fn documented(mesh: Scenario, installed: &dyn meshbench_meshes::InstalledMesh) -> Vec<String> {
    let documented = installed.documented();
    let same_node = if mesh.encrypts_same_node() {
        "encrypted"
    } else {
        "NOT encrypted"
    };
    std::iter::once(format!(
        "on the wire: {}; same-node traffic {same_node}",
        documented.wire
    ))
    .chain(documented.notes.iter().map(|n| format!("documented: {n}")))
    .collect()
}

/// A cluster refused some of what meshbench would apply.
#[cfg(feature = "kubernetes")]
#[derive(Debug, thiserror::Error)]
#[error("the cluster refused {0} of meshbench's resources or pods for this mesh")]
pub(crate) struct Refused(pub usize);

#[cfg(not(feature = "kubernetes"))]
fn check(_: &RenderArgs, _: &super::args::KubeTarget) -> anyhow::Result<()> {
    Err(super::args::without_kubernetes("mesh check"))
}

#[cfg(feature = "kubernetes")]
fn check(args: &RenderArgs, target: &super::args::KubeTarget) -> anyhow::Result<()> {
    let (mesh, topology, policy) = args.resolve()?;
    let report = runtime()?.block_on(async {
        let (_, client) = meshbench_kube::connect(
            target.cluster.kubeconfig.as_deref(),
            target.cluster.context.as_deref(),
        )
        .await?;
        meshbench_kube::installed::check(
            &client,
            mesh,
            &topology,
            &policy,
            &meshbench_netlab::new_lab_id(),
            &target.image,
        )
        .await
    })?;
    let installation = &report.installation;
    match &installation.unusable {
        None => println!(
            "{}: installed (version {}, mode {})",
            mesh.name(),
            installation.version.as_deref().unwrap_or("unknown"),
            installation.mode.as_deref().unwrap_or("unknown")
        ),
        Some(why) => println!("{}: {why}", mesh.name()),
    }
    let mut refused = 0;
    for applied in &report.resources {
        match &applied.outcome {
            Ok(()) => println!("  accepted  {}", applied.resource),
            Err(e) => {
                refused += 1;
                println!("  REFUSED   {}: {e}", applied.resource);
            }
        }
    }
    for pod in &report.pods {
        let what = if pod.enrolled {
            "enrolled"
        } else {
            "not enrolled"
        };
        match &pod.outcome {
            Ok(added) if added.is_empty() => {
                println!(
                    "  pod {} ({what}): admitted, nothing injected",
                    pod.workload
                )
            }
            Ok(added) => {
                let added: Vec<String> = added
                    .iter()
                    .map(|(c, class)| match class {
                        Some(class) => format!("{c} ({class})"),
                        None => c.clone(),
                    })
                    .collect();
                println!(
                    "  pod {} ({what}): admitted, injected {}",
                    pod.workload,
                    added.join(", ")
                );
            }
            Err(e) => {
                refused += 1;
                println!("  pod {} ({what}): REFUSED: {e}", pod.workload);
            }
        }
    }
    for note in &report.notes {
        println!("  note: {note}");
    }
    if let Some(installed) = mesh.cluster().and_then(|c| c.installed()) {
        for line in documented(mesh, installed) {
            println!("  {line}");
        }
    }
    match refused {
        0 => Ok(()),
        n => Err(Refused(n).into()),
    }
}
