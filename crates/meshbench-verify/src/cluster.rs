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

use std::path::Path;
use std::time::{Duration, SystemTime};

use meshbench_experiment::platform::{Platform, Site};
use meshbench_kube::{KubeOptions, KubePlatform, KubeSite};
use meshbench_lab::BuildInfo;
use meshbench_meshes::{Mesh, Ports};
use meshbench_policy::Policy;
use meshbench_results::{CaseVerification, MeshVerification, VerifyReport, SCHEMA_VERSION};
use meshbench_topology::Topology;

use crate::e3::{self, SecurityCase, CASES, PROBES};
use crate::expect::expect;
use crate::probe::{observation, probe_request};
use crate::run::{all_passed, failures, probe_verdict};
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
        let cluster = mesh.cluster();
        if !cluster.is_some_and(|c| c.can_enroll()) {
            meshes.push(MeshVerification {
                mesh: mesh.name().into(),
                description: mesh.description(),
                cases: vec![],
                identity: vec![],
                error: Some(format!(
                    "{} cannot enroll E3's application on Kubernetes yet (on a cluster: {})",
                    mesh.name(),
                    Mesh::all()
                        .filter(|m| m.cluster().is_some_and(|c| c.can_enroll()))
                        .map(|m| m.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
                notes: vec![],
            });
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
                 evidence is captured on the destination pod's {POD_INTERFACE}",
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
        let capture = site
            .start_exec(
                &to.name,
                [
                    "meshbench",
                    "wire",
                    "capture",
                    "--interface",
                    POD_INTERFACE,
                    "--stop-file",
                    &stop_file,
                    "--max-duration",
                    CAPTURE_MAX,
                ]
                .map(str::to_owned)
                .to_vec(),
                "listening on",
                CAPTURE_WAIT,
            )
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
        let stopped = site
            .exec(
                &to.name,
                vec!["meshbench".into(), "wire".into(), "stop".into(), stop_file],
                CAPTURE_WAIT,
            )
            .await;
        let captured = capture.finish(CAPTURE_WAIT).await?;
        stopped?;
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
                to.name,
                captured.stderr.trim()
            )));
        }
        let pcap = dir.join(format!("probe-{i}-{}-{}.pcap", probe.from, probe.to));
        std::fs::write(&pcap, &captured.stdout).map_err(|source| Error::Io {
            path: pcap.clone(),
            source,
        })?;
        let report = meshbench_netlab::analyze_pcap(&pcap, marker.as_bytes())?;
        let point = format!(
            "{}'s pod interface ({POD_INTERFACE}, recorded inside the pod through the API server)",
            to.name
        );
        let wire = evidence(
            &report,
            point,
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

fn now() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}
