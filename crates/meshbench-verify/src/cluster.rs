//! `verify --backend kubernetes`: E3's six cases on a cluster, with nothing but the API
//! server. Each case is a site of the Kubernetes backend: E3's application in E3's namespaces
//! (`app`, `external`), the case's workloads enrolled by the mesh, the impostor under the
//! experimenter's ServiceAccount without the mesh's credentials. Each probe is made from
//! inside its calling pod (`meshbench call`, exec'd in the pod's app container, asks the
//! pod's own app over loopback, so the call leaves the pod as any of the app's calls), and
//! its wire evidence is recorded in the destination pod's network namespace (`meshbench
//! wire capture` exec'd there: an AF_PACKET capture of the pod's eth0, whose pcap comes back
//! through the API and is judged as locally). Every byte between the two pods' proxies
//! crosses that interface, whichever nodes they are on.
//!
//! Identity checks (bad certificates handshaken against a proxy, rotation under load) are not
//! made on a cluster yet; each mesh's verification says so in its `notes`.

use std::net::IpAddr;
use std::path::Path;
use std::time::{Duration, SystemTime};

use meshbench_experiment::platform::{Platform, Site};
use meshbench_kube::{KubeOptions, KubePlatform, KubeSite};
use meshbench_lab::BuildInfo;
use meshbench_meshes::{Enrollment, Mesh, Ports};
use meshbench_policy::Policy;
use meshbench_results::{CaseVerification, MeshVerification, VerifyReport, SCHEMA_VERSION};
use meshbench_topology::{Pod as TopologyPod, Topology};

use crate::e3::{self, SecurityCase, CASES, PROBES};
use crate::expect::expect;
use crate::probe::{observation, probe_request};
use crate::run::{all_passed, failures, not_verified, probe_verdict};
use crate::wire::{evidence, WireExpectation};
use crate::Error;

/// The interface of a pod on every CNI: the verifier records it inside the pod.
const POD_INTERFACE: &str = "eth0";
/// How long a capture may take to start listening, and to finish once stopped.
const CAPTURE_WAIT: Duration = Duration::from_secs(30);
/// Bound on a probe (the app's own call to the target is bounded at 3 s).
const PROBE_TIMEOUT: Duration = Duration::from_secs(60);
/// A capture's own bound, should the verifier never stop it.
const CAPTURE_MAX: &str = "120s";

pub struct ClusterVerifyOptions {
    pub meshes: Vec<Mesh>,
    /// Where `verify.json`, the captures and each case's files go.
    pub out_dir: std::path::PathBuf,
    /// The cluster and the image; `work_dir` holds the run's identities while it runs.
    pub kube: KubeOptions,
    pub build: BuildInfo,
    /// Labels every object of the verification.
    pub run: String,
}

/// Runs every case for every mesh on the cluster. `progress` gets one line per case.
pub async fn verify_on_cluster(
    options: &ClusterVerifyOptions,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<VerifyReport, Error> {
    let started_at = now();
    let policy_yaml = e3::zero_trust_policy();
    let policy = Policy::from_yaml(&policy_yaml)?;
    let mut platform = KubePlatform::connect(&options.kube, &options.run).await?;
    // Every case has the same workloads, namespaces and service accounts; only which of
    // them the mesh enrolls differs.
    platform
        .prepare(&e3::topology(&CASES[1]), &policy_yaml)
        .await?;
    let mut meshes = vec![];
    for &mesh in &options.meshes {
        let dir = options.out_dir.join(mesh.name());
        if !mesh.enrolls_on_cluster() {
            let on_cluster: Vec<&str> = Mesh::all()
                .filter(|m| m.enrolls_on_cluster())
                .map(|m| m.name())
                .collect();
            meshes.push(not_verified(
                mesh,
                format!(
                    "{} cannot enroll E3's application on Kubernetes yet (on a cluster: {})",
                    mesh.name(),
                    on_cluster.join(", ")
                ),
            ));
            continue;
        }
        let mut cases = vec![];
        for case in &CASES {
            let case_dir = dir.join(format!("case-{}", case.number));
            let verification = verify_case(&platform, mesh, case, &policy, &case_dir).await?;
            progress(&format!(
                "{}: case {} ({}): {} probes, {} failed",
                mesh.name(),
                case.number,
                case.title,
                verification.probes.len(),
                failures(&verification)
            ));
            cases.push(verification);
        }
        meshes.push(MeshVerification {
            mesh: mesh.name().into(),
            description: mesh.description(),
            cases,
            identity: vec![],
            error: None,
            notes: vec![format!(
                "on Kubernetes ({}): identity checks are not made on a cluster yet; wire \
                 evidence is recorded through the API server, in the destination pod \
                 ({POD_INTERFACE}) or, where a node agent carries the path, on the calling \
                 node's network from its agent's pod",
                platform.name()
            )],
        });
    }
    let passed = all_passed(&meshes);
    Ok(VerifyReport {
        schema_version: SCHEMA_VERSION,
        kind: "meshbench.verify".into(),
        started_at,
        finished_at: now(),
        environment: meshbench_lab::describe_environment(&options.build),
        platform: Some(platform.name()),
        policy: policy_yaml,
        meshes,
        passed,
    })
}

/// One case on its own site, deleted (and waited for) before the next case starts.
async fn verify_case(
    platform: &KubePlatform,
    mesh: Mesh,
    case: &SecurityCase,
    policy: &Policy,
    dir: &Path,
) -> Result<CaseVerification, Error> {
    std::fs::create_dir_all(dir).map_err(|source| Error::Io {
        path: dir.to_owned(),
        source,
    })?;
    let topology = e3::topology(case);
    let mut site = platform.realize_topology(&topology, dir).await?;
    let outcome = run_case(&mut site, &topology, mesh, case, policy, dir).await;
    Box::new(site).finish().await;
    outcome
}

async fn run_case(
    site: &mut KubeSite<'_>,
    topology: &Topology,
    mesh: Mesh,
    case: &SecurityCase,
    policy: &Policy,
    dir: &Path,
) -> Result<CaseVerification, Error> {
    for pod in topology.pods() {
        site.start_app(&pod, &e3::app_file(&pod.workload.name))
            .await?;
    }
    site.enroll(mesh).await?;
    site.wait_for_routes().await?;
    let mut probes = vec![];
    for (i, probe) in PROBES.iter().enumerate() {
        let pod = |workload: &str| {
            topology
                .first_pod(workload)
                .ok_or_else(|| Error::Probe(format!("no pod for {workload}")))
        };
        let (from, to) = (pod(probe.from)?, pod(probe.to)?);
        let expected = expect(policy, probe, case.meshed, site.pod_ip(&from.name));
        let marker = format!("mb-verify-marker-{}-{}-{i}", mesh.name(), case.number);
        let both_enrolled = case.meshed.contains(&probe.from) && case.meshed.contains(&probe.to);
        let same_node = site.node_of(&from.name) == site.node_of(&to.name);
        let stop_file = format!("/tmp/meshbench-capture-{i}.stop");
        let point = capture_point(site, mesh, &from, &to, both_enrolled, same_node)?;
        let mut command: Vec<String> = ["meshbench", "wire", "capture", "--stop-file", &stop_file]
            .map(str::to_owned)
            .to_vec();
        command.extend(point.args.iter().cloned());
        command.extend(["--max-duration".into(), CAPTURE_MAX.into()]);
        let capture = site
            .start_exec(&point.pod, command, "listening on", CAPTURE_WAIT)
            .await?;
        let (path, body) = probe_request(probe, &marker);
        let asked = site
            .exec(
                &from.name,
                vec![
                    "meshbench".into(),
                    "call".into(),
                    "--json".into(),
                    body.to_string(),
                    format!("http://127.0.0.1:{}{path}", Ports::APP),
                ],
                PROBE_TIMEOUT,
            )
            .await;
        // A capture whose stop file was not made would only time out: say why first.
        site.exec_ok(
            &point.pod,
            vec!["meshbench".into(), "wire".into(), "mark".into(), stop_file],
            CAPTURE_WAIT,
        )
        .await?;
        let captured = capture.finish(CAPTURE_WAIT).await?;
        let asked = asked?;
        if let Err(status) = asked.status {
            return Err(Error::Probe(format!(
                "{} did not answer {path}: {status}: {}",
                probe.from,
                asked.stderr.trim()
            )));
        }
        let reply: serde_json::Value = serde_json::from_slice(&asked.stdout)
            .map_err(|e| Error::Probe(format!("{}'s answer is not JSON: {e}", probe.from)))?;
        if let Err(status) = captured.status {
            return Err(Error::Probe(format!(
                "the capture in {} failed: {status}: {}",
                point.pod,
                captured.stderr.trim()
            )));
        }
        let pcap = dir.join(format!("probe-{i}-{}-{}.pcap", probe.from, probe.to));
        std::fs::write(&pcap, &captured.stdout).map_err(|source| Error::Io {
            path: pcap.clone(),
            source,
        })?;
        let mut report = meshbench_netlab::analyze_pcap(&pcap, marker.as_bytes())?;
        if let Some(keep) = &point.only_between {
            // A node's link carries the node's own traffic too (its kubelet's, say).
            report
                .flows
                .retain(|f| keep.contains(&f.client.ip()) && keep.contains(&f.server.ip()));
        }
        let wire = evidence(
            &report,
            point.description,
            if same_node { "same-node" } else { "inter-node" },
            &marker,
            WireExpectation::of(mesh, both_enrolled, same_node),
        );
        probes.push(probe_verdict(
            probe,
            expected,
            observation(probe, &reply),
            wire,
        ));
    }
    Ok(CaseVerification {
        case: case.number,
        title: case.title.into(),
        meshed: case.meshed.iter().map(|w| (*w).to_owned()).collect(),
        probes,
    })
}

/// Where a probe's path is recorded.
struct CapturePoint {
    /// The topology pod the capture is exec'd in.
    pod: String,
    /// How `meshbench wire capture` picks its interface.
    args: Vec<String>,
    description: String,
    /// Only the connections between these addresses are the probe's.
    only_between: Option<Vec<IpAddr>>,
}

/// Where a probe's path runs encrypted, if anywhere, and can be recorded through the API:
/// for a node agent carrying it, its calling node's network (the link toward the other
/// node, or loopback where the agent tunnels to itself), recorded in that node's agent pod;
/// otherwise the destination pod's own interface, which every byte to the pod crosses.
fn capture_point(
    site: &KubeSite<'_>,
    mesh: Mesh,
    from: &TopologyPod,
    to: &TopologyPod,
    both_enrolled: bool,
    same_node: bool,
) -> Result<CapturePoint, Error> {
    let agent_carries = mesh.enrollment() == Enrollment::AgentPerNode
        && both_enrolled
        && (!same_node || mesh.tunnels_within_node());
    if !agent_carries {
        return Ok(CapturePoint {
            pod: to.name.clone(),
            args: vec!["--interface".into(), POD_INTERFACE.into()],
            description: format!(
                "{}'s pod interface ({POD_INTERFACE}, recorded inside the pod through the API server)",
                to.name
            ),
            only_between: None,
        });
    }
    let address = |what: &str, ip: Option<IpAddr>| {
        ip.ok_or_else(|| Error::Probe(format!("the cluster gave {what} no address")))
    };
    let toward = address(&format!("{}'s node", to.name), site.host_ip(&to.name))?;
    let from_host = address(&format!("{}'s node", from.name), site.host_ip(&from.name))?;
    let node = &from.workload.node;
    Ok(CapturePoint {
        pod: meshbench_kube::node_agent_pod(node),
        args: vec!["--toward".into(), toward.to_string()],
        description: if same_node {
            format!("{node}'s loopback, where its agent tunnels to itself (recorded in its node agent's pod)")
        } else {
            format!("{node}'s link toward {toward} (recorded in its node agent's pod)")
        },
        only_between: Some(
            [
                Some(from_host),
                Some(toward),
                site.pod_ip(&from.name),
                site.pod_ip(&to.name),
            ]
            .into_iter()
            .flatten()
            .collect(),
        ),
    })
}

fn now() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}
