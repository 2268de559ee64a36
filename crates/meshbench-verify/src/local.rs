//! Verification on the local lab (root, netns backend): each case a fresh netns lab with its
//! own proxy area and PKI. A probe is made from inside the calling pod (the verifier joins the
//! pod's network namespace and asks the pod's own app), and recorded with tcpdump where its
//! path runs: the calling node's uplink between nodes, the destination pod's interface
//! within a node, or the node's loopback where a node agent tunnels to itself. The identity
//! checks are made from the first node, where no mesh captures the verifier's own traffic.

use std::path::{Path, PathBuf};
use std::time::Duration;

use meshbench_lab::{BuildInfo, LabComponent, Readiness};
use meshbench_meshes::{enroll, LabContext, MeshPki, ProxyArea, Scenario};
use meshbench_netlab::{new_lab_id, Backend, LabNetwork, NetPlace, WireCapture};
use meshbench_results::{IdentityCheck, VerifyReport};
use meshbench_role::RoleConfig;
use meshbench_topology::{Pod, Topology};
use meshbench_workload::WorkloadFile;

use crate::e3::{self, Probe, SecurityCase};
use crate::flow::{verify_with, CapturePlace, CaseSite, ProbeRecord, Verifier};
use crate::identity::{Guard, IdentityPlan, NodeAccess, ROTATION_TTL};
use crate::probe::run_probe;
use crate::Error;

pub struct VerifyOptions {
    pub meshes: Vec<Scenario>,
    /// Where `verify.json`, the captures and the labs' files go.
    pub out_dir: PathBuf,
    /// The meshbench binary (apps and proxies are roles of it).
    pub exe: PathBuf,
    pub build: BuildInfo,
    /// The policy over E3's application, as YAML (E3's own, `zero_trust_policy`, unless a
    /// user gives another).
    pub policy: String,
}

/// Runs every case for every mesh on the local lab. `progress` gets one line per case.
pub async fn verify(
    options: &VerifyOptions,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<VerifyReport, Error> {
    meshbench_netlab::NetnsLab::check_permitted()?;
    let lab = NetnsVerifier { exe: &options.exe };
    verify_with(
        &lab,
        &options.meshes,
        &options.policy,
        &options.out_dir,
        &options.build,
        progress,
    )
    .await
}

/// The netns lab as a place to verify (not `meshbench_local::LocalLab`, the platform that
/// runs measure on).
struct NetnsVerifier<'e> {
    exe: &'e Path,
}

impl Verifier for NetnsVerifier<'_> {
    type Case<'a>
        = LocalCase<'a>
    where
        Self: 'a;

    fn name(&self) -> String {
        "local lab (netns)".into()
    }

    fn admit(&self, mesh: Scenario) -> Result<(), Error> {
        mesh.binary().map_err(meshbench_meshes::Error::from)?;
        Ok(mesh.check_enrollable()?)
    }

    fn notes(&self, _mesh: Scenario) -> Vec<String> {
        vec![]
    }

    async fn open<'a>(
        &'a self,
        mesh: Scenario,
        case: &SecurityCase,
        topology: &Topology,
        dir: &Path,
    ) -> Result<LocalCase<'a>, Error> {
        let net = LabNetwork::create_off_runtime(Backend::Netns, &new_lab_id(), topology).await?;
        // Where identities are checked, SVIDs live seconds, so they rotate during the case
        // (unless the mesh's own CA signs them: it is rotated instead).
        let svid_ttl =
            (case.checks_identities(mesh) && !mesh.renews_by_ca_rotation()).then_some(ROTATION_TTL);
        // The case's proxy files, where the proxy user can reach them (removed with it).
        let area = ProxyArea::create(dir)?;
        let cell_area = area.private_dir("case")?;
        let pki = MeshPki::create_with_ttl(&area, topology, &e3::zero_trust_policy(), svid_ttl)?;
        Ok(LocalCase {
            exe: self.exe,
            dir: dir.to_owned(),
            net,
            area,
            cell_area,
            pki,
            components: vec![],
        })
    }
}

struct LocalCase<'e> {
    exe: &'e Path,
    dir: PathBuf,
    net: LabNetwork,
    area: ProxyArea,
    cell_area: PathBuf,
    pki: MeshPki,
    /// Every process the case started, stopped when it finishes (killed if dropped).
    components: Vec<LabComponent>,
}

impl LocalCase<'_> {
    fn lab(&self) -> LabContext<'_> {
        LabContext {
            net: &self.net,
            pki: &self.pki,
            exe: self.exe,
            work_dir: &self.dir,
            area: &self.area,
            cell_area: &self.cell_area,
            cgroups: None,
            sut_cpus: None,
            wire: None,
        }
    }

    async fn start_app(&self, pod: &Pod) -> Result<LabComponent, Error> {
        let lab = self.lab();
        let file = e3::app_file(&pod.workload.name);
        let config = lab.write(&format!("{}-app.yaml", pod.name), &file.to_yaml())?;
        let launch = lab.app_launch(pod, None)?;
        Ok(LabComponent::start(
            &pod.name,
            "app",
            &launch,
            self.exe,
            &WorkloadFile::command_line(&config),
            Readiness::ReadyLine,
            Duration::from_secs(20),
        )
        .await?)
    }
}

impl CaseSite for LocalCase<'_> {
    async fn start(
        &mut self,
        mesh: Scenario,
        _case: &SecurityCase,
        _identities: bool,
    ) -> Result<(), Error> {
        for pod in self.net.topology().pods() {
            let app = self.start_app(&pod).await?;
            self.components.push(app);
        }
        let enrolled = enroll(mesh, &self.lab()).await?;
        self.components.extend(enrolled);
        Ok(())
    }

    fn pod_ip(&self, pod: &Pod) -> Option<std::net::IpAddr> {
        self.net.pod_ip(&pod.name).ok()
    }

    fn node_of(&self, pod: &Pod) -> Option<String> {
        Some(pod.workload.node.clone())
    }

    /// Between nodes, the calling node's uplink; within one, the destination pod's interface,
    /// or the node's loopback where its agent tunnels to itself.
    fn capture_place(
        &self,
        from: &Pod,
        to: &Pod,
        same_node: bool,
        agent_carries: bool,
    ) -> CapturePlace {
        match (same_node, agent_carries) {
            (true, true) => CapturePlace::NodeLoopback {
                node: to.workload.node.clone(),
            },
            (true, false) => CapturePlace::PodInterface {
                pod: to.name.clone(),
            },
            (false, _) => CapturePlace::NodeLink {
                node: from.workload.node.clone(),
            },
        }
    }

    async fn probe(
        &self,
        place: &CapturePlace,
        (_from, _to): (&Pod, &Pod),
        probe: &Probe,
        marker: &str,
        pcap: &Path,
    ) -> Result<ProbeRecord, Error> {
        let (netns, interface, capture_point) = match place {
            CapturePlace::NodeLoopback { node } => (
                self.net.netns_of(NetPlace::Node(node))?,
                "lo".to_owned(),
                format!(
                    "{node}'s loopback, where its agent tunnels to itself (the legs between \
                     each pod and the agent cross the pods' interfaces in plaintext, as with \
                     any agent in the node's namespace)"
                ),
            ),
            CapturePlace::PodInterface { pod } => {
                let (netns, interface) = self.net.pod_port(pod)?;
                let described = format!("{pod}'s pod interface ({interface})");
                (netns, interface, described)
            }
            CapturePlace::PodLoopback { pod } => {
                let (netns, _) = self.net.pod_port(pod)?;
                (netns, "lo".to_owned(), format!("{pod}'s loopback"))
            }
            CapturePlace::NodeLink { node } => {
                let (netns, interface) = self.net.uplink_of(node)?;
                let described = format!("inter-node link ({node} {interface})");
                (netns, interface.to_owned(), described)
            }
        };
        let capture = WireCapture::start(&netns, &interface, pcap)?;
        let observation = run_probe(&self.net, probe, marker)?;
        let wire = capture.finish(marker.as_bytes())?;
        Ok(ProbeRecord {
            observation,
            wire,
            capture_point,
        })
    }

    async fn identity_plan(&mut self, mesh: Scenario, dir: &Path) -> Result<IdentityPlan, Error> {
        IdentityPlan::prepare(mesh, &self.pki, dir, self.pki.svid_ttl)
    }

    async fn check_identities(
        &mut self,
        mesh: Scenario,
        plan: &mut IdentityPlan,
    ) -> Result<Vec<IdentityCheck>, Error> {
        let access = NodeAccess {
            net: &self.net,
            guard: Guard::of(mesh, &self.net)?,
        };
        let lab = self.lab();
        let ca_rotation = mesh.renews_by_ca_rotation().then(|| mesh.rotate_ca(&lab));
        plan.run(&access, ca_rotation).await
    }

    async fn finish(self) {
        for component in self.components {
            component.stop(Duration::from_secs(2)).await;
        }
        if let Err(e) = meshbench_meshes::collect_outputs(&self.cell_area, &self.dir) {
            tracing::warn!(error = %e, "the proxies' outputs were not all copied into the results");
        }
        drop(self.net);
    }
}
