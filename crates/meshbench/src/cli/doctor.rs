//! `meshbench doctor`: what this machine can run, and for each missing piece how to get it.
//! The netns lab, each data plane of the local lab, the benchmarks' peers, a cluster from the
//! kubeconfig (the permissions meshbench needs there, and the meshes it runs), and the browser the web UI's tests drive. It only
//! looks: it starts nothing and changes nothing, and it exits 0 whatever it finds.

#[cfg(feature = "kubernetes")]
use std::{path::PathBuf, time::Duration};

use meshbench_meshes::Scenario;
use meshbench_netlab::Backend;

/// How long the cluster may take to answer before it is reported unreachable.
#[cfg(feature = "kubernetes")]
const CLUSTER_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    #[command(flatten)]
    cluster: super::args::KubeConnection,
}

pub fn run(a: DoctorArgs) -> anyhow::Result<()> {
    let mut out = String::new();
    netns_lab(&mut out);
    data_planes(&mut out);
    peers(&mut out);
    cluster(&mut out, &a.cluster)?;
    browser(&mut out);
    print!("{out}");
    Ok(())
}

fn netns_lab(out: &mut String) {
    out.push_str("local lab\n");
    match Backend::default_here_and_why() {
        (_, None) => {
            out.push_str(
                "  netns lab        ready: root, with ip, iptables and sysctl (`meshbench run` \
                 uses it)\n",
            );
            let tcpdump = match meshbench_netlab::which("tcpdump") {
                Some(path) => format!("ready: {}", path.display()),
                None => "missing: --capture-link records the link between nodes with it; \
                         install it with: apt-get install -y tcpdump"
                    .to_owned(),
            };
            out.push_str(&format!("  tcpdump          {tcpdump}\n"));
        }
        (_, Some(why)) => {
            out.push_str(&format!("  netns lab        missing: {why}\n"));
            out.push_str(
                "  loopback lab     ready: `meshbench run` falls back to it (no link between \
                 nodes, no transparent capture)\n",
            );
        }
    }
}

fn data_planes(out: &mut String) {
    out.push_str("data planes of the local lab\n");
    for mesh in Scenario::all().filter(|m| m.local().is_some()) {
        let line = match mesh.binary() {
            Ok(Some(path)) => format!("ready: {}", path.display()),
            Ok(None) => "ready: meshbench's own".to_owned(),
            Err(unavailable) => format!("missing: {}", unavailable.why),
        };
        out.push_str(&format!("  {:<42} {line}\n", mesh.name()));
    }
    let cluster_only: Vec<&str> = Scenario::all()
        .filter(|m| m.local().is_none())
        .map(|m| m.name())
        .collect();
    out.push_str(&format!(
        "  on a cluster only: {} (see below)\n",
        cluster_only.join(", ")
    ));
}

fn peers(out: &mut String) {
    out.push_str("benchmark peers (`meshbench bench`)\n");
    for (binary, used_by, install) in meshbench_bench::peers() {
        let line = match meshbench_bench::locate_peer(binary) {
            Some(path) => format!("ready: {}", path.display()),
            None => format!("missing ({used_by}): {install}"),
        };
        out.push_str(&format!("  {binary:<16} {line}\n"));
    }
}

fn cluster(out: &mut String, connection: &super::args::KubeConnection) -> anyhow::Result<()> {
    out.push_str("cluster (`meshbench run --backend kubernetes`)\n");
    #[cfg(not(feature = "kubernetes"))]
    {
        let _ = connection;
        out.push_str(
            "  backend          not built in: this meshbench was built without the Kubernetes \
             backend; build it with `cargo build --release --features kubernetes`\n",
        );
        Ok(())
    }
    #[cfg(feature = "kubernetes")]
    cluster_found(out, connection)
}

#[cfg(feature = "kubernetes")]
fn cluster_found(out: &mut String, connection: &super::args::KubeConnection) -> anyhow::Result<()> {
    let Some(kubeconfig) = connection.kubeconfig.clone().or_else(default_kubeconfig) else {
        out.push_str(
            "  kubeconfig       missing: none given, no $KUBECONFIG, no ~/.kube/config; give \
             --kubeconfig, or start the test cluster from the source tree with \
             `./scripts/k8s-lab up` (it prints its kubeconfig)\n",
        );
        return Ok(());
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let found = runtime.block_on(async {
        tokio::time::timeout(CLUSTER_TIMEOUT, async {
            let (config, client) =
                meshbench_kube::connect(Some(&kubeconfig), connection.context.as_deref()).await?;
            let version = client
                .apiserver_version()
                .await
                .map_err(|e| anyhow::anyhow!("{}: {e}", config.cluster_url))?;
            // The permissions first: without the reads, detection itself is refused.
            let missing = meshbench_kube::access::missing(&client, |_| true).await?;
            let meshes = meshbench_kube::installed::detect_all(&client).await;
            anyhow::Ok((
                config.cluster_url.to_string(),
                version.git_version,
                missing,
                meshes,
            ))
        })
        .await
    });
    let (server, version, missing, meshes) = match found {
        Ok(Ok(found)) => found,
        Ok(Err(e)) => {
            out.push_str(&format!(
                "  {:<16} unreachable: {e:#}\n",
                kubeconfig.display().to_string()
            ));
            return Ok(());
        }
        Err(_) => {
            out.push_str(&format!(
                "  {:<16} unreachable: no answer within {} s\n",
                kubeconfig.display().to_string(),
                CLUSTER_TIMEOUT.as_secs()
            ));
            return Ok(());
        }
    };
    out.push_str(&format!(
        "  {:<16} ready: Kubernetes {version} at {server}\n",
        kubeconfig.display().to_string()
    ));
    if missing.is_empty() {
        out.push_str(
            "  permissions      ready: every rule of docs/rbac.yaml (`meshbench-read`, \
             `meshbench-run`, `meshbench-meshes`)\n",
        );
    }
    for permission in &missing {
        out.push_str(&format!("  permissions      missing: {permission}\n"));
    }
    let meshes = match meshes {
        Ok(meshes) => meshes,
        Err(e) => {
            out.push_str(&format!("  meshes           unknown: {e}\n"));
            return Ok(());
        }
    };
    for (mesh, installation) in meshes {
        let line = match &installation.unusable {
            None => format!(
                "installed{}",
                installation
                    .version
                    .as_ref()
                    .map(|v| format!(": version {v}"))
                    .unwrap_or_default()
            ),
            Some(why) => format!("missing: {why}"),
        };
        out.push_str(&format!("  {mesh:<16} {line}\n"));
    }
    Ok(())
}

/// `$KUBECONFIG`'s first file, then `~/.kube/config`, where it exists.
#[cfg(feature = "kubernetes")]
fn default_kubeconfig() -> Option<PathBuf> {
    let from_env = std::env::var_os("KUBECONFIG")
        .and_then(|paths| std::env::split_paths(&paths).next())
        .filter(|p| !p.as_os_str().is_empty());
    from_env.or_else(|| {
        let home = PathBuf::from(std::env::var_os("HOME")?);
        Some(home.join(".kube/config")).filter(|p| p.is_file())
    })
}

fn browser(out: &mut String) {
    out.push_str("web UI tests\n");
    for (binary, package) in [
        ("chromium", "chromium"),
        ("chromedriver", "chromium-driver"),
    ] {
        let line = match meshbench_bench::locate_peer(binary) {
            Some(path) => format!("ready: {}", path.display()),
            None => format!("missing: install it with: apt-get install -y {package}"),
        };
        out.push_str(&format!("  {binary:<16} {line}\n"));
    }
}
