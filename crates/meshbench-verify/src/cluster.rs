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
use std::time::Duration;

use meshbench_experiment::platform::{Platform, Site};
use meshbench_identity::ClientTlsFiles;
use meshbench_kube::{KubeOptions, KubePlatform, KubeSite, CAPTURE_WAIT, POD_INTERFACE};
use meshbench_lab::BuildInfo;
use meshbench_meshes::{
    IdentityProtocol, IdentityService, Ports, Scenario, CONFIG_DIR_IN_POD, POD_PKI_DIR,
};
use meshbench_results::{IdentityCheck, VerifyReport};
use meshbench_topology::{Pod as TopologyPod, Topology};

use crate::e3::{self, Probe, SecurityCase, CASES};
use crate::flow::{e3_pod, verify_with, CapturePlace, CaseSite, ProbeRecord, Verifier};
use crate::identity::{
    BoxFuture, CertKey, ExchangeReport, Guard, GuardAccess, IdentityPlan, MeshSvids, ROTATION_TTL,
};
use crate::probe::{observation, probe_request};
use crate::Error;

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
    pub meshes: Vec<Scenario>,
    /// Where `verify.json`, the captures and each case's files go.
    pub out_dir: std::path::PathBuf,
    /// The cluster and the image; `work_dir` holds the run's identities while it runs.
    pub kube: KubeOptions,
    pub build: BuildInfo,
    /// Labels every object of the verification.
    pub run: String,
    /// The policy over E3's application, as YAML (E3's own unless a user gives another).
    pub policy: String,
}

/// Runs every case for every mesh on the cluster. `progress` gets one line per case.
pub async fn verify_on_cluster(
    options: &ClusterVerifyOptions,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<VerifyReport, Error> {
    let mut platform = KubePlatform::connect(&options.kube, &options.run).await?;
    // Every case has the same workloads, namespaces and service accounts; only which of
    // them the mesh enrolls differs.
    let policy = meshbench_policy::Policy::from_yaml(&options.policy)?;
    platform.prepare(&e3::topology(&CASES[1]), &policy).await?;
    verify_with(
        &Cluster { platform },
        &options.meshes,
        &options.policy,
        &options.out_dir,
        &options.build,
        progress,
    )
    .await
}

struct Cluster {
    platform: KubePlatform,
}

impl Verifier for Cluster {
    type Case<'a> = ClusterCase<'a>;

    fn name(&self) -> String {
        self.platform.name()
    }

    fn admit(&self, mesh: Scenario) -> Result<(), Error> {
        if mesh.enrolls_on_cluster() {
            return Ok(());
        }
        if mesh.installed().is_some() {
            // Installed by its own tools: usable where the cluster runs it.
            return match self.platform.unavailable(mesh) {
                None => Ok(()),
                Some(why) => Err(Error::NotHere(format!(
                    "{} is not usable on this cluster: {}",
                    mesh.name(),
                    why.reason
                ))),
            };
        }
        let on_cluster: Vec<&str> = Scenario::all()
            .filter(|m| m.enrolls_on_cluster())
            .map(|m| m.name())
            .collect();
        Err(Error::NotHere(format!(
            "{} cannot enroll E3's application on Kubernetes yet (on a cluster: {})",
            mesh.name(),
            on_cluster.join(", ")
        )))
    }

    fn notes(&self, mesh: Scenario) -> Vec<String> {
        let mut notes = vec![format!(
            "on Kubernetes ({}): wire evidence is recorded through the API server, in the \
             destination pod ({POD_INTERFACE}) or, where a node agent carries the path, on the \
             calling node's network from its agent's pod; identity checks are made from a pod \
             outside the mesh ({CHECKER_POD}), where the pods' first SVIDs live {} s and \
             renewed ones {} s",
            self.platform.name(),
            meshbench_kube::BOOTSTRAP_SVID_TTL.as_secs(),
            ROTATION_TTL.as_secs()
        )];
        if mesh.installed().is_some() {
            notes.push(format!(
                "{} runs as the cluster installed it: the policy is applied as its own \
                 resources and enforced as it enforces them; wire evidence is recorded at the \
                 destination pod's interface; where it names a CA the verifier can ask, the \
                 identity checks present that CA's own certificates (issued to the checking \
                 pod for each workload's service-account token: valid, and, where the CA takes \
                 a lifetime per request as Istio's does, expired after a second; Linkerd's \
                 identity controller signs for its configured lifetime, so there the \
                 expired-certificate check is not made) to the calculator's proxy, and the \
                 rotation check is not made: its SVIDs live as its CA decides",
                mesh.name()
            ));
        }
        // A mesh without mTLS states its encryption in its mode (Cilium's `encryption: none`,
        // `wireguard` or `ipsec`). Where there is none it is said once, plainly: each probe's
        // wire evidence then reports its plaintext as expected, which must not read as a pass
        // for encryption.
        let mode = self
            .platform
            .installation(mesh)
            .and_then(|i| i.mode.as_deref());
        if let Some(mode) = mode.filter(|m| !mesh.mtls() && m.contains("encryption: none")) {
            notes.push(format!(
                "{} encrypts nothing on this cluster ({mode}): every path, between nodes too, \
                 crosses in plaintext, and the wire evidence records it as such; what is \
                 verified is who may reach whom, not confidentiality",
                mesh.name()
            ));
        }
        notes
    }

    /// A mesh the cluster runs enforces what its translation for this installation says
    /// (Cilium without mutual authentication or its L7 proxy enforces less than with them):
    /// the same translation the cases apply.
    fn enforced_policy(
        &self,
        mesh: Scenario,
        policy: &meshbench_policy::Policy,
        topology: &Topology,
    ) -> Result<meshbench_meshes::EnforcedPolicy, meshbench_meshes::Error> {
        match (mesh.installed(), self.platform.installation(mesh)) {
            (Some(installed), Some(installation)) => Ok(installed
                .translate(&meshbench_meshes::InstalledSite {
                    topology,
                    policy,
                    namespaces: &Default::default(),
                    installation,
                })?
                .enforced),
            _ => mesh.enforced_policy(policy, topology),
        }
    }

    async fn open<'a>(
        &'a self,
        mesh: Scenario,
        _case: &SecurityCase,
        topology: &Topology,
        dir: &Path,
    ) -> Result<ClusterCase<'a>, Error> {
        let mesh_ca = match mesh.installed() {
            Some(installed) => self.platform.identity_service(installed).await?,
            None => None,
        };
        Ok(ClusterCase {
            site: self.platform.realize_topology(topology, dir).await?,
            platform: &self.platform,
            installed: mesh.installed().is_some(),
            loopback_port: mesh.installed().and_then(|m| m.inbound_port_in_pod()),
            probe_ports: mesh.installed().map_or(&[], |m| m.probe_ports()),
            mesh_ca,
            remote: None,
        })
    }
}

/// A case's site on the cluster.
struct ClusterCase<'a> {
    site: KubeSite<'a>,
    platform: &'a KubePlatform,
    /// The mesh is one the cluster runs (its node agents are its own, not meshbench's).
    installed: bool,
    /// Where an installed mesh's proxy takes its peers' connections in the pod, which is what
    /// a pod's call to itself is judged by on its loopback.
    loopback_port: Option<u16>,
    /// Where the kubelet probes an installed mesh's proxy, left out of the wire evidence.
    probe_ports: &'static [u16],
    /// Its CA as its proxies use it, where the verifier can ask it for SVIDs.
    mesh_ca: Option<IdentityService>,
    /// What the checking pod asks the mesh's CA for, once the plan is made.
    remote: Option<RemoteIssue>,
}

/// The SVIDs a checking pod is issued by a mesh's own CA, and the root that CA's serving
/// certificate chains to (a file given to the pod).
struct RemoteIssue {
    root: PathBuf,
    svids: Vec<RemoteSvid>,
}

/// An SVID the checking pod is issued by a mesh's own CA.
struct RemoteSvid {
    /// The file stem in the pod (`<name>.pem`, `<name>.key`).
    name: String,
    identity: String,
    ttl: Duration,
    /// The service-account token it is asked with (a file given to the pod).
    token: PathBuf,
    /// Where the plan names its files.
    files: CertKey,
    /// The one whose expiry the plan waits for.
    expired: bool,
}

/// Where the checking pod keeps the SVIDs the mesh's CA issued it.
const REMOTE_SVID_DIR: &str = "/tmp/meshbench-mesh-svids";
/// Bound on one request to a mesh's CA exec'd in the checker (the request is bounded at 15 s).
const REMOTE_SVID_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the checks' valid SVIDs from a mesh's CA live: the checks take a minute or two.
const REMOTE_SVID_TTL: Duration = Duration::from_secs(3600);

impl ClusterCase<'_> {
    /// The plan for a mesh the cluster runs: its trust root and a token of each workload
    /// made here; the SVIDs themselves are issued to the checking pod by the mesh's CA once
    /// the pod runs ([`check_identities`]), so the plan names where they will be.
    async fn mesh_svids_plan(&mut self, mesh: Scenario, dir: &Path) -> Result<IdentityPlan, Error> {
        let (service, root) = self.site.installed_mesh_ca(e3::APP).await?.ok_or_else(|| {
            Error::Probe(format!("{} names no CA the checks can ask", mesh.name()))
        })?;
        std::fs::create_dir_all(dir).map_err(|source| Error::Io {
            path: dir.to_owned(),
            source,
        })?;
        let write = |path: PathBuf, contents: &str| -> Result<PathBuf, Error> {
            meshbench_identity::write_secret(&path, contents.as_bytes())?;
            Ok(path)
        };
        // The CA's serving root, for the pod's requests to it; the workloads' root comes back
        // with the first SVID.
        let serving_root = write(dir.join("mesh-ca-serving-root.pem"), &root)?;
        let in_pod = dir.join("in-pod");
        let trust_root = in_pod.join("mesh-experimenter.root.pem");
        // Linkerd's controller signs for its configured lifetime: no expired one can be had.
        let takes_lifetime = service.protocol == IdentityProtocol::Istio;
        let mut remote = vec![];
        for (account, name, ttl, expired) in [
            (
                e3::EXPERIMENTER,
                "mesh-experimenter",
                REMOTE_SVID_TTL,
                false,
            ),
            (e3::CHECKER, "mesh-security-checker", REMOTE_SVID_TTL, false),
            (
                e3::EXPERIMENTER,
                "mesh-expired-experimenter",
                Duration::from_secs(1),
                true,
            ),
        ] {
            if expired && !takes_lifetime {
                continue;
            }
            let token = self
                .site
                .service_account_token(e3::APP, account, &service.token_audience)
                .await?;
            remote.push(RemoteSvid {
                name: name.to_owned(),
                identity: mesh.workload_identity(e3::APP, account),
                ttl,
                token: write(dir.join(format!("{name}.token")), &token)?,
                files: CertKey {
                    cert: in_pod.join(format!("{name}.pem")),
                    key: in_pod.join(format!("{name}.key")),
                },
                expired,
            });
        }
        let find = |expired: bool, account: &str| {
            remote
                .iter()
                .find(|r| {
                    r.expired == expired && r.identity == mesh.workload_identity(e3::APP, account)
                })
                .map(|r| r.files.clone())
        };
        let file = |expired: bool, account: &str| {
            find(expired, account)
                .ok_or_else(|| Error::Probe(format!("no SVID planned for {account}")))
        };
        let svids = MeshSvids {
            experimenter: file(false, e3::EXPERIMENTER)?,
            checker: file(false, e3::CHECKER)?,
            expired: find(true, e3::EXPERIMENTER),
            // Known once the pod is issued it.
            expired_after: time::OffsetDateTime::now_utc(),
            rotation_caller: None,
            made_remotely: remote
                .iter()
                .flat_map(|r| [r.files.cert.clone(), r.files.key.clone()])
                .chain([trust_root.clone()])
                .collect(),
            trust_root,
        };
        self.remote = Some(RemoteIssue {
            root: serving_root,
            svids: remote,
        });
        IdentityPlan::from_svids(mesh, svids, dir, None)
    }
}

impl CaseSite for ClusterCase<'_> {
    /// Our data planes answer to meshbench's CA, whose certificates the checks issue; a mesh
    /// the cluster runs answers to its own, which the checks can use where it names one they
    /// can ask.
    fn checks_identities(&self) -> bool {
        !self.installed || self.mesh_ca.is_some()
    }

    async fn start(
        &mut self,
        mesh: Scenario,
        _case: &SecurityCase,
        identities: bool,
    ) -> Result<(), Error> {
        let site = &mut self.site;
        let topology = site.topology().clone();
        for pod in topology.pods() {
            site.start_app(&pod, &e3::app_file(&pod.workload.name))
                .await?;
        }
        if identities {
            // The case's SVIDs rotate while its identities are checked.
            site.rotate_svids(ROTATION_TTL);
        }
        site.enroll(mesh).await?;
        Ok(site.wait_for_routes().await?)
    }

    fn pod_ip(&self, pod: &TopologyPod) -> Option<IpAddr> {
        self.site.pod_ip(&pod.name)
    }

    fn node_of(&self, pod: &TopologyPod) -> Option<String> {
        self.site.node_of(&pod.name).map(str::to_owned)
    }

    /// Where our node agent carries the path, its calling node's network (the link toward
    /// the other node, or loopback where the agent tunnels to itself), recorded in that node's
    /// agent pod; otherwise the destination pod's own interface, which every byte to the pod
    /// crosses. A mesh the cluster runs is recorded there too: its agents' pods are not ours
    /// to record in, and ambient's in-pod redirection brings HBONE to the pod's interface.
    fn capture_place(
        &self,
        from: &TopologyPod,
        to: &TopologyPod,
        same_node: bool,
        agent_carries: bool,
    ) -> CapturePlace {
        let node = from.workload.node.clone();
        if self.installed && from.name == to.name && to.workload.meshed {
            return CapturePlace::PodLoopback {
                pod: to.name.clone(),
            };
        }
        match (agent_carries && !self.installed, same_node) {
            (false, _) => CapturePlace::PodInterface {
                pod: to.name.clone(),
            },
            (true, true) => CapturePlace::NodeLoopback { node },
            (true, false) => CapturePlace::NodeLink { node },
        }
    }

    async fn probe(
        &self,
        place: &CapturePlace,
        (from, to): (&TopologyPod, &TopologyPod),
        probe: &Probe,
        marker: &str,
        pcap: &Path,
    ) -> Result<ProbeRecord, Error> {
        let site = &self.site;
        let recording = recording(site, place, from, to, self.loopback_port)?;
        let stop_file = format!(
            "/tmp/meshbench-capture-{}.stop",
            pcap.file_stem().unwrap_or_default().to_string_lossy()
        );
        let mut command: Vec<String> = ["meshbench", "wire", "capture", "--stop-file", &stop_file]
            .map(str::to_owned)
            .to_vec();
        command.extend(recording.args.iter().cloned());
        command.extend(["--max-duration".into(), CAPTURE_MAX.into()]);
        let capture = site
            .start_exec(&recording.pod, command, "listening on", CAPTURE_WAIT)
            .await?;
        let (path, body) = probe_request(probe, marker);
        let asked = ask_app(site, probe.from, path, &body).await;
        // A capture whose stop file was not made would only time out: say why first.
        site.exec_ok(
            &recording.pod,
            vec!["meshbench".into(), "wire".into(), "mark".into(), stop_file],
            CAPTURE_WAIT,
        )
        .await?;
        let captured = capture.finish(CAPTURE_WAIT).await?;
        let reply = asked?;
        if let Err(status) = captured.status {
            return Err(Error::Probe(format!(
                "the capture in {} failed: {status}: {}",
                recording.pod,
                captured.stderr.trim()
            )));
        }
        std::fs::write(pcap, &captured.stdout).map_err(|source| Error::Io {
            path: pcap.to_owned(),
            source,
        })?;
        let mut wire = meshbench_netlab::analyze_pcap(pcap, marker.as_bytes())?;
        if let Some(port) = recording.only_to_port {
            wire.flows.retain(|f| f.server.port() == port);
        }
        // The kubelet's probes of the mesh's proxy cross the pod's interface in plaintext
        // whenever they fall in the capture; they carry nothing of the probe's.
        wire.flows
            .retain(|f| !self.probe_ports.contains(&f.server.port()));
        Ok(ProbeRecord {
            observation: observation(probe, &reply),
            wire,
            capture_point: recording.description,
        })
    }

    async fn identity_plan(&mut self, mesh: Scenario, dir: &Path) -> Result<IdentityPlan, Error> {
        if !self.installed {
            return IdentityPlan::prepare(mesh, self.platform.pki()?, dir, Some(ROTATION_TTL));
        }
        self.mesh_svids_plan(mesh, dir).await
    }

    async fn check_identities(
        &mut self,
        mesh: Scenario,
        plan: &mut IdentityPlan,
    ) -> Result<Vec<IdentityCheck>, Error> {
        let topology = self.site.topology().clone();
        check_identities(
            &mut self.site,
            &topology,
            mesh,
            plan,
            self.remote.as_ref().zip(self.mesh_ca.as_ref()),
        )
        .await
    }

    async fn finish(self) {
        Box::new(self.site).finish().await;
    }
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

/// The identity checks, from a pod outside the mesh on the first node, given the checks'
/// certificates in its Secret.
async fn check_identities(
    site: &mut KubeSite<'_>,
    topology: &Topology,
    mesh: Scenario,
    plan: &mut IdentityPlan,
    remote: Option<(&RemoteIssue, &IdentityService)>,
) -> Result<Vec<IdentityCheck>, Error> {
    let mut in_pod = BTreeMap::new();
    let mut secret = BTreeMap::new();
    // The pod's requests to the mesh's CA need each token and the CA's serving root.
    let tokens = remote.iter().flat_map(|(issue, _)| {
        issue
            .svids
            .iter()
            .map(|r| r.token.clone())
            .chain([issue.root.clone()])
    });
    let mut files = plan.files();
    files.extend(tokens);
    files.sort();
    files.dedup();
    for path in files {
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
    if let Some((issue, service)) = remote {
        let pod_path = |path: &Path| {
            in_pod
                .get(path)
                .map(|p: &PathBuf| p.display().to_string())
                .ok_or_else(|| Error::Probe(format!("{} is not in the pod", path.display())))
        };
        let root = pod_path(&issue.root)?;
        let mut issued = vec![];
        for svid in &issue.svids {
            let not_after =
                issue_in_pod(site, service, svid, &pod_path(&svid.token)?, &root).await?;
            issued.push((svid, not_after));
        }
        for (svid, not_after) in issued {
            let root = svid
                .files
                .cert
                .with_file_name(format!("{}.root.pem", svid.name));
            for (file, extension) in [
                (&svid.files.cert, "pem"),
                (&svid.files.key, "key"),
                (&root, "root.pem"),
            ] {
                in_pod.insert(
                    file.clone(),
                    Path::new(REMOTE_SVID_DIR).join(format!("{}.{extension}", svid.name)),
                );
            }
            if svid.expired {
                plan.set_expired_after(not_after);
            }
        }
    }
    let calculator = e3_pod(topology, e3::CALCULATOR)?;
    let address = |what: &str, ip: Option<IpAddr>| {
        ip.ok_or_else(|| Error::Probe(format!("the cluster gave {what} no address")))
    };
    let calculator_ip = address("the calculator", site.pod_ip(&calculator.name))?;
    let app = std::net::SocketAddr::new(calculator_ip, Ports::APP);
    if site.waypointed(e3::CALCULATOR) {
        plan.expect_valid_identity(
            false,
            "the experimenter's SVID, presented to the calculator's node agent directly: the \
             calculator's rules are at its waypoint, and the node agent lets only the waypoint \
             call it, so no caller can skip the waypoint",
        );
    }
    let guard = match remote.map(|(_, m)| (m.protocol, m.hbone_port_in_pod)) {
        // Ambient's in-pod redirection: the calculator's own address takes HBONE.
        Some((_, Some(port))) => Guard::NodeAgent {
            agent: std::net::SocketAddr::new(calculator_ip, port),
            app,
        },
        // Linkerd's proxy takes the connection to the app's port (proxy-init redirects it to
        // its inbound) and answers the calculator's identity, asked for by SNI.
        Some((IdentityProtocol::Linkerd, None)) => Guard::NamedSidecar {
            pod: app,
            server_name: mesh.workload_identity(e3::APP, e3::CALCULATOR),
        },
        _ => Guard::for_calculator(
            mesh,
            calculator_ip,
            address("the calculator's node", site.host_ip(&calculator.name))?,
        ),
    };
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

/// Has the checking pod be issued `svid` by the mesh's CA (`meshbench ca request-istio`,
/// as the mesh's proxies ask it); its notAfter.
async fn issue_in_pod(
    site: &KubeSite<'_>,
    service: &IdentityService,
    svid: &RemoteSvid,
    token: &str,
    root: &str,
) -> Result<time::OffsetDateTime, Error> {
    let request = match service.protocol {
        IdentityProtocol::Istio => "request-istio",
        IdentityProtocol::Linkerd => "request-linkerd",
    };
    let mut command: Vec<String> = [
        "meshbench",
        "ca",
        request,
        "--address",
        &service.address,
        "--server-name",
        &service.server_name,
        "--root",
        root,
        "--token-file",
        token,
        "--identity",
        &svid.identity,
        "--out",
        REMOTE_SVID_DIR,
        "--name",
        &svid.name,
    ]
    .map(str::to_owned)
    .to_vec();
    // Istio's CA takes the lifetime and the cluster with each request; Linkerd's decides.
    if service.protocol == IdentityProtocol::Istio {
        command.extend([
            "--ttl".into(),
            format!("{}s", svid.ttl.as_secs()),
            "--cluster-id".into(),
            service.cluster_id.clone(),
        ]);
    }
    let out = site
        .exec_ok(CHECKER_POD, command, REMOTE_SVID_TIMEOUT)
        .await?;
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| {
        Error::Probe(format!(
            "the mesh CA's answer for {} is not JSON ({e}): {}",
            svid.identity,
            String::from_utf8_lossy(&out.stdout)
        ))
    })?;
    answer["not_after"]
        .as_i64()
        .and_then(|t| time::OffsetDateTime::from_unix_timestamp(t).ok())
        .ok_or_else(|| Error::Probe(format!("no notAfter in {answer}")))
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
        match &self.guard {
            Guard::Sidecar { pod } => command.extend(["--sidecar".into(), pod.to_string()]),
            Guard::NamedSidecar { pod, server_name } => command.extend([
                "--sidecar".into(),
                pod.to_string(),
                "--expect-server-name".into(),
                server_name.clone(),
            ]),
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

/// How a probe's path is recorded on the cluster: `meshbench wire capture` exec'd in a pod.
struct Recording {
    /// The topology pod (or node agent pod) the capture is exec'd in.
    pod: String,
    /// How `meshbench wire capture` picks its interface.
    args: Vec<String>,
    description: String,
    /// Only the connections to this port are judged.
    only_to_port: Option<u16>,
}

/// How `place` is recorded for a path from `from` to `to`.
fn recording(
    site: &KubeSite<'_>,
    place: &CapturePlace,
    from: &TopologyPod,
    to: &TopologyPod,
    loopback_port: Option<u16>,
) -> Result<Recording, Error> {
    let address = |what: &str, ip: Option<IpAddr>| {
        ip.ok_or_else(|| Error::Probe(format!("the cluster gave {what} no address")))
    };
    let node = match place {
        CapturePlace::PodLoopback { pod } => {
            return Ok(Recording {
                pod: pod.clone(),
                args: vec!["--interface".into(), "lo".into()],
                description: match loopback_port {
                    Some(port) => format!(
                        "{pod}'s loopback, where its call to itself goes through the mesh's \
                         proxy in the pod's namespace (recorded inside the pod through the API \
                         server); judged: the connection between the proxy's two ends (port \
                         {port}), not the legs between the app and the proxy, which stay in \
                         the pod as a sidecar's do"
                    ),
                    None => format!(
                        "{pod}'s loopback, where its call to itself goes (recorded inside the \
                         pod through the API server); every connection judged: where the mesh \
                         takes its peers' connections in the pod is not known"
                    ),
                },
                only_to_port: loopback_port,
            })
        }
        CapturePlace::PodInterface { pod } => {
            return Ok(Recording {
                pod: pod.clone(),
                args: vec!["--interface".into(), POD_INTERFACE.into()],
                description: format!(
                    "{pod}'s pod interface ({POD_INTERFACE}, recorded inside the pod through \
                         the API server)"
                ),
                only_to_port: None,
            })
        }
        CapturePlace::NodeLink { node } | CapturePlace::NodeLoopback { node } => node,
    };
    let toward = address(&format!("{}'s node", to.name), site.host_ip(&to.name))?;
    let from_host = address(&format!("{}'s node", from.name), site.host_ip(&from.name))?;
    let between: Vec<IpAddr> = [
        Some(from_host),
        Some(toward),
        site.pod_ip(&from.name),
        site.pod_ip(&to.name),
    ]
    .into_iter()
    .flatten()
    .collect();
    Ok(Recording {
        pod: meshbench_kube::node_agent_pod(node),
        args: meshbench_kube::node_link_capture(toward, &between),
        description: match place {
            CapturePlace::NodeLoopback { .. } => format!(
                "{node}'s loopback, where its agent tunnels to itself (recorded in its node \
                     agent's pod)"
            ),
            _ => format!("{node}'s link toward {toward} (recorded in its node agent's pod)"),
        },
        only_to_port: None,
    })
}
