//! Kubernetes as a platform: a run's workloads in namespaces of its own with a service
//! account each, each cell's services and pods applied server-side and labelled with the run
//! and the cell, pods placed on the nodes the cell's placement names (node affinity, so the
//! scheduler explains a pod it cannot place), readiness followed through watches, the load
//! generator in a pod of its own whose report comes back through its log, and every
//! container's CPU and memory from its kubelet, cut to the generator's window.
//!
//! Clean-up: a cell's objects are deleted when it finishes and when it is dropped unfinished
//! (an error, Ctrl-C), and the run's namespaces when the platform is dropped; both wait until
//! the cluster has removed them, so that a cell's pods never run into the next one.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use futures::future::try_join_all;
use k8s_openapi::api::core::v1::{
    ConfigMap, HostAlias, Namespace, Node, Pod, Service, ServiceAccount,
};
use kube::api::{DeleteParams, ListParams};
use kube::{Api, Client, Config};
use meshbench_experiment::platform::{
    CellPlace, ClientServer, Entry, Instrument, Measured, Platform, Site, SiteError,
};
use meshbench_experiment::Application;
use meshbench_identity::ServerTlsFiles;
use meshbench_loadgen::LoadSpec;
use meshbench_meshes::{BoxFuture, Enrollment, Mesh};
use meshbench_results::LoadReport;
use meshbench_role::RoleConfig;
use meshbench_topology::{Pod as TopologyPod, Topology};
use meshbench_workload::WorkloadFile;

use crate::objects::{self, PodPlan, CONFIG_DIR};
use crate::pods::{self, Until};
use crate::stats::{SummarySampler, Target};
use crate::Error;

/// How long a pod may take to become ready: an image already on the node starts in seconds.
const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// How long the generator may overrun its own duration before the cell is failed.
const GENERATOR_GRACE: Duration = Duration::from_secs(120);
/// How long clean-up waits for the cluster to remove what it deletes.
const DELETE_TIMEOUT: Duration = Duration::from_secs(90);
/// The shortest interval the kubelets' summaries are read at. Reading them is not free (the
/// API server's proxy, the kubelet, the runtime's stats of every container): read every
/// 100 ms on this project's two-core test cluster, one cell of two had its load generator
/// stalled for half a second (its corrected latency showed it). At 500 ms a 2 s window still
/// gets about four readings.
const MIN_SAMPLE_INTERVAL: Duration = Duration::from_millis(500);
/// The container of every pod meshbench renders.
const CONTAINER: &str = "meshbench";

/// Where and how to reach the cluster.
#[derive(Debug, Clone, Default)]
pub struct KubeOptions {
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
    /// The meshbench image every pod runs.
    pub image: String,
}

/// A cluster, connected.
pub struct KubePlatform {
    config: Config,
    client: Client,
    image: String,
    /// Labels every object of the run; part of the run's namespace names.
    run: String,
    server: String,
    version: String,
    /// The run's namespaces, created by `prepare`: the topology's namespace -> the cluster's.
    namespaces: BTreeMap<String, String>,
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
        Ok(KubePlatform {
            config,
            client,
            image: options.image.clone(),
            run: run.to_owned(),
            server,
            version: version.git_version,
            namespaces: BTreeMap::new(),
        })
    }

    /// The run id that labels every object.
    pub fn run_id(&self) -> &str {
        &self.run
    }

    /// The cluster's namespace for a topology namespace: the run's own for `default`, the
    /// study's names (E3's `app`, `external`) otherwise.
    fn namespace_for(&self, topology_namespace: &str) -> String {
        if topology_namespace == meshbench_experiment::NAMESPACE {
            format!("meshbench-{}", self.run)
        } else {
            topology_namespace.to_owned()
        }
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

    fn check(&self, application: Application) -> Result<(), meshbench_experiment::Error> {
        match application {
            Application::Echo => Ok(()),
            _ => Err(meshbench_experiment::Error::Backend {
                application: application.name(),
                backend: "kubernetes",
                why: "only the echo application runs on Kubernetes so far",
            }),
        }
    }

    fn prepare<'a>(
        &'a mut self,
        topology: &'a Topology,
        _policy: &'a str,
    ) -> BoxFuture<'a, Result<(), meshbench_experiment::Error>> {
        Box::pin(async move {
            let platform_err = |e: Error| meshbench_experiment::Error::Mesh(e.into());
            for workload in &topology.workloads {
                let namespace = self.namespace_for(&workload.namespace);
                if !self.namespaces.contains_key(&workload.namespace) {
                    let api = Api::<Namespace>::all(self.client.clone());
                    objects::apply(&api, &objects::namespace(&namespace, &self.run))
                        .await
                        .map_err(platform_err)?;
                    self.namespaces
                        .insert(workload.namespace.clone(), namespace.clone());
                }
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
            let cluster_nodes = self.nodes().await?;
            let need = cell.topology.nodes.len();
            if cluster_nodes.len() < need {
                return Err(Error::TooFewNodes {
                    have: cluster_nodes.len(),
                    need,
                    names: cluster_nodes.join(", "),
                }
                .into());
            }
            let nodes: BTreeMap<String, String> = cell
                .topology
                .nodes
                .iter()
                .cloned()
                .zip(cluster_nodes)
                .collect();
            let id = meshbench_netlab::new_lab_id();
            let mut site = KubeSite {
                platform: self,
                id,
                topology: cell.topology.clone(),
                cell_dir: cell.dir.to_owned(),
                nodes,
                cluster_ips: BTreeMap::new(),
                apps: vec![],
                pods: vec![],
                finished: false,
            };
            site.apply_services().await?;
            Ok(Box::new(site) as Box<dyn Site<'a> + 'a>)
        })
    }
}

impl Drop for KubePlatform {
    fn drop(&mut self) {
        let namespaces: Vec<String> = self.namespaces.values().cloned().collect();
        if namespaces.is_empty() {
            return;
        }
        let (config, run) = (self.config.clone(), self.run.clone());
        off_runtime(
            move |client| async move { delete_namespaces(&client, &run, &namespaces).await },
            config,
        );
    }
}

/// A pod meshbench created for a cell.
#[derive(Debug, Clone)]
struct CreatedPod {
    namespace: String,
    name: String,
    node: String,
    component: String,
    role: String,
}

/// A cell on the cluster.
struct KubeSite<'a> {
    platform: &'a KubePlatform,
    id: String,
    topology: Topology,
    cell_dir: PathBuf,
    /// The topology's node -> the cluster's.
    nodes: BTreeMap<String, String>,
    /// Service name -> its cluster IP.
    cluster_ips: BTreeMap<String, String>,
    /// Apps to start once the mesh is known: a pod's containers are fixed when it is created.
    apps: Vec<(TopologyPod, WorkloadFile)>,
    pods: Vec<CreatedPod>,
    finished: bool,
}

impl KubeSite<'_> {
    fn client(&self) -> Client {
        self.platform.client.clone()
    }

    fn namespace(&self, pod: &TopologyPod) -> String {
        self.platform.namespace_for(&pod.workload.namespace)
    }

    async fn apply_services(&mut self) -> Result<(), Error> {
        for service in &self.topology.services {
            let namespace = self.platform.namespace_for(&service.namespace);
            let api = Api::<Service>::namespaced(self.client(), &namespace);
            let applied = objects::apply(
                &api,
                &objects::service(
                    &service.name,
                    &namespace,
                    &self.platform.run,
                    &self.id,
                    &service.workload,
                    service.port,
                    service.target_port,
                ),
            )
            .await?;
            let ip = applied
                .spec
                .and_then(|s| s.cluster_ip)
                .ok_or_else(|| Error::Unsupported {
                    what: format!("service {}", service.name),
                    why: "the API server gave it no cluster IP".into(),
                })?;
            self.cluster_ips.insert(service.name.clone(), ip);
        }
        Ok(())
    }

    /// The services by name, as every pod of the cell resolves them.
    fn host_aliases(&self) -> Vec<HostAlias> {
        self.topology
            .services
            .iter()
            .filter_map(|s| {
                let ip = self.cluster_ips.get(&s.name)?;
                let namespace = self.platform.namespace_for(&s.namespace);
                Some(HostAlias {
                    ip: ip.clone(),
                    hostnames: Some(vec![
                        s.name.clone(),
                        format!("{}.{namespace}", s.name),
                        format!("{}.{namespace}.svc.cluster.local", s.name),
                    ]),
                })
            })
            .collect()
    }

    /// Creates `pod` running meshbench with `args`, its config map holding `files`.
    async fn create_pod(
        &mut self,
        pod: &TopologyPod,
        role: &str,
        args: Vec<String>,
        files: BTreeMap<String, String>,
        ready_port: Option<u16>,
    ) -> Result<CreatedPod, Error> {
        let namespace = self.namespace(pod);
        let name = format!("{}-{}", pod.name, self.id);
        let run = &self.platform.run;
        let configs = Api::<ConfigMap>::namespaced(self.client(), &namespace);
        objects::apply(
            &configs,
            &objects::config_map(&name, &namespace, run, &self.id, files),
        )
        .await?;
        let node = self
            .nodes
            .get(&pod.workload.node)
            .cloned()
            .unwrap_or_else(|| pod.workload.node.clone());
        let plan = PodPlan {
            name: &name,
            namespace: &namespace,
            run,
            cell: &self.id,
            workload: &pod.workload.name,
            service_account: &pod.workload.service_account,
            node: &node,
            image: &self.platform.image,
            args,
            config_map: &name,
            ready_port,
            host_aliases: self.host_aliases(),
        };
        let pods = Api::<Pod>::namespaced(self.client(), &namespace);
        objects::apply(&pods, &plan.render()).await?;
        let created = CreatedPod {
            namespace,
            name,
            node,
            component: pod.name.clone(),
            role: role.to_owned(),
        };
        self.pods.push(created.clone());
        Ok(created)
    }

    /// Creates the apps' pods (no mesh yet: `mesh` must add nothing to them) and waits,
    /// in parallel, until every one is ready.
    async fn start_apps(&mut self, mesh: Mesh) -> Result<(), Error> {
        if mesh.enrollment() != Enrollment::Nothing {
            return Err(Error::Unsupported {
                what: format!("mesh {}", mesh.name()),
                why: "only baseline runs on Kubernetes so far".into(),
            });
        }
        let mut created = vec![];
        for (pod, app) in std::mem::take(&mut self.apps) {
            let port = app.listen.port();
            let files = BTreeMap::from([("app.yaml".to_owned(), app.to_yaml())]);
            let args = WorkloadFile::command_line(&PathBuf::from(CONFIG_DIR).join("app.yaml"));
            created.push(
                self.create_pod(&pod, "app", args, files, Some(port))
                    .await?,
            );
        }
        try_join_all(created.iter().map(|p| {
            let api = Api::<Pod>::namespaced(self.client(), &p.namespace);
            async move { pods::wait(&api, &p.name, Until::Ready, READY_TIMEOUT).await }
        }))
        .await?;
        Ok(())
    }

    async fn run_generator(
        &mut self,
        client: &TopologyPod,
        mut spec: LoadSpec,
        sample_interval: Duration,
    ) -> Result<Measured, Error> {
        spec.output = meshbench_loadgen::LoadOutput {
            stdout_json: true,
            quiet: true,
            ..Default::default()
        };
        let budget =
            spec.duration.unwrap_or_default() + spec.warmup.unwrap_or_default() + GENERATOR_GRACE;
        let files = BTreeMap::from([("load.yaml".to_owned(), spec.to_yaml())]);
        let args = LoadSpec::command_line(&PathBuf::from(CONFIG_DIR).join("load.yaml"));
        let generator = self
            .create_pod(client, "load-generator", args, files, None)
            .await?;
        let targets = self
            .pods
            .iter()
            .map(|p| Target {
                namespace: p.namespace.clone(),
                pod: p.name.clone(),
                container: CONTAINER.into(),
                node: p.node.clone(),
                component: p.component.clone(),
                role: p.role.clone(),
            })
            .collect();
        let interval = sample_interval.max(MIN_SAMPLE_INTERVAL);
        let sampler = SummarySampler::start(self.client(), targets, interval);
        let api = Api::<Pod>::namespaced(self.client(), &generator.namespace);
        let finished = pods::wait(&api, &generator.name, Until::Succeeded, budget).await;
        let series = sampler.finish().await;
        finished?;
        let log = pods::log(&api, &generator.name).await?;
        let _ = std::fs::write(self.cell_dir.join("load-generator.log"), &log);
        let load = report_in_log(&log).ok_or_else(|| Error::Result {
            pod: generator.name.clone(),
            problem: "no line of it is a meshbench load report".into(),
        })?;
        let _ = meshbench_results::write_json_atomic(&self.cell_dir.join("load.json"), &load);
        let offset = load.window.realtime_offset_ns.ok_or_else(|| Error::Result {
            pod: generator.name.clone(),
            problem: "its window has no wall-clock offset, so the nodes' readings cannot be cut to it".into(),
        })?;
        let on_wall_clock = |t: u64| (t as i64 + offset).max(0) as u64;
        let (start, end) = (
            on_wall_clock(load.window.start_monotonic_ns),
            on_wall_clock(load.window.end_monotonic_ns),
        );
        let resources = series
            .iter()
            .map(|(target, s)| {
                let mut r = s.summarize(start, end);
                r.node = Some(target.node.clone());
                r
            })
            .collect();
        Ok(Measured {
            load,
            resources,
            wire: None,
        })
    }

    /// Deletes the cell's pods, config maps and services, and waits until the pods are gone.
    async fn delete(
        client: Client,
        run: String,
        cell: String,
        namespaces: Vec<String>,
    ) -> Result<(), Error> {
        let selector = objects::selector(&run, Some(&cell));
        let params = ListParams::default().labels(&selector);
        for namespace in &namespaces {
            let pods = Api::<Pod>::namespaced(client.clone(), namespace);
            pods.delete_collection(&DeleteParams::default(), &params)
                .await
                .map_err(Error::api(format!(
                    "deleting the cell's pods in {namespace}"
                )))?;
            Api::<ConfigMap>::namespaced(client.clone(), namespace)
                .delete_collection(&DeleteParams::default(), &params)
                .await
                .map_err(Error::api(format!(
                    "deleting the cell's config maps in {namespace}"
                )))?;
            // Services have no collection delete.
            let services = Api::<Service>::namespaced(client.clone(), namespace);
            for s in services
                .list(&params)
                .await
                .map_err(Error::api("listing services"))?
            {
                if let Some(name) = s.metadata.name {
                    services
                        .delete(&name, &DeleteParams::default())
                        .await
                        .map_err(Error::api(format!("deleting service {name}")))?;
                }
            }
            wait_all_gone(&pods, &params).await?;
        }
        Ok(())
    }

    fn namespaces(&self) -> Vec<String> {
        let mut namespaces: Vec<String> = self.platform.namespaces.values().cloned().collect();
        namespaces.dedup();
        namespaces
    }
}

impl<'a> Site<'a> for KubeSite<'a> {
    fn id(&self) -> &str {
        &self.id
    }

    fn app_listen(&self, pod: &TopologyPod) -> Result<SocketAddr, SiteError> {
        let port = self
            .topology
            .services
            .iter()
            .find(|s| s.workload == pod.workload.name)
            .map_or(meshbench_meshes::Ports::APP, |s| s.target_port);
        Ok(SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), port))
    }

    fn service_host(&self, service: &str) -> Result<String, SiteError> {
        let s = self
            .topology
            .service(service)
            .ok_or_else(|| Error::Unsupported {
                what: format!("service {service}"),
                why: "the cell's topology has no such service".into(),
            })?;
        Ok(format!("{}:{}", s.name, s.port))
    }

    fn app_tls(&self, _mesh: Mesh, _cell: ClientServer<'_>) -> Option<ServerTlsFiles> {
        None
    }

    fn start_app<'b>(
        &'b mut self,
        pod: &'b TopologyPod,
        app: &'b WorkloadFile,
    ) -> BoxFuture<'b, Result<(), SiteError>> {
        self.apps.push((pod.clone(), app.clone()));
        Box::pin(async { Ok(()) })
    }

    fn deploy<'b>(
        &'b mut self,
        mesh: Mesh,
        cell: ClientServer<'b>,
    ) -> BoxFuture<'b, Result<Entry, SiteError>> {
        Box::pin(async move {
            self.start_apps(mesh).await?;
            Ok(Entry {
                url: format!("http://{}/", self.service_host(cell.service)?),
                client_tls: None,
            })
        })
    }

    fn enroll(&mut self, mesh: Mesh) -> BoxFuture<'_, Result<(), SiteError>> {
        Box::pin(async move { Ok(self.start_apps(mesh).await?) })
    }

    fn measure<'b>(
        &'b mut self,
        client: &'b TopologyPod,
        instrument: Instrument,
        sample_interval: Duration,
        _marker: Option<&'b str>,
    ) -> BoxFuture<'b, Result<Measured, SiteError>> {
        Box::pin(async move {
            match instrument {
                Instrument::Load(spec) => {
                    Ok(self.run_generator(client, spec, sample_interval).await?)
                }
                Instrument::Experimenter(_) => Err(Error::Unsupported {
                    what: "E3's experimenter".into(),
                    why: "only the load generator runs in pods so far".into(),
                }
                .into()),
            }
        })
    }

    fn finish(mut self: Box<Self>) -> BoxFuture<'a, ()> {
        self.finished = true;
        let (client, run, cell, namespaces) = (
            self.client(),
            self.platform.run.clone(),
            self.id.clone(),
            self.namespaces(),
        );
        Box::pin(async move {
            if let Err(e) = KubeSite::delete(client, run, cell, namespaces).await {
                tracing::warn!(error = %e, "the cell's objects were not all deleted; run `meshbench lab clean --kubernetes`");
            }
        })
    }
}

impl Drop for KubeSite<'_> {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let (run, cell, namespaces) = (
            self.platform.run.clone(),
            self.id.clone(),
            self.namespaces(),
        );
        off_runtime(
            move |client| KubeSite::delete(client, run, cell, namespaces),
            self.platform.config.clone(),
        );
    }
}

/// Runs clean-up to its end from a `Drop`, on a runtime of its own in a thread of its own:
/// the caller's runtime may be the one being torn down, or blocked in this very drop.
fn off_runtime<F, Fut>(work: F, config: Config)
where
    F: FnOnce(Client) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<(), Error>>,
{
    let joined = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        runtime.block_on(async move {
            let client = Client::try_from(config).map_err(|e| e.to_string())?;
            work(client).await.map_err(|e| e.to_string())
        })
    })
    .join();
    if let Ok(Err(e)) | Err(e) = joined.map_err(|_| "the clean-up thread panicked".to_string()) {
        tracing::warn!(error = %e, "clean-up incomplete; run `meshbench lab clean --kubernetes`");
    }
}

/// Deletes the run's namespaces (and so everything in them) and waits until they are gone.
async fn delete_namespaces(client: &Client, run: &str, namespaces: &[String]) -> Result<(), Error> {
    let params = ListParams::default().labels(&objects::selector(run, None));
    delete_labelled_namespaces(client, namespaces, &params).await
}

/// Deletes `namespaces` and waits until no namespace matches `params`.
pub(crate) async fn delete_labelled_namespaces(
    client: &Client,
    namespaces: &[String],
    params: &ListParams,
) -> Result<(), Error> {
    let api = Api::<Namespace>::all(client.clone());
    for namespace in namespaces {
        match api.delete(namespace, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(Error::api(format!("deleting namespace {namespace}"))(e)),
        }
    }
    wait_all_gone(&api, params).await
}

/// Waits until nothing matches `params`, following the deletions through a watch.
async fn wait_all_gone<K>(api: &Api<K>, params: &ListParams) -> Result<(), Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    K::DynamicType: Default,
{
    let selector = params.label_selector.clone().unwrap_or_default();
    let config = kube::runtime::watcher::Config::default().labels(&selector);
    let deadline = tokio::time::Instant::now() + DELETE_TIMEOUT;
    let remaining = || async {
        api.list(params)
            .await
            .map(|l| l.items.len())
            .map_err(Error::api("listing what is being deleted"))
    };
    use futures::StreamExt;
    let mut events = kube::runtime::watcher(api.clone(), config).boxed();
    while remaining().await? > 0 {
        // Re-count on every change the cluster reports, until the deadline.
        if tokio::time::timeout_at(deadline, events.next())
            .await
            .is_err()
        {
            return Err(Error::Timeout {
                namespace: String::new(),
                pod: selector.clone(),
                what: "deleted",
                seconds: DELETE_TIMEOUT.as_secs(),
            });
        }
    }
    Ok(())
}

/// The load report the generator printed as one line of JSON, after anything it logged.
fn report_in_log(log: &str) -> Option<LoadReport> {
    log.lines()
        .rev()
        .filter(|l| l.starts_with('{'))
        .find_map(|l| serde_json::from_str::<LoadReport>(l).ok())
}
