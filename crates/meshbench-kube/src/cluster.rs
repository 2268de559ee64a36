//! A cluster, connected: the run's state on it (its id, namespaces, identities, what meshes
//! it runs) that the platform and each cell's site share. The run's namespaces are deleted,
//! and waited for, when it is dropped.

use std::collections::BTreeMap;
use std::path::PathBuf;

use kube::api::ListParams;
use kube::{Client, Config};
use meshbench_meshes::{Installation, MeshPki, ProxyArea, Scenario};

use crate::access;
use crate::clean::{delete_namespaces, off_runtime};
use crate::objects;
use crate::Error;

/// Where and how to reach the cluster.
#[derive(Clone, Default)]
pub struct KubeOptions {
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
    /// The meshbench image every pod runs.
    pub image: String,
    /// Where the run's identities are kept on this machine while it runs (the results
    /// directory: a `.proxy-area` there, or under /run/meshbench as root).
    pub work_dir: PathBuf,
    /// Load generator pods each cell's load is split over (at least 1); their reports are
    /// merged exactly.
    pub generators: u32,
    /// Told how far a cell of many pods has come (pods applied, ready), one line at a time.
    pub progress: Option<ProgressLine>,
    /// Whether cells record their traffic where it reaches the server (see
    /// `site::wire`), intra- and inter-node.
    pub capture_wire: bool,
}

/// Where progress lines go (the CLI prints them on stderr).
pub type ProgressLine = std::sync::Arc<dyn Fn(&str) + Send + Sync>;

/// A cluster, connected.
pub struct KubePlatform {
    pub(crate) config: Config,
    pub(crate) client: Client,
    /// The same cluster without the client's own retries of 503s (up to fifteen, minutes
    /// apart): for readings taken every interval, whose failure is itself worth knowing (a
    /// kubelet gone) and which the next interval retries anyway.
    pub(crate) reader: Client,
    pub(crate) image: String,
    pub(crate) generators: u32,
    pub(crate) progress: Option<ProgressLine>,
    pub(crate) capture_wire: bool,
    /// Labels every object of the run; part of the run's namespace names.
    pub(crate) run: String,
    pub(crate) server: String,
    pub(crate) version: String,
    /// The run's namespaces, created by `prepare`: the topology's namespace -> the cluster's.
    pub(crate) namespaces: BTreeMap<String, String>,
    pub(crate) work_dir: PathBuf,
    /// The run's identities (set by `prepare`).
    pub(crate) pki: Option<(ProxyArea, MeshPki)>,
    /// What detection found of each mesh a cluster may run, by scenario.
    pub(crate) installed: BTreeMap<&'static str, Installation>,
}

impl KubePlatform {
    /// Connects to the cluster of `options` (the kubeconfig's current context unless one is
    /// named) and reads its version. Must run inside a Tokio runtime.
    pub async fn connect(options: &KubeOptions, run: &str) -> Result<Self, Error> {
        let (config, client) =
            connect(options.kubeconfig.as_deref(), options.context.as_deref()).await?;
        let server = config.cluster_url.to_string();
        let version = client
            .apiserver_version()
            .await
            .map_err(Error::api(format!("reading the version of {server}")))?;
        // Every permission a run or verification needs, checked before anything is created,
        // then those on the resources of each mesh the cluster runs.
        access::require(&client, |rule| rule.role != access::Role::Meshes).await?;
        let installed = crate::installed::detect_all(&client).await?;
        let groups = groups_of_running_meshes(&installed);
        access::require(&client, |rule| {
            rule.role == access::Role::Meshes && groups.contains(rule.group)
        })
        .await?;
        let reader = reading_client(&config)?;
        Ok(KubePlatform {
            config,
            client,
            reader,
            image: options.image.clone(),
            run: run.to_owned(),
            server,
            version: version.git_version,
            namespaces: BTreeMap::new(),
            work_dir: options.work_dir.clone(),
            generators: options.generators.max(1),
            progress: options.progress.clone(),
            capture_wire: options.capture_wire,
            pki: None,
            installed,
        })
    }

    /// What detection found of `mesh`, a mesh the cluster runs.
    pub fn installation(&self, mesh: Scenario) -> Option<&Installation> {
        self.installed.get(mesh.name())
    }

    /// The run id that labels every object.
    pub fn run_id(&self) -> &str {
        &self.run
    }

    /// The cluster's namespace for a topology namespace: the run's own for `default`, the
    /// study's names (E3's `app`, `external`) otherwise.
    pub(crate) fn namespace_for(&self, topology_namespace: &str) -> String {
        if topology_namespace == meshbench_experiment::NAMESPACE {
            format!("meshbench-{}", self.run)
        } else {
            topology_namespace.to_owned()
        }
    }

    pub(crate) fn config(&self) -> &Config {
        &self.config
    }

    /// The run's namespaces on the cluster.
    pub(crate) fn namespaces(&self) -> Vec<String> {
        let mut namespaces: Vec<String> = self.namespaces.values().cloned().collect();
        namespaces.sort();
        namespaces.dedup();
        namespaces
    }

    /// The CA of `mesh`, which the cluster runs, as its proxies use it (`None`: it names
    /// none the verifier can ask).
    pub async fn identity_service(
        &self,
        mesh: &dyn meshbench_meshes::InstalledMesh,
    ) -> Result<Option<meshbench_meshes::IdentityService>, Error> {
        let found = crate::installed::detect(&self.client, &mesh.signature()).await?;
        Ok(mesh.identity_service(&found))
    }

    /// The run's identities.
    pub fn pki(&self) -> Result<&MeshPki, Error> {
        self.pki
            .as_ref()
            .map(|(_, pki)| pki)
            .ok_or_else(|| Error::Unsupported {
                what: "a cell before the platform is prepared".into(),
                why: "the run's identities do not exist yet".into(),
            })
    }
}

/// The API groups of the CRDs of every mesh `installed` says the cluster runs (usable).
fn groups_of_running_meshes(
    installed: &BTreeMap<&'static str, Installation>,
) -> std::collections::BTreeSet<&'static str> {
    Scenario::all()
        .filter(|mesh| {
            installed
                .get(mesh.name())
                .is_some_and(|i| i.unusable.is_none())
        })
        .filter_map(|mesh| mesh.cluster().and_then(|c| c.installed()))
        .flat_map(|mesh| mesh.signature().crds)
        .filter_map(|crd| crd.split_once('.').map(|(_, group)| group))
        .collect()
}

/// A client of the cluster of `kubeconfig` (default: `$KUBECONFIG`, then `~/.kube/config`)
/// and `context` (default: its current one). Must run inside a Tokio runtime.
pub async fn connect(
    kubeconfig: Option<&std::path::Path>,
    context: Option<&str>,
) -> Result<(Config, Client), Error> {
    let options = kube::config::KubeConfigOptions {
        context: context.map(str::to_owned),
        ..Default::default()
    };
    let config = match kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| Error::Config(format!("{}: {e}", path.display())))?;
            Config::from_custom_kubeconfig(kubeconfig, &options).await
        }
        None => Config::from_kubeconfig(&options).await,
    }
    .map_err(|e| Error::Config(e.to_string()))?;
    let client = Client::try_from(config.clone()).map_err(Error::api("connecting"))?;
    Ok((config, client))
}

/// A client of `config`'s cluster that answers a failed request at once instead of retrying
/// it (kube's default retries a 503 up to fifteen times with a backoff up to 1000 s, so a
/// read through a dead kubelet's node proxy would hang for minutes).
fn reading_client(config: &Config) -> Result<Client, Error> {
    let mut config = config.clone();
    config.default_retry = false;
    Client::try_from(config).map_err(Error::api("connecting"))
}

impl Drop for KubePlatform {
    fn drop(&mut self) {
        let namespaces = self.namespaces();
        if namespaces.is_empty() {
            return;
        }
        let params = ListParams::default().labels(&objects::selector(&self.run, None));
        off_runtime(
            move |client| async move { delete_namespaces(&client, &namespaces, &params).await },
            self.config.clone(),
        );
    }
}
