//! Kubernetes as a platform: connecting to a cluster, a run's namespaces and service accounts
//! (a service account per workload, so SPIFFE identities mean what they do in a mesh), the
//! run's identities (meshbench's CA, as on the local lab; each pod is given only its own),
//! and each cell realized on the nodes its placement names ([`crate::site`]). The run's
//! namespaces are deleted, and waited for, when the platform is dropped.

use std::collections::BTreeMap;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::{Namespace, Node, ServiceAccount};
use kube::api::ListParams;
use kube::{Api, Client, Config};
use meshbench_experiment::platform::{CellPlace, Platform, Site, SiteError};
use meshbench_meshes::{BoxFuture, Installation, Mesh, MeshPki, ProxyArea};
use meshbench_results::{MeshInstallation, UnavailableScenario};
use meshbench_topology::Topology;

use crate::clean::{delete_namespaces, off_runtime};
use crate::objects;
use crate::site::KubeSite;
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
}

/// Where progress lines go (the CLI prints them on stderr).
pub type ProgressLine = std::sync::Arc<dyn Fn(&str) + Send + Sync>;

/// A cluster, connected.
pub struct KubePlatform {
    config: Config,
    pub(crate) client: Client,
    pub(crate) image: String,
    pub(crate) generators: u32,
    pub(crate) progress: Option<ProgressLine>,
    /// Labels every object of the run; part of the run's namespace names.
    run: String,
    server: String,
    version: String,
    /// The run's namespaces, created by `prepare`: the topology's namespace -> the cluster's.
    namespaces: BTreeMap<String, String>,
    work_dir: PathBuf,
    /// The run's identities (set by `prepare`).
    pki: Option<(ProxyArea, MeshPki)>,
    /// What detection found of each mesh a cluster may run, by scenario.
    installed: BTreeMap<&'static str, Installation>,
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
        let installed = crate::installed::detect_all(&client).await?;
        Ok(KubePlatform {
            config,
            client,
            image: options.image.clone(),
            run: run.to_owned(),
            server,
            version: version.git_version,
            namespaces: BTreeMap::new(),
            work_dir: options.work_dir.clone(),
            generators: options.generators.max(1),
            progress: options.progress.clone(),
            pki: None,
            installed,
        })
    }

    /// What detection found of `mesh`, a mesh the cluster runs.
    pub(crate) fn installation(&self, mesh: Mesh) -> Option<&Installation> {
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

    /// A site for `topology` (its services applied), its nodes the cluster's schedulable
    /// nodes in name order; its files go to `dir`. What `realize` gives a cell, for callers
    /// that drive the site themselves (the verifier).
    pub async fn realize_topology(
        &self,
        topology: &Topology,
        dir: &std::path::Path,
    ) -> Result<KubeSite<'_>, Error> {
        let cluster_nodes = self.nodes().await?;
        let need = topology.nodes.len();
        if cluster_nodes.len() < need {
            return Err(Error::TooFewNodes {
                have: cluster_nodes.len(),
                need,
                names: cluster_nodes.join(", "),
            });
        }
        let spare = cluster_nodes.get(need).cloned();
        let nodes: BTreeMap<String, String> =
            topology.nodes.iter().cloned().zip(cluster_nodes).collect();
        KubeSite::realize(self, topology, dir, nodes, spare).await
    }

    /// The schedulable nodes, by name.
    async fn nodes(&self) -> Result<Vec<String>, Error> {
        let nodes = Api::<Node>::all(self.client.clone())
            .list(&ListParams::default())
            .await
            .map_err(Error::api("listing nodes"))?;
        let mut names: Vec<String> = nodes
            .items
            .into_iter()
            .filter(|n| {
                let unschedulable = n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true);
                let tainted = n
                    .spec
                    .as_ref()
                    .and_then(|s| s.taints.as_ref())
                    .is_some_and(|t| {
                        t.iter()
                            .any(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
                    });
                !unschedulable && !tainted
            })
            .filter_map(|n| n.metadata.name)
            .collect();
        names.sort();
        Ok(names)
    }
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

impl Platform for KubePlatform {
    fn name(&self) -> String {
        format!("kubernetes/{} ({})", self.version, self.server)
    }

    /// Every application runs on a cluster: E1's echo, E3's application with its
    /// experimenter in a pod, and E4's counter chain enrolled as a whole.
    fn check(
        &self,
        _profile: &meshbench_experiment::Profile,
    ) -> Result<(), meshbench_experiment::Error> {
        Ok(())
    }

    /// A mesh without a Kubernetes flavour yet; the binaries of the rest are in the image.
    fn unavailable(&self, mesh: Mesh) -> Option<UnavailableScenario> {
        if let Some(installed) = self.installed.get(mesh.name()) {
            return installed.unusable.as_ref().map(|why| UnavailableScenario {
                name: mesh.name().to_owned(),
                reason: why.clone(),
                install: String::new(),
            });
        }
        if mesh.cluster().is_some() {
            return None;
        }
        let available: Vec<&str> = Mesh::all()
            .filter(|m| m.cluster().is_some())
            .map(|m| m.name())
            .collect();
        Some(UnavailableScenario {
            name: mesh.name().to_owned(),
            reason: format!(
                "mesh {} does not run on Kubernetes yet (on a cluster: {})",
                mesh.name(),
                available.join(", ")
            ),
            install: String::new(),
        })
    }

    fn cluster_meshes(&self) -> Vec<MeshInstallation> {
        self.installed
            .iter()
            .map(|(scenario, i)| MeshInstallation {
                scenario: (*scenario).to_owned(),
                usable: i.unusable.is_none(),
                version: i.version.clone(),
                mode: i.mode.clone(),
                namespace: i.namespace.clone(),
                revision: i.revision.clone(),
                reason: i.unusable.clone(),
            })
            .collect()
    }

    fn prepare<'a>(
        &'a mut self,
        topology: &'a Topology,
        policy: &'a str,
    ) -> BoxFuture<'a, Result<(), meshbench_experiment::Error>> {
        Box::pin(async move {
            let platform_err = |e: Error| meshbench_experiment::Error::Mesh(e.into());
            let area =
                ProxyArea::create(&self.work_dir).map_err(meshbench_experiment::Error::Mesh)?;
            let pki = MeshPki::create(&area, topology, policy)
                .map_err(meshbench_experiment::Error::Mesh)?;
            self.pki = Some((area, pki));
            // The run's own namespace holds meshbench's CA service, whatever the topology's
            // namespaces are.
            let run_namespace = meshbench_experiment::NAMESPACE.to_owned();
            let namespaces = std::iter::once(&run_namespace)
                .chain(topology.workloads.iter().map(|w| &w.namespace));
            for topology_namespace in namespaces {
                if self.namespaces.contains_key(topology_namespace) {
                    continue;
                }
                let namespace = self.namespace_for(topology_namespace);
                let api = Api::<Namespace>::all(self.client.clone());
                objects::apply(&api, &objects::namespace(&namespace, &self.run))
                    .await
                    .map_err(platform_err)?;
                self.namespaces
                    .insert(topology_namespace.clone(), namespace);
            }
            for workload in &topology.workloads {
                let namespace = self.namespace_for(&workload.namespace);
                let api = Api::<ServiceAccount>::namespaced(self.client.clone(), &namespace);
                objects::apply(
                    &api,
                    &objects::service_account(&workload.service_account, &namespace, &self.run),
                )
                .await
                .map_err(platform_err)?;
            }
            Ok(())
        })
    }

    fn realize<'a>(
        &'a self,
        cell: CellPlace<'a>,
    ) -> BoxFuture<'a, Result<Box<dyn Site<'a> + 'a>, SiteError>> {
        Box::pin(async move {
            if cell.capture_wire {
                return Err(Error::Unsupported {
                    what: "--capture-link".into(),
                    why: "recording the wire between nodes needs access to the nodes".into(),
                }
                .into());
            }
            let site = self.realize_topology(cell.topology, cell.dir).await?;
            Ok(Box::new(site) as Box<dyn Site<'a> + 'a>)
        })
    }
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
