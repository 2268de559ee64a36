//! The verification, one flow for every platform: for each mesh and each of E3's cases, a
//! fresh site with E3's application and the case's workloads enrolled, every probe with its
//! expectation (from the policy the mesh enforces), its observation (made from inside the
//! calling pod) and its wire evidence, then, where everything is enrolled, the identity
//! checks. Each case's site is finished before the next starts, however the case ended.
//!
//! What a platform does is behind [`Verifier`] (where cases happen, and which meshes can be
//! verified there) and [`CaseSite`] (one case: its pods, where a probe's path can be
//! recorded, the probe itself, the identity checks). The local lab (`local.rs`) and a cluster
//! (`cluster.rs`) implement them; nothing here knows which one runs.

use std::net::IpAddr;
use std::path::Path;
use std::time::SystemTime;

use meshbench_lab::BuildInfo;
use meshbench_meshes::Scenario;
use meshbench_netlab::WireReport;
use meshbench_policy::Policy;
use meshbench_results::{
    CaseVerification, IdentityCheck, MeshVerification, ProbeVerification, Verdict, VerifyReport,
    SCHEMA_VERSION,
};
use meshbench_topology::{Pod, Topology};

use crate::e3::{self, Probe, SecurityCase, CASES, PROBES};
use crate::expect::{enforced_in_case, expect_through, Expectation};
use crate::identity::IdentityPlan;
use crate::probe::Observation;
use crate::wire::{evidence, WireExpectation};
use crate::Error;

/// Where a probe's path is recorded, as the platform can reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CapturePlace {
    /// A pod's own interface, which every byte to or from the pod crosses.
    PodInterface { pod: String },
    /// A node's link toward another node: what crosses between the nodes.
    NodeLink { node: String },
    /// A node's loopback, where its agent tunnels to itself.
    NodeLoopback { node: String },
    /// A pod's loopback: where a pod's call to itself goes when the mesh's proxy works in
    /// the pod's own network namespace (ambient's in-pod redirection).
    // Made by the cluster's checks only.
    #[cfg_attr(not(feature = "kubernetes"), allow(dead_code))]
    PodLoopback { pod: String },
}

/// What a probe showed: the calling app's report, and the capture of its path.
pub(crate) struct ProbeRecord {
    pub observation: Observation,
    pub wire: WireReport,
    /// Where the capture was made, in words for the report.
    pub capture_point: String,
}

/// A platform where verification cases happen.
pub(crate) trait Verifier {
    type Case<'a>: CaseSite
    where
        Self: 'a;

    /// The platform, for the report.
    fn name(&self) -> String;

    /// Whether `mesh` can be verified here: an error that [`Error::is_unavailable`] reports
    /// the mesh as not verified, with the reason; any other ends the verification.
    fn admit(&self, mesh: Scenario) -> Result<(), Error>;

    /// What the report should say about verifying `mesh` here.
    fn notes(&self, mesh: Scenario) -> Vec<String>;

    /// The policy `mesh` enforces here for `topology`, which the expectations follow: as the
    /// mesh reads it, unless this platform runs an installation of its own (see the cluster's).
    fn enforced_policy(
        &self,
        mesh: Scenario,
        policy: &meshbench_policy::Policy,
        topology: &Topology,
    ) -> Result<meshbench_meshes::EnforcedPolicy, meshbench_meshes::Error> {
        mesh.enforced_policy(policy, topology)
    }

    /// A site for `case`'s topology, its files in `dir` (nothing started yet).
    async fn open<'a>(
        &'a self,
        mesh: Scenario,
        case: &SecurityCase,
        topology: &Topology,
        dir: &Path,
    ) -> Result<Self::Case<'a>, Error>;
}

/// One case's site.
pub(crate) trait CaseSite {
    /// Whether the identity checks can be made here, for the mesh the site was opened for
    /// (where E3's case calls for them).
    fn checks_identities(&self) -> bool {
        true
    }

    /// Starts E3's application and has `mesh` enroll the case's workloads, ready for probes;
    /// `identities`: the case's identities will be checked (their SVIDs rotate meanwhile).
    async fn start(
        &mut self,
        mesh: Scenario,
        case: &SecurityCase,
        identities: bool,
    ) -> Result<(), Error>;

    /// Where the platform put `pod`: its address and its node.
    fn pod_ip(&self, pod: &Pod) -> Option<IpAddr>;
    fn node_of(&self, pod: &Pod) -> Option<String>;

    /// Where a path from `from` to `to` can be recorded showing what the mesh does to it
    /// (`agent_carries`: a node agent carries it, to another node or to itself).
    fn capture_place(
        &self,
        from: &Pod,
        to: &Pod,
        same_node: bool,
        agent_carries: bool,
    ) -> CapturePlace;

    /// Records `place` while `from`'s own app makes `probe` with `marker` in it; the capture
    /// is kept at `pcap`.
    async fn probe(
        &self,
        place: &CapturePlace,
        path: (&Pod, &Pod),
        probe: &Probe,
        marker: &str,
        pcap: &Path,
    ) -> Result<ProbeRecord, Error>;

    /// The identity checks' certificates for `mesh`, made in `dir`.
    async fn identity_plan(&mut self, mesh: Scenario, dir: &Path) -> Result<IdentityPlan, Error>;

    /// Runs the identity checks against the calculator's guard (completing `plan` with what
    /// only the place the checks run from can make).
    async fn check_identities(
        &mut self,
        mesh: Scenario,
        plan: &mut IdentityPlan,
    ) -> Result<Vec<IdentityCheck>, Error>;

    /// Stops and removes everything the case started, keeping its outputs in its directory.
    async fn finish(self);
}

/// Verifies `meshes` on `platform` against `policy_yaml` (a policy over E3's application),
/// into `out_dir`. `progress` gets one line per case.
pub(crate) async fn verify_with<V: Verifier>(
    platform: &V,
    meshes: &[Scenario],
    policy_yaml: &str,
    out_dir: &Path,
    build: &BuildInfo,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<VerifyReport, Error> {
    let started_at = now();
    let policy = Policy::from_yaml(policy_yaml)?;
    let mut verified = vec![];
    for &mesh in meshes {
        let dir = out_dir.join(mesh.name());
        let verification = match verify_mesh(platform, mesh, &policy, &dir, progress).await {
            Ok(v) => v,
            Err(e) if e.is_unavailable() => not_verified(mesh, e.to_string()),
            Err(e) => return Err(e),
        };
        verified.push(verification);
    }
    let passed = all_passed(&verified);
    Ok(VerifyReport {
        schema_version: SCHEMA_VERSION,
        kind: "meshbench.verify".into(),
        started_at,
        finished_at: now(),
        environment: meshbench_lab::describe_environment(build),
        platform: Some(platform.name()),
        policy: policy_yaml.to_owned(),
        meshes: verified,
        passed,
    })
}

async fn verify_mesh<V: Verifier>(
    platform: &V,
    mesh: Scenario,
    policy: &Policy,
    dir: &Path,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<MeshVerification, Error> {
    platform.admit(mesh)?;
    let mut cases = vec![];
    let mut identity = vec![];
    let mut notes = platform.notes(mesh);
    for case in &CASES {
        let case_dir = dir.join(format!("case-{}", case.number));
        let enforced = enforced_in_case(
            platform.enforced_policy(mesh, policy, &e3::topology(case))?,
            &mut notes,
        );
        let (verification, checks) =
            verify_case(platform, mesh, case, &enforced, &case_dir).await?;
        progress(&format!(
            "{}: case {} ({}): {} probes, {} failed",
            mesh.name(),
            case.number,
            case.title,
            verification.probes.len(),
            failures(&verification)
        ));
        cases.push(verification);
        identity.extend(checks);
    }
    Ok(MeshVerification {
        mesh: mesh.name().into(),
        description: mesh.description().to_owned(),
        cases,
        identity,
        error: None,
        notes,
    })
}

/// One case on its own site, finished before the next case starts, whether it passed,
/// failed or could not run.
async fn verify_case<V: Verifier>(
    platform: &V,
    mesh: Scenario,
    case: &SecurityCase,
    policy: &Policy,
    dir: &Path,
) -> Result<(CaseVerification, Vec<IdentityCheck>), Error> {
    std::fs::create_dir_all(dir).map_err(|source| Error::Io {
        path: dir.to_owned(),
        source,
    })?;
    let topology = e3::topology(case);
    let mut site = platform.open(mesh, case, &topology, dir).await?;
    let outcome = run_case(&mut site, &topology, mesh, case, policy, dir).await;
    site.finish().await;
    outcome
}

async fn run_case<S: CaseSite>(
    site: &mut S,
    topology: &Topology,
    mesh: Scenario,
    case: &SecurityCase,
    policy: &Policy,
    dir: &Path,
) -> Result<(CaseVerification, Vec<IdentityCheck>), Error> {
    let identities = case.checks_identities(mesh) && site.checks_identities();
    site.start(mesh, case, identities).await?;
    let mut probes = vec![];
    // The experimenter's call to the calculator as the policy in force decides it: what the
    // identity check presenting the experimenter's SVID should get.
    let mut experimenter_allowed = true;
    for (i, probe) in PROBES.iter().enumerate() {
        let (from, to) = (e3_pod(topology, probe.from)?, e3_pod(topology, probe.to)?);
        let expected = expect_through(mesh, policy, probe, case.meshed, site.pod_ip(&from));
        if (probe.from, probe.to) == (e3::EXPERIMENTER, e3::CALCULATOR) {
            experimenter_allowed = expected.allowed;
        }
        let marker = format!("mb-verify-marker-{}-{}-{i}", mesh.name(), case.number);
        let both_enrolled = case.meshed.contains(&probe.from) && case.meshed.contains(&probe.to);
        let same_node = site.node_of(&from) == site.node_of(&to);
        let agent_carries = mesh.enrollment() == meshbench_meshes::Enrollment::AgentPerNode
            && both_enrolled
            && (!same_node || mesh.tunnels_within_node());
        let place = site.capture_place(&from, &to, same_node, agent_carries);
        let pcap = dir.join(format!("probe-{i}-{}-{}.pcap", probe.from, probe.to));
        let record = site
            .probe(&place, (&from, &to), probe, &marker, &pcap)
            .await?;
        let wire = evidence(
            &record.wire,
            record.capture_point,
            if same_node { "same-node" } else { "inter-node" },
            &marker,
            WireExpectation::of(mesh, both_enrolled, same_node, from == to),
            record.observation.allowed(),
        );
        probes.push(probe_verdict(probe, expected, record.observation, wire));
    }
    let mut checks = vec![];
    if identities {
        // Made once the mesh runs: a control plane with a CA of its own has made it by now.
        let mut plan = site.identity_plan(mesh, &dir.join("identity")).await?;
        if !experimenter_allowed {
            plan.expect_valid_identity(
                false,
                "the experimenter's SVID: a caller the policy does not allow to call the \
                 calculator's POST /add",
            );
        }
        checks = site.check_identities(mesh, &mut plan).await?;
    }
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

/// The pod of E3's `workload` (each has one).
pub(crate) fn e3_pod(topology: &Topology, workload: &str) -> Result<Pod, Error> {
    topology
        .first_pod(workload)
        .ok_or_else(|| Error::Probe(format!("no pod for {workload}")))
}

/// A probe's verification: what the policy expects, what was observed, and the wire.
fn probe_verdict(
    probe: &Probe,
    expected: Expectation,
    observed: Observation,
    wire: meshbench_results::WireEvidence,
) -> ProbeVerification {
    let observed_allowed = observed.allowed();
    let note = denial_note(expected.allowed, observed_allowed, &observed.outcome);
    ProbeVerification {
        from: probe.from.into(),
        to: probe.to.into(),
        request: format!("{} {}", probe.method, probe.path),
        expected_allowed: expected.allowed,
        expected_reason: expected.reason,
        observed: observed.outcome,
        observed_allowed,
        verdict: if expected.allowed == observed_allowed {
            Verdict::Pass
        } else {
            Verdict::Fail
        },
        note,
        wire: Some(wire),
    }
}

/// A mesh that could not be verified, and why (nothing else is reported for it).
fn not_verified(mesh: Scenario, why: String) -> MeshVerification {
    MeshVerification {
        mesh: mesh.name().into(),
        description: mesh.description().to_owned(),
        cases: vec![],
        identity: vec![],
        error: Some(why),
        notes: vec![],
    }
}

/// Whether every verdict of every mesh passed.
fn all_passed(meshes: &[MeshVerification]) -> bool {
    meshes.iter().all(|m| {
        m.error.is_none()
            && m.cases.iter().flat_map(|c| &c.probes).all(|p| {
                p.verdict == Verdict::Pass
                    && p.wire.as_ref().is_none_or(|w| w.verdict == Verdict::Pass)
            })
            && m.identity.iter().all(|i| i.verdict == Verdict::Pass)
    })
}

/// The number of failed verdicts (request or wire) of a case.
fn failures(case: &CaseVerification) -> usize {
    case.probes
        .iter()
        .filter(|p| {
            p.verdict == Verdict::Fail
                || p.wire.as_ref().is_some_and(|w| w.verdict == Verdict::Fail)
        })
        .count()
}

/// E3 saw denials arrive as connection errors where a 403 was due; say which form it took.
fn denial_note(expected_allowed: bool, observed_allowed: bool, outcome: &str) -> Option<String> {
    match (expected_allowed, observed_allowed) {
        (false, true) => Some("allowed although the policy denies it".into()),
        (true, false) => Some(format!("denied ({outcome}) although the policy allows it")),
        (false, false) if outcome != "http_403" => Some(format!(
            "denied at the connection ({outcome}), not with an HTTP 403"
        )),
        _ => None,
    }
}

fn now() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}
