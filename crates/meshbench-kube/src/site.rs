//! One cell on a cluster: its services (and meshbench's CA service) applied when it is
//! realized, its pods created once the scenario's mesh is known (a pod's containers are
//! fixed when it is created, so `start_app` only records the app), each with what the mesh
//! adds (`ClusterMesh`: capture, proxies, credentials), the generator's pod last, every
//! container sampled from its kubelet while the generator runs, and everything of the cell
//! deleted when it finishes or is dropped.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::future::try_join_all;
use k8s_openapi::api::core::v1::{ConfigMap, HostAlias, Pod, Secret, Service};
use kube::{Api, Client};
use meshbench_experiment::platform::{ClientServer, Entry, Instrument, Measured, Site, SiteError};
use meshbench_identity::{CaServerFile, ServerTlsFiles};
use meshbench_loadgen::{LoadModel, LoadSpec};
use meshbench_meshes::{
    identity_files, BoxFuture, ClusterCell, ClusterMesh, ClusterSite, Mesh, PlacedPod,
    PodAdditions, Ports, CONFIG_DIR_IN_POD, POD_PKI_DIR,
};
use meshbench_results::LoadReport;
use meshbench_role::RoleConfig;
use meshbench_topology::{Pod as TopologyPod, Topology, Workload};
use meshbench_workload::WorkloadFile;

use crate::clean::{delete_cell, off_runtime};
use crate::objects::{self, PodPlan, PodShape, Ready, APP_CONTAINER};
use crate::platform::KubePlatform;
use crate::pods::{self, Until};
use crate::stats::{SummarySampler, Target};
use crate::Error;

/// How long a pod may take to become ready: an image already on the node starts in seconds.
const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// How long the generator may overrun its own duration before the cell is failed.
const GENERATOR_GRACE: Duration = Duration::from_secs(120);
/// The shortest interval the kubelets' summaries are read at. Reading them is not free (the
/// API server's proxy, the kubelet, the runtime's stats of every container): read every
/// 100 ms on this project's two-core test cluster, one cell of two had its load generator
/// stalled for half a second (its corrected latency showed it). At 500 ms a 2 s window still
/// gets about four readings.
const MIN_SAMPLE_INTERVAL: Duration = Duration::from_millis(500);
/// How long the generator waits for the service to answer before measuring.
const TARGET_WAIT: Duration = Duration::from_secs(60);
/// The file a generator waits for when the path it measures needs its address first.
const START_GATE: &str = "/tmp/meshbench-start";
/// How long a service's routes may take to reach every node.
const ROUTES_TIMEOUT: Duration = Duration::from_secs(90);
/// meshbench's CA service: the control plane of our own data plane.
const CA_WORKLOAD: &str = "meshbench-ca";

/// A container meshbench created, as the results name it.
#[derive(Debug, Clone)]
struct Sampled {
    container: String,
    component: String,
    role: String,
}

/// A pod meshbench created for a cell.
#[derive(Debug, Clone)]
struct CreatedPod {
    /// The pod as the topology knows it (a generator's is its client's, renamed).
    topology: TopologyPod,
    /// What it runs (`app`, `load-generator`, `node-agent`, ...).
    role: String,
    namespace: String,
    name: String,
    node: String,
    containers: Vec<Sampled>,
    /// Its address, once it is ready.
    ip: Option<IpAddr>,
    /// Its node's address, once it is ready.
    host_ip: Option<IpAddr>,
}

/// The cell's client and server, once its mesh is deployed.
struct Deployed {
    mesh: Mesh,
    client: TopologyPod,
    server: TopologyPod,
    service: String,
}

/// One cell on a cluster (see the module's header).
pub struct KubeSite<'a> {
    platform: &'a KubePlatform,
    id: String,
    topology: Topology,
    cell_dir: PathBuf,
    /// The topology's node -> the cluster's.
    nodes: BTreeMap<String, String>,
    /// Each service's address as pods dial it.
    services: BTreeMap<String, SocketAddr>,
    ca_endpoint: SocketAddr,
    /// The experiment's policy, for meshes that translate it.
    policy: meshbench_policy::Policy,
    /// Apps to start once the mesh is known.
    apps: Vec<(TopologyPod, WorkloadFile)>,
    deployed: Option<Deployed>,
    pods: Vec<CreatedPod>,
    finished: bool,
}

impl<'a> KubeSite<'a> {
    /// The cell's site, its services applied.
    pub(crate) async fn realize(
        platform: &'a KubePlatform,
        topology: &Topology,
        cell_dir: &Path,
        nodes: BTreeMap<String, String>,
    ) -> Result<KubeSite<'a>, Error> {
        let policy = meshbench_policy::Policy::load(&platform.pki()?.policy)
            .map_err(meshbench_meshes::Error::from)?;
        let mut site = KubeSite {
            platform,
            policy,
            id: meshbench_netlab::new_lab_id(),
            topology: topology.clone(),
            cell_dir: cell_dir.to_owned(),
            nodes,
            services: BTreeMap::new(),
            ca_endpoint: SocketAddr::from((Ipv4Addr::UNSPECIFIED, Ports::CA)),
            apps: vec![],
            deployed: None,
            pods: vec![],
            finished: false,
        };
        let services: Vec<_> = site
            .topology
            .services
            .iter()
            .map(|s| {
                (
                    s.name.clone(),
                    s.namespace.clone(),
                    s.workload.clone(),
                    s.port,
                    s.target_port,
                )
            })
            .collect();
        for (name, namespace, workload, port, target_port) in services {
            let ip = site
                .apply_service(&name, &namespace, &workload, port, target_port)
                .await?;
            site.services.insert(name, SocketAddr::new(ip, port));
        }
        let ca_namespace = meshbench_experiment::NAMESPACE;
        let ip = site
            .apply_service(CA_WORKLOAD, ca_namespace, CA_WORKLOAD, Ports::CA, Ports::CA)
            .await?;
        site.ca_endpoint = SocketAddr::new(ip, Ports::CA);
        Ok(site)
    }

    fn client(&self) -> Client {
        self.platform.client.clone()
    }

    /// Applies a service of the cell and returns its cluster IP.
    async fn apply_service(
        &self,
        name: &str,
        topology_namespace: &str,
        workload: &str,
        port: u16,
        target_port: u16,
    ) -> Result<IpAddr, Error> {
        let namespace = self.platform.namespace_for(topology_namespace);
        let api = Api::<Service>::namespaced(self.client(), &namespace);
        let service = objects::service(
            name,
            &namespace,
            self.platform.run_id(),
            &self.id,
            workload,
            port,
            target_port,
        );
        let applied = objects::apply(&api, &service).await?;
        applied
            .spec
            .and_then(|s| s.cluster_ip)
            .and_then(|ip| ip.parse().ok())
            .ok_or_else(|| Error::Unsupported {
                what: format!("service {name}"),
                why: "the API server gave it no cluster IP".into(),
            })
    }

    /// The services by name, as every pod of the cell resolves them.
    fn host_aliases(&self) -> Vec<HostAlias> {
        self.topology
            .services
            .iter()
            .filter_map(|s| {
                let addr = self.services.get(&s.name)?;
                let namespace = self.platform.namespace_for(&s.namespace);
                let mut hostnames = vec![s.name.clone()];
                // By the cluster's namespace, and by the topology's where it differs.
                for ns in [namespace.as_str(), s.namespace.as_str()] {
                    for name in [
                        format!("{}.{ns}", s.name),
                        format!("{}.{ns}.svc", s.name),
                        format!("{}.{ns}.svc.cluster.local", s.name),
                    ] {
                        if !hostnames.contains(&name) {
                            hostnames.push(name);
                        }
                    }
                }
                Some(HostAlias {
                    ip: addr.ip().to_string(),
                    hostnames: Some(hostnames),
                })
            })
            .collect()
    }

    fn cluster_site(&self) -> ClusterSite<'_> {
        ClusterSite {
            topology: &self.topology,
            services: &self.services,
            ca_endpoint: self.ca_endpoint,
            policy: &self.policy,
        }
    }

    fn cluster_cell<'c>(
        &'c self,
        client: &'c TopologyPod,
        server: &'c TopologyPod,
        service: &'c str,
    ) -> ClusterCell<'c> {
        ClusterCell {
            site: self.cluster_site(),
            client,
            server,
            service,
        }
    }

    /// Creates `pod` running meshbench with `args` (its config map holding `files` and the
    /// mesh's files, its secret its credentials), as `role`.
    async fn create_pod(
        &mut self,
        pod: &TopologyPod,
        role: &str,
        (args, mut files): (Vec<String>, BTreeMap<String, String>),
        shape: PodShape,
        additions: &PodAdditions,
        credentials: Vec<String>,
    ) -> Result<CreatedPod, Error> {
        let namespace = self.platform.namespace_for(&pod.workload.namespace);
        let name = format!("{}-{}", pod.name, self.id);
        let run = self.platform.run_id();
        for c in additions.init.iter().chain(&additions.containers) {
            files.extend(c.files.clone());
        }
        let configs = Api::<ConfigMap>::namespaced(self.client(), &namespace);
        objects::apply(
            &configs,
            &objects::config_map(&name, &namespace, run, &self.id, files),
        )
        .await?;
        if !credentials.is_empty() {
            let pki = self.platform.pki()?;
            let mut data = BTreeMap::new();
            for file in &credentials {
                let path = pki.dir.join(file);
                let bytes = std::fs::read(&path).map_err(|e| Error::Unsupported {
                    what: format!("credentials {}", path.display()),
                    why: e.to_string(),
                })?;
                data.insert(file.clone(), bytes);
            }
            let secrets = Api::<Secret>::namespaced(self.client(), &namespace);
            objects::apply(
                &secrets,
                &objects::secret(&name, &namespace, run, &self.id, data),
            )
            .await?;
        }
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
            shape: &shape,
            host_aliases: self.host_aliases(),
            additions,
            secret: (!credentials.is_empty()).then(|| (name.as_str(), credentials.clone())),
        };
        let pods = Api::<Pod>::namespaced(self.client(), &namespace);
        objects::apply(&pods, &plan.render()).await?;
        let sampled = |container: &str, component: String, role: &str| Sampled {
            container: container.to_owned(),
            component,
            role: role.to_owned(),
        };
        let containers = std::iter::once(sampled(APP_CONTAINER, pod.name.clone(), role))
            .chain(
                additions
                    .containers
                    .iter()
                    .map(|c| sampled(c.name, format!("{}-{}", pod.name, c.role), c.role)),
            )
            .collect();
        let created = CreatedPod {
            topology: pod.clone(),
            role: role.to_owned(),
            namespace,
            name,
            node,
            containers,
            ip: None,
            host_ip: None,
        };
        self.pods.push(created.clone());
        Ok(created)
    }

    /// Waits, in parallel, until every pod of `pods` is ready, and records their addresses.
    async fn wait_ready(&mut self, pods: &[CreatedPod]) -> Result<(), Error> {
        self.wait_until(pods, Until::Ready).await
    }

    /// Waits, in parallel, until every pod of `pods` runs (has its address), and records
    /// their addresses.
    async fn wait_running(&mut self, pods: &[CreatedPod]) -> Result<(), Error> {
        self.wait_until(pods, Until::Running).await
    }

    async fn wait_until(&mut self, pods: &[CreatedPod], until: Until) -> Result<(), Error> {
        let ready = try_join_all(pods.iter().map(|p| {
            let api = Api::<Pod>::namespaced(self.client(), &p.namespace);
            async move { pods::wait(&api, &p.name, until, READY_TIMEOUT).await }
        }))
        .await?;
        for pod in ready {
            let status = pod.status.unwrap_or_default();
            let parse = |ip: Option<String>| ip.and_then(|ip| ip.parse().ok());
            if let Some(created) = self
                .pods
                .iter_mut()
                .find(|c| Some(&c.name) == pod.metadata.name.as_ref())
            {
                created.ip = parse(status.pod_ip);
                created.host_ip = parse(status.host_ip);
            }
        }
        Ok(())
    }

    /// meshbench's CA service, the control plane of our data plane, on the first node.
    async fn start_ca(&mut self) -> Result<(), Error> {
        let pki = self.platform.pki()?;
        let mut file = CaServerFile::new(
            PathBuf::from(POD_PKI_DIR),
            SocketAddr::from((Ipv4Addr::UNSPECIFIED, Ports::CA)),
        );
        if let Some(ttl) = pki.svid_ttl {
            file.ttl = ttl;
        }
        let node = self.topology.nodes[0].clone();
        let pod = TopologyPod {
            name: CA_WORKLOAD.into(),
            workload: Workload {
                name: CA_WORKLOAD.into(),
                namespace: meshbench_experiment::NAMESPACE.into(),
                service_account: "default".into(),
                node,
                replicas: 1,
                meshed: false,
            },
        };
        let config = (
            CaServerFile::command_line(&Path::new(CONFIG_DIR_IN_POD).join("ca.yaml")),
            BTreeMap::from([("ca.yaml".to_owned(), file.to_yaml())]),
        );
        let credentials = vec!["ca.pem".to_owned(), "ca.key".to_owned()];
        let created = self
            .create_pod(
                &pod,
                "control-plane",
                config,
                PodShape::serving(Ports::CA),
                &PodAdditions::default(),
                credentials,
            )
            .await?;
        self.wait_ready(&[created]).await
    }

    /// Creates the apps' pods with what `mesh` adds to them and waits until they are ready.
    async fn start_apps(
        &mut self,
        cluster: &dyn ClusterMesh,
        cell: &Deployed,
    ) -> Result<(), Error> {
        let mut planned = vec![];
        for (pod, app) in std::mem::take(&mut self.apps) {
            let additions = cluster.pod(
                &self.cluster_cell(&cell.client, &cell.server, &cell.service),
                &pod,
            )?;
            planned.push((pod, app, additions));
        }
        // A mesh's node agents start with the generator, whose address they must know.
        self.create_apps(planned).await
    }

    /// Starts the node agents `cluster` runs (if any) for the apps' pods, now that they
    /// have addresses; `enrolled` says which of them the mesh serves.
    async fn start_node_agents(
        &mut self,
        cluster: &dyn ClusterMesh,
        enrolled: &(dyn Fn(&TopologyPod) -> bool + Sync),
    ) -> Result<(), Error> {
        let mut placed = vec![];
        for created in &self.pods {
            if !matches!(created.role.as_str(), "app" | "load-generator") {
                continue;
            }
            if let (Some(ip), Some(host_ip)) = (created.ip, created.host_ip) {
                placed.push(PlacedPod {
                    pod: &created.topology,
                    ip,
                    host_ip,
                    enrolled: enrolled(&created.topology),
                });
            }
        }
        let agents = cluster.node_agents(&self.cluster_site(), &placed)?;
        let mut created = vec![];
        for agent in agents {
            let pod = TopologyPod {
                name: node_agent_pod(&agent.node),
                workload: Workload {
                    name: "meshbench-node-agent".into(),
                    namespace: meshbench_experiment::NAMESPACE.into(),
                    service_account: "default".into(),
                    node: agent.node.clone(),
                    replicas: 1,
                    meshed: false,
                },
            };
            let shape = PodShape {
                ready: Ready::Command(agent.ready_command.clone()),
                host_network: true,
                capabilities: agent.capabilities.clone(),
            };
            created.push(
                // The capture is part of the node's mesh machinery, as the agent is.
                self.create_pod(
                    &pod,
                    "node-agent",
                    (agent.args.clone(), agent.files.clone()),
                    shape,
                    &agent.additions,
                    agent.credentials.clone(),
                )
                .await?,
            );
        }
        self.wait_ready(&created).await
    }

    /// Creates each app's pod with its additions, then waits until all are ready.
    async fn create_apps(
        &mut self,
        planned: Vec<(TopologyPod, WorkloadFile, PodAdditions)>,
    ) -> Result<(), Error> {
        let mut created = vec![];
        for (pod, app, additions) in planned {
            let port = app.listen.port();
            let config = (
                WorkloadFile::command_line(&Path::new(CONFIG_DIR_IN_POD).join("app.yaml")),
                BTreeMap::from([("app.yaml".to_owned(), app.to_yaml())]),
            );
            let credentials = credentials_of(&pod, &additions);
            created.push(
                self.create_pod(
                    &pod,
                    "app",
                    config,
                    PodShape::serving(port),
                    &additions,
                    credentials,
                )
                .await?,
            );
        }
        self.wait_ready(&created).await
    }

    /// Enrolls every meshed workload of the topology in `mesh`, its apps' pods created with
    /// what the mesh adds to each.
    async fn enroll_topology(&mut self, mesh: Mesh) -> Result<(), Error> {
        let cluster = on_cluster(mesh)?;
        if !cluster.can_enroll() {
            return Err(Error::Unsupported {
                what: format!("enrolling a whole topology in {}", mesh.name()),
                why: "this mesh enrolls only a client and a server on a cluster".into(),
            });
        }
        let mut planned = vec![];
        for (pod, app) in std::mem::take(&mut self.apps) {
            let additions = cluster.enroll_pod(&self.cluster_site(), &pod)?;
            planned.push((pod, app, additions));
        }
        if cluster.needs_ca() {
            self.start_ca().await?;
        }
        self.create_apps(planned).await?;
        self.start_node_agents(cluster, &|pod| pod.workload.meshed)
            .await
    }

    /// Waits until every service of the site is routed on every node: from a prober pod on
    /// each node, outside any mesh, a connection to each service is no longer refused.
    /// kube-proxy programs a service's routes a moment after its pods are ready, and until
    /// then refuses connections to it; a verifier's probe made in between saw a refusal
    /// the policy had nothing to do with.
    pub async fn wait_for_routes(&mut self) -> Result<(), Error> {
        let mut addresses: Vec<String> = self.services.values().map(|a| a.to_string()).collect();
        if self.pods.iter().any(|p| p.topology.name == CA_WORKLOAD) {
            addresses.push(self.ca_endpoint.to_string());
        }
        let mut probers = vec![];
        for node in self.topology.nodes.clone() {
            let pod = TopologyPod {
                name: format!("meshbench-prober-{node}"),
                workload: Workload {
                    name: "meshbench-prober".into(),
                    namespace: meshbench_experiment::NAMESPACE.into(),
                    service_account: "default".into(),
                    node,
                    replicas: 1,
                    meshed: false,
                },
            };
            let app = WorkloadFile::new(
                SocketAddr::from((Ipv4Addr::UNSPECIFIED, Ports::APP)),
                meshbench_workload::WorkloadApp::Echo {
                    delay: "0s".into(),
                    response_size: "0".into(),
                    status: "200".into(),
                },
            );
            let config = (
                WorkloadFile::command_line(&Path::new(CONFIG_DIR_IN_POD).join("app.yaml")),
                BTreeMap::from([("app.yaml".to_owned(), app.to_yaml())]),
            );
            let created = self
                .create_pod(
                    &pod,
                    "prober",
                    config,
                    PodShape::serving(Ports::APP),
                    &PodAdditions::default(),
                    vec![],
                )
                .await?;
            probers.push(created);
        }
        self.wait_ready(&probers).await?;
        let reach: Vec<String> = ["meshbench", "wire", "reach", "--within", "60s"]
            .into_iter()
            .map(str::to_owned)
            .chain(addresses)
            .collect();
        try_join_all(
            probers
                .iter()
                .map(|prober| self.exec_in(prober, reach.clone(), ROUTES_TIMEOUT)),
        )
        .await?;
        Ok(())
    }

    /// Opens the start gate of every generator of `generators` (`wire mark` in each).
    async fn open_gates(&self, generators: &[CreatedPod]) -> Result<(), Error> {
        let mark = ["meshbench", "wire", "mark", START_GATE].map(str::to_owned);
        try_join_all(
            generators
                .iter()
                .map(|g| self.exec_in(g, mark.to_vec(), ROUTES_TIMEOUT)),
        )
        .await?;
        Ok(())
    }

    /// Runs `command` in `pod`'s app container to its successful end.
    async fn exec_in(
        &self,
        pod: &CreatedPod,
        command: Vec<String>,
        timeout: Duration,
    ) -> Result<crate::exec::ExecOutput, Error> {
        let api = Api::<Pod>::namespaced(self.client(), &pod.namespace);
        crate::exec::run_ok(&api, &pod.name, APP_CONTAINER, command, timeout).await
    }

    fn created(&self, pod: &str) -> Result<&CreatedPod, Error> {
        self.pods
            .iter()
            .find(|p| p.topology.name == pod)
            .ok_or_else(|| Error::Unsupported {
                what: format!("pod {pod}"),
                why: "the cell has not created it".into(),
            })
    }

    /// The address of the node topology pod `pod` runs on, once it is ready.
    pub fn host_ip(&self, pod: &str) -> Option<IpAddr> {
        self.created(pod).ok()?.host_ip
    }

    /// The address of the cluster's pod for topology pod `pod`, once it is ready.
    pub fn pod_ip(&self, pod: &str) -> Option<IpAddr> {
        self.created(pod).ok()?.ip
    }

    /// The cluster's node that topology pod `pod` runs on.
    pub fn node_of(&self, pod: &str) -> Option<&str> {
        Some(self.created(pod).ok()?.node.as_str())
    }

    /// Runs `command` in the app container of topology pod `pod`, to its end.
    pub async fn exec(
        &self,
        pod: &str,
        command: Vec<String>,
        timeout: Duration,
    ) -> Result<crate::exec::ExecOutput, Error> {
        let created = self.created(pod)?;
        let api = Api::<Pod>::namespaced(self.client(), &created.namespace);
        crate::exec::run(&api, &created.name, APP_CONTAINER, command, timeout).await
    }

    /// Runs `command` in the app container of topology pod `pod` to its successful end.
    pub async fn exec_ok(
        &self,
        pod: &str,
        command: Vec<String>,
        timeout: Duration,
    ) -> Result<crate::exec::ExecOutput, Error> {
        self.exec_in(self.created(pod)?, command, timeout).await
    }

    /// Starts `command` in the app container of topology pod `pod` and returns once it
    /// printed a stderr line containing `ready`.
    pub async fn start_exec(
        &self,
        pod: &str,
        command: Vec<String>,
        ready: &str,
        timeout: Duration,
    ) -> Result<crate::exec::RunningExec, Error> {
        let created = self.created(pod)?;
        let api = Api::<Pod>::namespaced(self.client(), &created.namespace);
        crate::exec::start(
            &api,
            &created.name,
            APP_CONTAINER,
            command,
            Some(ready),
            timeout,
        )
        .await
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
        // The service's routes reach the nodes a moment after its pods are ready (kube-proxy
        // programs them on its next sync): a generator started at once timed every request
        // out, and a cell measured nothing.
        spec.wait_for_target = Some(TARGET_WAIT);
        let budget =
            spec.duration.unwrap_or_default() + spec.warmup.unwrap_or_default() + GENERATOR_GRACE;
        let additions = match &self.deployed {
            Some(cell) => match cell.mesh.cluster() {
                Some(cluster) => cluster.pod(
                    &self.cluster_cell(&cell.client, &cell.server, &cell.service),
                    client,
                )?,
                None => PodAdditions::default(),
            },
            None => PodAdditions::default(),
        };
        // A node agent captures pods by address, which a generator has only once it runs:
        // the generators wait at their gate until their node's agent captures them.
        let agents_for = self.deployed.as_ref().and_then(|cell| {
            (cell.mesh.enrollment() == meshbench_meshes::Enrollment::AgentPerNode).then(|| {
                (
                    cell.mesh,
                    cell.client.workload.name.clone(),
                    cell.server.name.clone(),
                )
            })
        });
        if agents_for.is_some() {
            spec.start_gate = Some(START_GATE.into());
        }
        let split = split_load(&spec, self.platform.generators)?;
        let credentials = credentials_of(client, &additions);
        let mut generators = vec![];
        for (i, part) in split.iter().enumerate() {
            let config = (
                LoadSpec::command_line(&Path::new(CONFIG_DIR_IN_POD).join("load.yaml")),
                BTreeMap::from([("load.yaml".to_owned(), part.to_yaml())]),
            );
            // One generator keeps the client pod's name; several are numbered.
            let mut pod = client.clone();
            if split.len() > 1 {
                pod.name = format!("{}-g{}", client.name, i + 1);
            }
            let created = self
                .create_pod(
                    &pod,
                    "load-generator",
                    config,
                    PodShape::runs_to_end(),
                    &additions,
                    credentials.clone(),
                )
                .await?;
            generators.push(created);
        }
        if let Some((mesh, client_workload, server)) = agents_for {
            self.wait_running(&generators).await?;
            let cluster = on_cluster(mesh)?;
            self.start_node_agents(cluster, &|pod| {
                pod.workload.name == client_workload || pod.name == server
            })
            .await?;
            self.open_gates(&generators).await?;
        }
        let targets = self
            .pods
            .iter()
            .flat_map(|p| {
                p.containers.iter().map(|c| Target {
                    namespace: p.namespace.clone(),
                    pod: p.name.clone(),
                    container: c.container.clone(),
                    node: p.node.clone(),
                    component: c.component.clone(),
                    role: c.role.clone(),
                })
            })
            .collect();
        let interval = sample_interval.max(MIN_SAMPLE_INTERVAL);
        let sampler = SummarySampler::start(self.client(), targets, interval);
        let finished = try_join_all(generators.iter().map(|g| {
            let api = Api::<Pod>::namespaced(self.client(), &g.namespace);
            async move { pods::wait(&api, &g.name, Until::Succeeded, budget).await }
        }))
        .await;
        let series = sampler.finish().await;
        finished?;
        let mut reports = vec![];
        for (i, g) in generators.iter().enumerate() {
            let api = Api::<Pod>::namespaced(self.client(), &g.namespace);
            let log = pods::log(&api, &g.name, APP_CONTAINER).await?;
            let stem = match generators.len() {
                1 => "load-generator".to_owned(),
                _ => format!("load-generator-g{}", i + 1),
            };
            let _ = std::fs::write(self.cell_dir.join(format!("{stem}.log")), &log);
            let report = report_in_log(&log).ok_or_else(|| Error::Result {
                pod: g.name.clone(),
                problem: "no line of it is a meshbench load report".into(),
            })?;
            if generators.len() > 1 {
                let path = self.cell_dir.join(format!("load-g{}.json", i + 1));
                let _ = meshbench_results::write_json_atomic(&path, &report);
            }
            reports.push(report);
        }
        let load = meshbench_loadgen::merge_reports(&reports).map_err(|e| Error::Result {
            pod: generators[0].name.clone(),
            problem: e.to_string(),
        })?;
        let _ = meshbench_results::write_json_atomic(&self.cell_dir.join("load.json"), &load);
        let generator = &generators[0];
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

    fn namespaces(&self) -> Vec<String> {
        self.platform.namespaces()
    }
}

/// The topology name of the node agent pod on topology node `node` (meshes with node agents).
pub fn node_agent_pod(node: &str) -> String {
    format!("meshbench-node-agent-{node}")
}

/// `spec` split over `generators` pods: each sends its share of the rate over its share of
/// the connections (time-bound models only: the others end after a number of requests that
/// one instrument counts).
fn split_load(spec: &LoadSpec, generators: u32) -> Result<Vec<LoadSpec>, Error> {
    if generators <= 1 {
        return Ok(vec![spec.clone()]);
    }
    let unsupported = |why: String| Error::Unsupported {
        what: format!("--generators {generators}"),
        why,
    };
    if spec.connections < generators {
        return Err(unsupported(format!(
            "the load point has {} connection(s), fewer than the generators",
            spec.connections
        )));
    }
    let model = |share: u32| match &spec.model {
        LoadModel::OpenLoop { rps } => Ok(LoadModel::OpenLoop {
            rps: rps * f64::from(share) / f64::from(spec.connections),
        }),
        LoadModel::ClosedLoop => Ok(LoadModel::ClosedLoop),
        other => Err(unsupported(format!(
            "the {} model ends after a number of requests, which one generator counts",
            other.name()
        ))),
    };
    // Connections as evenly as they go; the rate follows the connections, so every
    // connection keeps the rate it has with one generator.
    (0..generators)
        .map(|i| {
            let share =
                spec.connections / generators + u32::from(i < spec.connections % generators);
            Ok(LoadSpec {
                model: model(share)?,
                connections: share,
                ..spec.clone()
            })
        })
        .collect()
}

/// The run's credentials `pod` is given under `pki/`: its own identity, when its mesh asks.
fn credentials_of(pod: &TopologyPod, additions: &PodAdditions) -> Vec<String> {
    if additions.identity {
        identity_files(pod)
    } else {
        vec![]
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
            .map_or(Ports::APP, |s| s.target_port);
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

    fn app_tls(&self, mesh: Mesh, cell: ClientServer<'_>) -> Option<ServerTlsFiles> {
        mesh.cluster()?
            .app_tls(&self.cluster_cell(cell.client, cell.server, cell.service))
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
            let cluster = on_cluster(mesh)?;
            if cluster.needs_ca() {
                self.start_ca().await?;
            }
            let deployed = Deployed {
                mesh,
                client: cell.client.clone(),
                server: cell.server.clone(),
                service: cell.service.to_owned(),
            };
            let entry =
                cluster.entry(&self.cluster_cell(cell.client, cell.server, cell.service))?;
            self.start_apps(cluster, &deployed).await?;
            self.deployed = Some(deployed);
            Ok(Entry {
                url: entry.url,
                client_tls: entry.client_tls,
            })
        })
    }

    fn enroll(&mut self, mesh: Mesh) -> BoxFuture<'_, Result<(), SiteError>> {
        Box::pin(async move { Ok(self.enroll_topology(mesh).await?) })
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
                    Ok(self.run_generator(client, *spec, sample_interval).await?)
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
            self.platform.run_id().to_owned(),
            self.id.clone(),
            self.namespaces(),
        );
        Box::pin(async move {
            if let Err(e) = delete_cell(client, run, cell, namespaces).await {
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
            self.platform.run_id().to_owned(),
            self.id.clone(),
            self.namespaces(),
        );
        off_runtime(
            move |client| delete_cell(client, run, cell, namespaces),
            self.platform.config().clone(),
        );
    }
}

/// `mesh` on a cluster, or why it cannot run there yet.
fn on_cluster(mesh: Mesh) -> Result<&'static dyn ClusterMesh, Error> {
    mesh.cluster().ok_or_else(|| Error::Unsupported {
        what: format!("mesh {}", mesh.name()),
        why: format!(
            "it has no Kubernetes flavour yet; on a cluster: {}",
            Mesh::all()
                .filter(|m| m.cluster().is_some())
                .map(|m| m.name())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    })
}

/// The load report the generator printed as one line of JSON, after anything it logged.
fn report_in_log(log: &str) -> Option<LoadReport> {
    log.lines()
        .rev()
        .filter(|l| l.starts_with('{'))
        .find_map(|l| serde_json::from_str::<LoadReport>(l).ok())
}
