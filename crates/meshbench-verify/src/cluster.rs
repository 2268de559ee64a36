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
//! Where every member of E3's application is enrolled, the identity checks follow the probes,
//! as locally: the case's SVIDs rotate every few seconds (`KubeSite::rotate_svids`), the
//! checks' certificates go into the Secret of a pod outside the mesh, on the first node, and
//! each handshake with the calculator's guard is `meshbench wire exchange` exec'd there.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use meshbench_experiment::platform::{Platform, Site};
use meshbench_identity::ClientTlsFiles;
use meshbench_kube::{KubeOptions, KubePlatform, KubeSite};
use meshbench_lab::BuildInfo;
use meshbench_meshes::{Enrollment, Mesh, Ports, CONFIG_DIR_IN_POD, POD_PKI_DIR};
use meshbench_policy::Policy;
use meshbench_results::{
    CaseVerification, IdentityCheck, MeshVerification, VerifyReport, SCHEMA_VERSION,
};
use meshbench_topology::{Pod as TopologyPod, Topology};

use crate::e3::{self, SecurityCase, CASES, PROBES};
use crate::expect::{enforced_in_case, expect_through};
use crate::identity::{BoxFuture, ExchangeReport, Guard, GuardAccess, IdentityPlan, ROTATION_TTL};
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
/// The pod outside the mesh the identity checks are made from.
const CHECKER_POD: &str = "meshbench-identity-checker";
/// Bound on one identity exchange exec'd in the checker (the exchange is bounded at 5 s).
const EXCHANGE_EXEC_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound on the rotation check's 300 requests (about 3 s locally).
const EXPERIMENT_TIMEOUT: Duration = Duration::from_secs(120);

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
        let mut identity = vec![];
        let mut notes: Vec<String> = vec![];
        for case in &CASES {
            let case_dir = dir.join(format!("case-{}", case.number));
            let enforced = enforced_in_case(mesh, &policy, case, &mut notes)?;
            let (verification, checks) =
                verify_case(&platform, mesh, case, &enforced, &case_dir).await?;
            identity.extend(checks);
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
        notes.insert(
            0,
            format!(
                "on Kubernetes ({}): wire evidence is recorded through the API server, in the \
                 destination pod ({POD_INTERFACE}) or, where a node agent carries the path, on \
                 the calling node's network from its agent's pod; identity checks are made \
                 from a pod outside the mesh ({CHECKER_POD}), where the pods' first SVIDs live \
                 {} s and renewed ones {} s",
                platform.name(),
                meshbench_kube::BOOTSTRAP_SVID_TTL.as_secs(),
                ROTATION_TTL.as_secs()
            ),
        );
        meshes.push(MeshVerification {
            mesh: mesh.name().into(),
            description: mesh.description().to_owned(),
            cases,
            identity,
            error: None,
            notes,
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
) -> Result<(CaseVerification, Vec<IdentityCheck>), Error> {
    std::fs::create_dir_all(dir).map_err(|source| Error::Io {
        path: dir.to_owned(),
        source,
    })?;
    let topology = e3::topology(case);
    let mut site = platform.realize_topology(&topology, dir).await?;
    let identity = case.checks_identities(mesh).then(|| {
        IdentityPlan::prepare(
            mesh,
            platform.pki()?,
            &dir.join("identity"),
            Some(ROTATION_TTL),
        )
    });
    let outcome = match identity.transpose() {
        Ok(identity) => run_case(&mut site, &topology, mesh, case, policy, dir, identity).await,
        Err(e) => Err(e),
    };
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
    identity: Option<IdentityPlan>,
) -> Result<(CaseVerification, Vec<IdentityCheck>), Error> {
    for pod in topology.pods() {
        site.start_app(&pod, &e3::app_file(&pod.workload.name))
            .await?;
    }
    if identity.is_some() {
        // The case's SVIDs rotate while its identities are checked.
        site.rotate_svids(ROTATION_TTL);
    }
    site.enroll(mesh).await?;
    site.wait_for_routes().await?;
    let mut probes = vec![];
    for (i, probe) in PROBES.iter().enumerate() {
        let (from, to) = (e3_pod(topology, probe.from)?, e3_pod(topology, probe.to)?);
        let expected = expect_through(mesh, policy, probe, case.meshed, site.pod_ip(&from.name));
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
        let asked = ask_app(site, probe.from, path, &body).await;
        // A capture whose stop file was not made would only time out: say why first.
        site.exec_ok(
            &point.pod,
            vec!["meshbench".into(), "wire".into(), "mark".into(), stop_file],
            CAPTURE_WAIT,
        )
        .await?;
        let captured = capture.finish(CAPTURE_WAIT).await?;
        let reply = asked?;
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
            observation(probe, &reply).allowed(),
        );
        probes.push(probe_verdict(
            probe,
            expected,
            observation(probe, &reply),
            wire,
        ));
    }
    let checks = match identity {
        Some(plan) => check_identities(site, topology, mesh, &plan).await?,
        None => vec![],
    };
    Ok((
        CaseVerification {
            case: case.number,
            title: case.title.into(),
            meshed: case.meshed.iter().map(|w| (*w).to_owned()).collect(),
            probes,
        },
        checks,
    ))
}

/// Has `workload`'s own app answer `body` at `path` (`meshbench call`, exec'd in its pod, asks
/// it over loopback); its JSON answer. An app that does not answer is an error of the
/// verification itself.
async fn ask_app(
    site: &KubeSite<'_>,
    workload: &str,
    path: &str,
    body: &serde_json::Value,
) -> Result<serde_json::Value, Error> {
    let pod = e3_pod(site.topology(), workload)?;
    let asked = site
        .exec(
            &pod.name,
            vec![
                "meshbench".into(),
                "call".into(),
                "--json".into(),
                body.to_string(),
                format!("http://127.0.0.1:{}{path}", Ports::APP),
            ],
            PROBE_TIMEOUT.max(EXPERIMENT_TIMEOUT),
        )
        .await?;
    if let Err(status) = asked.status {
        return Err(Error::Probe(format!(
            "{workload} did not answer {path}: {status}: {}",
            asked.stderr.trim()
        )));
    }
    serde_json::from_slice(&asked.stdout)
        .map_err(|e| Error::Probe(format!("{workload}'s answer is not JSON: {e}")))
}

fn e3_pod(topology: &Topology, workload: &str) -> Result<TopologyPod, Error> {
    topology
        .first_pod(workload)
        .ok_or_else(|| Error::Probe(format!("no pod for {workload}")))
}

/// The identity checks, from a pod outside the mesh on the first node, given the checks'
/// certificates in its Secret.
async fn check_identities(
    site: &mut KubeSite<'_>,
    topology: &Topology,
    mesh: Mesh,
    plan: &IdentityPlan,
) -> Result<Vec<IdentityCheck>, Error> {
    let mut in_pod = BTreeMap::new();
    let mut secret = BTreeMap::new();
    for path in plan.files() {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(|| Error::Probe(format!("{} has no file name", path.display())))?;
        let bytes = std::fs::read(&path).map_err(|source| Error::Io {
            path: path.clone(),
            source,
        })?;
        if secret.insert(name.clone(), bytes).is_some() {
            return Err(Error::Probe(format!(
                "two of the identity checks' files are named {name}"
            )));
        }
        in_pod.insert(
            path,
            Path::new(CONFIG_DIR_IN_POD).join(POD_PKI_DIR).join(name),
        );
    }
    site.start_bystander(CHECKER_POD, &topology.nodes[0], secret)
        .await?;
    let calculator = e3_pod(topology, e3::CALCULATOR)?;
    let address = |what: &str, ip: Option<IpAddr>| {
        ip.ok_or_else(|| Error::Probe(format!("the cluster gave {what} no address")))
    };
    let guard = Guard::for_calculator(
        mesh,
        address("the calculator", site.pod_ip(&calculator.name))?,
        address("the calculator's node", site.host_ip(&calculator.name))?,
    );
    plan.run(
        &ClusterAccess {
            site,
            guard,
            in_pod,
        },
        None,
    )
    .await
}

/// The cluster's access to the calculator's guard: exchanges exec'd in the checker pod.
struct ClusterAccess<'s, 'p> {
    site: &'s KubeSite<'p>,
    guard: Guard,
    /// Where each of the checks' files is in the checker pod.
    in_pod: BTreeMap<PathBuf, PathBuf>,
}

impl ClusterAccess<'_, '_> {
    fn pod_path(&self, path: &Path) -> Result<String, Error> {
        self.in_pod
            .get(path)
            .map(|p| p.display().to_string())
            .ok_or_else(|| {
                Error::Probe(format!(
                    "{} was not given to the checker pod",
                    path.display()
                ))
            })
    }

    fn exchange_command(
        &self,
        files: &ClientTlsFiles,
        headers: &[(String, String)],
    ) -> Result<Vec<String>, Error> {
        let mut command: Vec<String> = vec!["meshbench".into(), "wire".into(), "exchange".into()];
        match self.guard {
            Guard::Sidecar { pod } => command.extend(["--sidecar".into(), pod.to_string()]),
            Guard::NodeAgent { agent, app } => command.extend([
                "--node-agent".into(),
                agent.to_string(),
                "--app".into(),
                app.to_string(),
            ]),
        }
        command.extend(["--ca".into(), self.pod_path(&files.ca)?]);
        if let (Some(cert), Some(key)) = (&files.cert, &files.key) {
            command.extend([
                "--cert".into(),
                self.pod_path(cert)?,
                "--key".into(),
                self.pod_path(key)?,
            ]);
        }
        if let Some(id) = &files.expect_server_id {
            command.extend(["--expect-server-id".into(), id.to_string()]);
        }
        for (name, value) in headers {
            command.extend(["--header".into(), format!("{name}: {value}")]);
        }
        Ok(command)
    }
}

impl GuardAccess for ClusterAccess<'_, '_> {
    fn exchange<'a>(
        &'a self,
        files: &'a ClientTlsFiles,
        headers: &'a [(String, String)],
    ) -> BoxFuture<'a, Result<ExchangeReport, Error>> {
        Box::pin(async move {
            let command = self.exchange_command(files, headers)?;
            let out = self
                .site
                .exec_ok(CHECKER_POD, command, EXCHANGE_EXEC_TIMEOUT)
                .await?;
            serde_json::from_slice(&out.stdout).map_err(|e| {
                Error::Probe(format!(
                    "the identity exchange's report is not JSON ({e}): {}",
                    String::from_utf8_lossy(&out.stdout)
                ))
            })
        })
    }

    fn run_experiment(
        &self,
        body: serde_json::Value,
    ) -> BoxFuture<'_, Result<serde_json::Value, Error>> {
        Box::pin(async move {
            ask_app(
                self.site,
                e3::EXPERIMENTER,
                "/api/experimenter/experiment",
                &body,
            )
            .await
        })
    }
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
