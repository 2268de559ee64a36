//! One cell on a cluster: its services (and meshbench's CA service) applied when it is
//! realized, its pods created once the scenario's mesh is known (a pod's containers are
//! fixed when it is created, so `start_app` only records the app; many are applied at once),
//! each with what the mesh adds (`ClusterMesh`: capture, proxies, credentials), the
//! instrument's pods last ([`instrument`]), meshbench's own pods on a node the placement does
//! not use where the cluster has one, the verifier's helpers (probers, a pod outside the mesh
//! to exec in), and everything of the cell deleted when it finishes or is dropped.

mod instrument;
mod wire;

pub use wire::{node_link_capture, CAPTURE_WAIT, POD_INTERFACE};

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::future::try_join_all;
use futures::stream::{FuturesUnordered, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, HostAlias, Pod, Secret, Service};
use kube::{Api, Client};
use meshbench_experiment::platform::{
    ClientServer, Entry, Instrument, Measured, Site, SiteError, WireRecording,
};
use meshbench_identity::{CaServerFile, ServerTlsFiles};
use meshbench_meshes::{
    identity_files, BoxFuture, ClusterCell, ClusterMesh, ClusterSite, FoundPod, IdentityService,
    InstalledMesh, InstalledSite, MeshEnrollment, PlacedPod, PodAdditions, Ports, Scenario,
    CONFIG_DIR_IN_POD, POD_PKI_DIR,
};
use meshbench_role::RoleConfig;
use meshbench_topology::{Pod as TopologyPod, Topology, Workload};
use meshbench_workload::WorkloadFile;

use crate::clean::{delete_cell, off_runtime};
use crate::cluster::KubePlatform;
use crate::objects::{self, PodPlan, PodShape, Ready, APP_CONTAINER};
use crate::pods::{self, Until};
use crate::Error;

/// How long a pod may take to become ready: an image already on the node starts in seconds.
const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// The file a generator waits for when the path it measures needs its address first.
pub(super) const START_GATE: &str = "/tmp/meshbench-start";
/// How long a service's routes may take to reach every node.
const ROUTES_TIMEOUT: Duration = Duration::from_secs(90);
/// How long a Gateway the mesh deploys a proxy for (a waypoint) may take to be programmed.
const GATEWAY_PROGRAMMED_TIMEOUT: Duration = Duration::from_secs(180);
/// meshbench's CA service: the control plane of our own data plane.
const CA_WORKLOAD: &str = "meshbench-ca";
/// Pods applied at once (each is a config map, a secret and the pod: three API calls).
const APPLY_CONCURRENCY: usize = 8;
/// Cells of at least this many pods report their progress, every this many pods.
const PROGRESS_FROM: usize = 10;
const PROGRESS_EVERY: usize = 5;

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

/// The mesh of the cell, once its apps are enrolled, and how.
struct Enrolled {
    mesh: Scenario,
    /// Set when the mesh deployed around a client and a server (`Site::deploy`); otherwise
    /// every workload of the topology marked `meshed` is enrolled (`Site::enroll`).
    pair: Option<Pair>,
    /// The node agents wait for the instrument's pods: they capture pods by address, and
    /// an enrolled workload has no pod until the instrument runs in it.
    agents_pending: bool,
}

/// The client and server a mesh deployed around.
struct Pair {
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
    /// A node the placement does not use, if the cluster has one: meshbench's own pods (its
    /// CA service, and the load generator where it is not one end of the placement) go there,
    /// away from the pods measured, as E1 kept its monitoring off the workload nodes.
    spare: Option<String>,
    /// Each service's address as pods dial it.
    services: BTreeMap<String, SocketAddr>,
    ca_endpoint: SocketAddr,
    /// The experiment's policy, for meshes that translate it.
    policy: meshbench_policy::Policy,
    /// How long the SVIDs meshbench's CA service signs live (`None`: the CA's default); a
    /// pod's first SVID is then issued as it is created (see [`crate::credentials`]).
    svid_ttl: Option<Duration>,
    /// Apps to start once the mesh is known.
    apps: Vec<(TopologyPod, WorkloadFile)>,
    enrolled: Option<Enrolled>,
    /// The mesh the cluster runs, when the cell's scenario is one.
    installed: Option<InstalledRun>,
    pods: Vec<CreatedPod>,
    finished: bool,
}

/// A mesh the cluster runs, as a cell uses it: what enrolls each workload's pods, and the
/// resources applied for the cell's policy (deleted with the cell).
struct InstalledRun {
    mesh: &'static dyn InstalledMesh,
    enrollment: MeshEnrollment,
    resources: Vec<serde_json::Value>,
    /// The mesh's own pods the cell samples: its control plane, and its node agents on the
    /// cell's nodes (E1's breakdown).
    targets: Vec<crate::stats::Target>,
}

impl<'a> KubeSite<'a> {
    /// The cell's site, its services applied.
    /// `spare` is a schedulable node the topology's nodes were not mapped to, if the cluster
    /// has one.
    pub(crate) async fn realize(
        platform: &'a KubePlatform,
        topology: &Topology,
        cell_dir: &Path,
        nodes: BTreeMap<String, String>,
        spare: Option<String>,
    ) -> Result<KubeSite<'a>, Error> {
        let policy = meshbench_policy::Policy::load(&platform.pki()?.policy)
            .map_err(meshbench_meshes::Error::from)?;
        let mut site = KubeSite {
            platform,
            policy,
            svid_ttl: None,
            id: meshbench_netlab::new_lab_id(),
            topology: topology.clone(),
            cell_dir: cell_dir.to_owned(),
            nodes,
            spare,
            services: BTreeMap::new(),
            ca_endpoint: SocketAddr::from((Ipv4Addr::UNSPECIFIED, Ports::CA)),
            apps: vec![],
            enrolled: None,
            installed: None,
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

    /// The client for readings that must not wait on retries (see `KubePlatform::reader`).
    fn reader(&self) -> Client {
        self.platform.reader.clone()
    }

    /// Makes the SVIDs of the pods created from now on live `ttl` once renewed, so that the
    /// mesh's proxies rotate them while traffic flows (the first SVID of each lives
    /// [`crate::credentials::BOOTSTRAP_SVID_TTL`], the time its pod has to start).
    pub fn rotate_svids(&mut self, ttl: Duration) {
        self.svid_ttl = Some(ttl);
    }

    /// The spare node as a node of the cell's topology (mapped to itself), once asked for:
    /// node agents then serve it too.
    fn spare_node(&mut self) -> Option<String> {
        let spare = self.spare.clone()?;
        if !self.topology.nodes.contains(&spare) {
            self.topology.nodes.push(spare.clone());
            self.nodes.insert(spare.clone(), spare.clone());
        }
        Some(spare)
    }

    /// The contents of `names` from the run's identity directory, for a pod's Secret.
    fn credentials(&self, names: &[String]) -> Result<BTreeMap<String, Vec<u8>>, Error> {
        crate::credentials::secret_data(self.platform.pki()?, &self.topology, self.svid_ttl, names)
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
    /// mesh's files, its secret `credentials`, by file name), as `role`.
    async fn create_pod(
        &mut self,
        pod: &TopologyPod,
        role: &str,
        config: (Vec<String>, BTreeMap<String, String>),
        shape: PodShape,
        additions: &PodAdditions,
        credentials: BTreeMap<String, Vec<u8>>,
    ) -> Result<CreatedPod, Error> {
        let created = self
            .apply_pod(pod, role, config, shape, additions, credentials)
            .await?;
        self.pods.push(created.clone());
        Ok(created)
    }

    /// Applies what [`KubeSite::create_pod`] creates, without recording it: several at once.
    /// (A pod applied but not recorded is still deleted with the cell, by its labels.)
    async fn apply_pod(
        &self,
        pod: &TopologyPod,
        role: &str,
        (args, mut files): (Vec<String>, BTreeMap<String, String>),
        shape: PodShape,
        additions: &PodAdditions,
        credentials: BTreeMap<String, Vec<u8>>,
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
        let secret_keys: Vec<String> = credentials.keys().cloned().collect();
        if !credentials.is_empty() {
            let secrets = Api::<Secret>::namespaced(self.client(), &namespace);
            objects::apply(
                &secrets,
                &objects::secret(&name, &namespace, run, &self.id, credentials),
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
            secret: (!secret_keys.is_empty()).then_some((name.as_str(), secret_keys)),
        };
        let pods = Api::<Pod>::namespaced(self.client(), &namespace);
        let admitted = objects::apply(&pods, &plan.render()).await?;
        let sampled = |container: &str, component: String, role: &str| Sampled {
            container: container.to_owned(),
            component,
            role: role.to_owned(),
        };
        let mut containers: Vec<Sampled> =
            std::iter::once(sampled(APP_CONTAINER, pod.name.clone(), role))
                .chain(
                    additions
                        .containers
                        .iter()
                        .map(|c| sampled(c.name, format!("{}-{}", pod.name, c.role), c.role)),
                )
                .collect();
        // What a mesh the cluster runs injected (its admission answered with the pod).
        if let Some(installed) = &self.installed {
            let found = FoundPod {
                namespace: namespace.clone(),
                name: name.clone(),
                labels: admitted.metadata.labels.clone().unwrap_or_default(),
                images: BTreeMap::new(),
                env: BTreeMap::new(),
                ready: false,
                node: node.clone(),
            };
            for c in admitted.spec.iter().flat_map(crate::pods::long_running) {
                if containers.iter().any(|known| known.container == c.name) {
                    continue;
                }
                let class = installed
                    .mesh
                    .component(&found, &c.name)
                    .map_or("injected", |k| k.role());
                containers.push(sampled(&c.name, format!("{}-{class}", pod.name), class));
            }
        }
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
        let mut waits: FuturesUnordered<_> = pods
            .iter()
            .map(|p| {
                let api = Api::<Pod>::namespaced(self.client(), &p.namespace);
                async move { pods::wait(&api, &p.name, until, READY_TIMEOUT).await }
            })
            .collect();
        let mut ready = Vec::with_capacity(pods.len());
        while let Some(pod) = waits.next().await {
            ready.push(pod?);
            self.progress(ready.len(), pods.len(), until.describe());
        }
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

    /// meshbench's CA service, the control plane of our data plane: on the spare node where
    /// there is one, else on the first node.
    async fn start_ca(&mut self) -> Result<(), Error> {
        let mut file = CaServerFile::new(
            PathBuf::from(POD_PKI_DIR),
            SocketAddr::from((Ipv4Addr::UNSPECIFIED, Ports::CA)),
        );
        if let Some(ttl) = self.svid_ttl {
            file.ttl = ttl;
        }
        let node = self
            .spare_node()
            .unwrap_or_else(|| self.topology.nodes[0].clone());
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
        let credentials = self.credentials(&["ca.pem".to_owned(), "ca.key".to_owned()])?;
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
    async fn start_apps(&mut self, cluster: &dyn ClusterMesh, cell: &Pair) -> Result<(), Error> {
        let mut planned = vec![];
        for (pod, app) in std::mem::take(&mut self.apps) {
            let additions = match &self.installed {
                Some(installed) => installed.enrollment.additions(&pod.workload.name),
                None => cluster.pod(
                    &self.cluster_cell(&cell.client, &cell.server, &cell.service),
                    &pod,
                )?,
            };
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
            if !matches!(
                created.role.as_str(),
                "app" | "load-generator" | "experimenter"
            ) {
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
                    self.credentials(&agent.credentials)?,
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
        let total = planned.len();
        let mut applies = vec![];
        for (pod, app, additions) in planned {
            let port = app.listen.port();
            let config = (
                WorkloadFile::command_line(&Path::new(CONFIG_DIR_IN_POD).join("app.yaml")),
                BTreeMap::from([("app.yaml".to_owned(), app.to_yaml())]),
            );
            let credentials = self.credentials(&credentials_of(&pod, &additions))?;
            applies.push((pod, config, additions, credentials, PodShape::serving(port)));
        }
        let mut created = Vec::with_capacity(total);
        {
            let this = &*self;
            let mut applying = futures::stream::iter(applies.iter().map(
                |(pod, config, additions, credentials, shape)| {
                    this.apply_pod(
                        pod,
                        "app",
                        config.clone(),
                        shape.clone(),
                        additions,
                        credentials.clone(),
                    )
                },
            ))
            .buffer_unordered(APPLY_CONCURRENCY);
            while let Some(pod) = applying.next().await {
                created.push(pod?);
                this.progress(created.len(), total, "applied");
            }
        }
        self.pods.extend(created.iter().cloned());
        self.wait_ready(&created).await
    }

    /// Tells the user how far the cell's pods have come, for cells of many pods (E4's
    /// replicated deployments); a cell of a few says nothing.
    fn progress(&self, done: usize, total: usize, what: &str) {
        if total >= PROGRESS_FROM && (done.is_multiple_of(PROGRESS_EVERY) || done == total) {
            if let Some(report) = &self.platform.progress {
                report(&format!("cell {}: {done} of {total} pods {what}", self.id));
            }
        }
    }

    /// Applies what a mesh the cluster runs needs for the cell (the policy as its resources,
    /// labelled as the cell's) and keeps what enrolls each workload's pods.
    async fn install_mesh(
        &mut self,
        mesh: Scenario,
        installed: &'static dyn InstalledMesh,
    ) -> Result<(), Error> {
        let installation =
            self.platform
                .installation(mesh)
                .cloned()
                .ok_or_else(|| Error::Unsupported {
                    what: format!("mesh {}", mesh.name()),
                    why: "the cluster was not asked whether it runs it".into(),
                })?;
        let namespaces: BTreeMap<String, String> = self
            .topology
            .workloads
            .iter()
            .map(|w| {
                (
                    w.namespace.clone(),
                    self.platform.namespace_for(&w.namespace),
                )
            })
            .collect();
        let translation = installed.translate(&InstalledSite {
            topology: &self.topology,
            policy: &self.policy,
            namespaces: &namespaces,
            installation: &installation,
        })?;
        let found = crate::installed::detect(&self.client(), &installed.signature()).await?;
        let cell_nodes: Vec<String> = self.nodes.values().cloned().collect();
        let targets = mesh_targets(installed, &found, &cell_nodes);
        // Recorded before they are applied: whatever was applied goes with the cell.
        self.installed = Some(InstalledRun {
            mesh: installed,
            enrollment: translation.enrollment,
            resources: translation.resources.clone(),
            targets,
        });
        let applied = crate::installed::apply_resources(
            &self.client(),
            &translation.resources,
            self.platform.run_id(),
            Some(&self.id),
            false,
        )
        .await?;
        let refused: Vec<String> = applied
            .iter()
            .filter_map(|a| {
                a.outcome
                    .as_ref()
                    .err()
                    .map(|e| format!("{}: {e}", a.resource))
            })
            .collect();
        if !refused.is_empty() {
            return Err(Error::Refused {
                what: format!("{}'s resources for the cell", mesh.name()),
                why: refused.join("; "),
            });
        }
        // The mesh's labels on the cell's services (ambient's `istio.io/use-waypoint`, which
        // sends a service's traffic through its waypoint).
        let service_labels = self
            .installed
            .as_ref()
            .map(|i| i.enrollment.service_labels.clone())
            .unwrap_or_default();
        for (name, labels) in &service_labels {
            for service in self.topology.services.iter().filter(|s| &s.name == name) {
                let namespace = self.platform.namespace_for(&service.namespace);
                let api = Api::<Service>::namespaced(self.client(), &namespace);
                let patch = serde_json::json!({ "metadata": { "labels": labels } });
                api.patch(
                    &service.name,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(&patch),
                )
                .await
                .map_err(|source| Error::Api {
                    what: format!("Service {namespace}/{} (the mesh's labels)", service.name),
                    source,
                })?;
            }
        }
        // A Gateway is a proxy the mesh deploys (ambient's waypoint): the cell's traffic
        // goes through it only once it runs.
        for gateway in translation
            .resources
            .iter()
            .filter(|r| r["kind"] == "Gateway")
        {
            crate::installed::wait_for_condition(
                &self.client(),
                gateway,
                "Programmed",
                GATEWAY_PROGRAMMED_TIMEOUT,
            )
            .await?;
        }
        for note in &translation.enforced.notes {
            tracing::info!(mesh = mesh.name(), "{note}");
        }
        Ok(())
    }

    /// Whether the mesh enforces `workload`'s rules at a waypoint in front of it.
    pub fn waypointed(&self, workload: &str) -> bool {
        self.installed
            .as_ref()
            .is_some_and(|i| i.enrollment.waypointed.contains(workload))
    }

    /// Enrolls every meshed workload of the topology in `mesh`, its apps' pods created with
    /// what the mesh adds to each.
    async fn enroll_topology(&mut self, mesh: Scenario) -> Result<(), Error> {
        let cluster = on_cluster(mesh)?;
        if let Some(installed) = cluster.installed() {
            self.install_mesh(mesh, installed).await?;
        } else if !cluster.can_enroll() {
            return Err(Error::Unsupported {
                what: format!("enrolling a whole topology in {}", mesh.name()),
                why: "this mesh enrolls only a client and a server on a cluster".into(),
            });
        }
        let mut planned = vec![];
        for (pod, app) in std::mem::take(&mut self.apps) {
            let additions = match &self.installed {
                Some(installed) => installed.enrollment.additions(&pod.workload.name),
                None => cluster.enroll_pod(&self.cluster_site(), &pod)?,
            };
            planned.push((pod, app, additions));
        }
        if cluster.needs_ca() {
            self.start_ca().await?;
        }
        self.create_apps(planned).await?;
        let agents_pending = self
            .topology
            .workloads
            .iter()
            .any(|w| w.meshed && !self.pods.iter().any(|p| p.topology.workload.name == w.name));
        if !agents_pending {
            self.start_node_agents(cluster, &|pod| pod.workload.meshed)
                .await?;
        }
        self.enrolled = Some(Enrolled {
            mesh,
            pair: None,
            agents_pending,
        });
        Ok(())
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
            let created = self
                .create_pod(
                    &pod,
                    "prober",
                    idle_app(),
                    PodShape::serving(Ports::APP),
                    &PodAdditions::default(),
                    BTreeMap::new(),
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

    /// Starts a pod named `name`, outside any mesh, on the topology's node `node`, with
    /// `files` in its Secret (under `CONFIG_DIR_IN_POD/POD_PKI_DIR`), and waits until it is ready: where the
    /// verifier makes connections of its own (its identity checks), as `exec` in it.
    pub async fn start_bystander(
        &mut self,
        name: &str,
        node: &str,
        files: BTreeMap<String, Vec<u8>>,
    ) -> Result<(), Error> {
        let pod = TopologyPod {
            name: name.to_owned(),
            workload: Workload {
                name: name.to_owned(),
                namespace: meshbench_experiment::NAMESPACE.into(),
                service_account: "default".into(),
                node: node.to_owned(),
                replicas: 1,
                meshed: false,
            },
        };
        let created = self
            .create_pod(
                &pod,
                "verifier",
                idle_app(),
                PodShape::serving(Ports::APP),
                &PodAdditions::default(),
                files,
            )
            .await?;
        self.wait_ready(&[created]).await
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
        let what = command.join(" ");
        crate::exec::run(&api, &pod.name, APP_CONTAINER, command, timeout)
            .await?
            .succeeded(&pod.name, &what)
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

    /// The cell's topology.
    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// The address of the node topology pod `pod` runs on, once it is ready.
    pub fn host_ip(&self, pod: &str) -> Option<IpAddr> {
        self.created(pod).ok()?.host_ip
    }

    /// The addresses of the cell's pods but topology pod `pod`'s (those ready).
    pub fn pod_ips_but(&self, pod: &str) -> Vec<IpAddr> {
        self.pods
            .iter()
            .filter(|p| p.topology.name != pod)
            .filter_map(|p| p.ip)
            .collect()
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

    fn namespaces(&self) -> Vec<String> {
        self.platform.namespaces()
    }

    /// The CA of the mesh the cluster runs, as its proxies use it, and the trust root
    /// `topology_namespace`'s workloads are given; `None` when the cell's scenario is not a
    /// mesh the cluster runs, or the mesh names no CA the verifier can ask.
    pub async fn installed_mesh_ca(
        &self,
        topology_namespace: &str,
    ) -> Result<Option<(IdentityService, String)>, Error> {
        let Some(installed) = &self.installed else {
            return Ok(None);
        };
        let Some(service) = self.platform.identity_service(installed.mesh).await? else {
            return Ok(None);
        };
        let namespace = match &service.root_namespace {
            Some(namespace) => namespace.clone(),
            None => self.platform.namespace_for(topology_namespace),
        };
        let (name, key) = &service.root_config_map;
        let map = Api::<ConfigMap>::namespaced(self.client(), &namespace)
            .get(name)
            .await
            .map_err(|source| Error::Api {
                what: format!("ConfigMap {namespace}/{name} (the mesh's trust root)"),
                source,
            })?;
        let root = map
            .data
            .and_then(|mut d| d.remove(key))
            .ok_or_else(|| Error::Unsupported {
                what: format!("ConfigMap {namespace}/{name}"),
                why: format!("it has no {key}"),
            })?;
        Ok(Some((service, root)))
    }

    /// A token of `topology_namespace`'s service account `account` for `audience`, living
    /// ten minutes: what the verifier presents to a mesh's CA as that workload.
    pub async fn service_account_token(
        &self,
        topology_namespace: &str,
        account: &str,
        audience: &str,
    ) -> Result<String, Error> {
        use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
        let namespace = self.platform.namespace_for(topology_namespace);
        let request = TokenRequest {
            spec: Some(TokenRequestSpec {
                audiences: Some(vec![audience.to_owned()]),
                expiration_seconds: Some(600),
                ..TokenRequestSpec::default()
            }),
            ..TokenRequest::default()
        };
        let answer = Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(
            self.client(),
            &namespace,
        )
        .create_token_request(account, &kube::api::PostParams::default(), &request)
        .await
        .map_err(|source| Error::Api {
            what: format!("a token of service account {namespace}/{account}"),
            source,
        })?;
        answer
            .status
            .and_then(|s| s.token)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| Error::Unsupported {
                what: format!("a token of service account {namespace}/{account}"),
                why: "the API server answered without one".into(),
            })
    }

    /// The resources applied for a mesh the cluster runs, if the cell's scenario is one.
    fn mesh_resources(&self) -> Vec<serde_json::Value> {
        self.installed
            .as_ref()
            .map(|i| i.resources.clone())
            .unwrap_or_default()
    }
}

/// The topology name of the node agent pod on topology node `node` (meshes with node agents).
pub fn node_agent_pod(node: &str) -> String {
    format!("meshbench-node-agent-{node}")
}

/// An echo app on the app port: what a pod that exists to have commands exec'd in runs.
fn idle_app() -> (Vec<String>, BTreeMap<String, String>) {
    let app = WorkloadFile::new(
        SocketAddr::from((Ipv4Addr::UNSPECIFIED, Ports::APP)),
        meshbench_workload::WorkloadApp::Echo {
            delay: "0s".into(),
            response_size: "0".into(),
            status: "200".into(),
        },
    );
    (
        WorkloadFile::command_line(&Path::new(CONFIG_DIR_IN_POD).join("app.yaml")),
        BTreeMap::from([("app.yaml".to_owned(), app.to_yaml())]),
    )
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

    fn app_tls(&self, mesh: Scenario, cell: ClientServer<'_>) -> Option<ServerTlsFiles> {
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
        mesh: Scenario,
        cell: ClientServer<'b>,
    ) -> BoxFuture<'b, Result<Entry, SiteError>> {
        Box::pin(async move {
            let cluster = on_cluster(mesh)?;
            if cluster.needs_ca() {
                self.start_ca().await?;
            }
            if let Some(installed) = cluster.installed() {
                self.install_mesh(mesh, installed).await?;
            }
            let pair = Pair {
                client: cell.client.clone(),
                server: cell.server.clone(),
                service: cell.service.to_owned(),
            };
            let entry =
                cluster.entry(&self.cluster_cell(cell.client, cell.server, cell.service))?;
            self.start_apps(cluster, &pair).await?;
            self.enrolled = Some(Enrolled {
                mesh,
                pair: Some(pair),
                agents_pending: mesh.enrollment() == meshbench_meshes::Enrollment::AgentPerNode,
            });
            Ok(Entry {
                url: entry.url,
                client_tls: entry.client_tls,
            })
        })
    }

    fn enroll(&mut self, mesh: Scenario) -> BoxFuture<'_, Result<(), SiteError>> {
        Box::pin(async move { Ok(self.enroll_topology(mesh).await?) })
    }

    fn measure<'b>(
        &'b mut self,
        client: &'b TopologyPod,
        instrument: Instrument,
        sample_interval: Duration,
        wire: Option<WireRecording<'b>>,
    ) -> BoxFuture<'b, Result<Measured, SiteError>> {
        Box::pin(async move {
            match instrument {
                Instrument::Load(spec) => Ok(self
                    .run_generator(client, *spec, sample_interval, wire)
                    .await?),
                Instrument::Experimenter(file) => Ok(self
                    .run_experimenter(client, *file, sample_interval, wire)
                    .await?),
            }
        })
    }

    fn finish(mut self: Box<Self>) -> BoxFuture<'a, ()> {
        self.finished = true;
        let (client, run, cell, namespaces, resources) = (
            self.client(),
            self.platform.run_id().to_owned(),
            self.id.clone(),
            self.namespaces(),
            self.mesh_resources(),
        );
        Box::pin(async move {
            if let Err(e) = delete_everything(client, run, cell, namespaces, resources).await {
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
        let (run, cell, namespaces, resources) = (
            self.platform.run_id().to_owned(),
            self.id.clone(),
            self.namespaces(),
            self.mesh_resources(),
        );
        off_runtime(
            move |client| delete_everything(client, run, cell, namespaces, resources),
            self.platform.config().clone(),
        );
    }
}

/// The containers of a mesh's own pods a cell samples, each under the class the mesh gives
/// it: its control plane wherever it runs, its node agents on the cell's nodes.
fn mesh_targets(
    installed: &dyn InstalledMesh,
    found: &meshbench_meshes::Found,
    cell_nodes: &[String],
) -> Vec<crate::stats::Target> {
    found
        .control_plane
        .iter()
        .chain(
            found
                .node_agents
                .iter()
                .filter(|p| cell_nodes.contains(&p.node)),
        )
        .flat_map(|p| {
            p.images.keys().filter_map(move |container| {
                let class = installed.component(p, container)?;
                Some(crate::stats::Target {
                    namespace: p.namespace.clone(),
                    pod: p.name.clone(),
                    container: container.clone(),
                    node: p.node.clone(),
                    component: format!("{}-{container}", p.name),
                    role: class.role().to_owned(),
                })
            })
        })
        .collect()
}

/// The cell's objects, and the resources applied for a mesh the cluster runs.
async fn delete_everything(
    client: Client,
    run: String,
    cell: String,
    namespaces: Vec<String>,
    resources: Vec<serde_json::Value>,
) -> Result<(), Error> {
    let mesh = crate::installed::delete_resources(&client, &resources).await;
    delete_cell(client, run, cell, namespaces).await?;
    mesh
}

/// `mesh` on a cluster, or why it cannot run there yet.
fn on_cluster(mesh: Scenario) -> Result<&'static dyn ClusterMesh, Error> {
    mesh.cluster().ok_or_else(|| Error::Unsupported {
        what: format!("mesh {}", mesh.name()),
        why: format!(
            "it has no Kubernetes flavour yet; on a cluster: {}",
            Scenario::all()
                .filter(|m| m.cluster().is_some())
                .map(|m| m.name())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, labels: &[(&str, &str)], container: &str, node: &str) -> FoundPod {
        FoundPod {
            namespace: "istio-system".into(),
            name: name.into(),
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            images: [(container.to_owned(), "istio/x:1".to_owned())].into(),
            env: BTreeMap::new(),
            ready: true,
            node: node.into(),
        }
    }

    #[test]
    fn the_control_plane_and_the_cells_node_agents_are_sampled_under_their_class() {
        let ambient = Scenario::parse("istio-ambient")
            .and_then(|m| m.cluster())
            .and_then(|c| c.installed())
            .unwrap();
        let found = meshbench_meshes::Found {
            control_plane: vec![pod("istiod-1", &[("app", "istiod")], "discovery", "node-3")],
            node_agents: vec![
                pod("ztunnel-a", &[("app", "ztunnel")], "istio-proxy", "node-1"),
                pod("ztunnel-b", &[("app", "ztunnel")], "istio-proxy", "node-2"),
            ],
            ..Default::default()
        };
        let targets = mesh_targets(ambient, &found, &["node-1".to_owned()]);
        let got: Vec<(&str, &str, &str)> = targets
            .iter()
            .map(|t| (t.pod.as_str(), t.role.as_str(), t.node.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("istiod-1", "control-plane", "node-3"),
                ("ztunnel-a", "node-agent", "node-1"),
            ]
        );
    }
}
