//! The verification run: for each mesh and each of E3's cases, a fresh netns lab with E3's
//! application, the mesh enrolling that case's workloads, every probe with its expectation,
//! observation and wire evidence, and (where everything is enrolled) the identity checks.
//! Every case's lab is torn down before the next starts.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use meshbench_lab::{BuildInfo, LabComponent, Readiness};
use meshbench_meshes::{enroll, LabContext, Mesh, MeshPki, ProxyArea};
use meshbench_netlab::{new_lab_id, Backend, LabNetwork, WireCapture};
use meshbench_policy::Policy;
use meshbench_results::{
    CaseVerification, MeshVerification, ProbeVerification, Verdict, VerifyReport, SCHEMA_VERSION,
};
use meshbench_role::RoleConfig;
use meshbench_topology::Pod;
use meshbench_workload::WorkloadFile;

use crate::e3::{self, SecurityCase, CASES, PROBES};
use crate::expect::{enforced_in_case, expect_through};
use crate::identity::{Guard, IdentityPlan, NodeAccess, ROTATION_TTL};
use crate::probe::run_probe;
use crate::wire::{capture_point, evidence, WireExpectation};
use crate::Error;

pub struct VerifyOptions {
    pub meshes: Vec<Mesh>,
    /// Where `verify.json`, the captures and the labs' files go.
    pub out_dir: PathBuf,
    /// The meshbench binary (apps and proxies are roles of it).
    pub exe: PathBuf,
    pub build: BuildInfo,
}

/// Runs every case for every mesh. `progress` gets one line per finished case.
pub async fn verify(
    options: &VerifyOptions,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<VerifyReport, Error> {
    meshbench_netlab::NetnsLab::check_permitted()?;
    let started_at = now();
    let policy_yaml = e3::zero_trust_policy();
    let policy = Policy::from_yaml(&policy_yaml)?;
    let mut meshes = vec![];
    for &mesh in &options.meshes {
        let dir = options.out_dir.join(mesh.name());
        let verification =
            match verify_mesh(mesh, &policy, &policy_yaml, options, &dir, progress).await {
                Ok(v) => v,
                Err(e) if e.is_unavailable() => not_verified(mesh, e.to_string()),
                Err(e) => return Err(e),
            };
        meshes.push(verification);
    }
    let passed = all_passed(&meshes);
    Ok(VerifyReport {
        schema_version: SCHEMA_VERSION,
        kind: "meshbench.verify".into(),
        started_at,
        finished_at: now(),
        environment: meshbench_lab::describe_environment(&options.build),
        platform: Some("local lab (netns)".into()),
        policy: policy_yaml,
        meshes,
        passed,
    })
}

async fn verify_mesh(
    mesh: Mesh,
    policy: &Policy,
    policy_yaml: &str,
    options: &VerifyOptions,
    dir: &std::path::Path,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<MeshVerification, Error> {
    mesh.binary().map_err(meshbench_meshes::Error::from)?;
    mesh.check_enrollable()?;
    let mut cases = vec![];
    let mut identity = vec![];
    let mut notes: Vec<String> = vec![];
    for case in &CASES {
        let case_dir = dir.join(format!("case-{}", case.number));
        let enforced = enforced_in_case(mesh, policy, case, &mut notes)?;
        let (verification, checks) =
            verify_case(mesh, case, &enforced, policy_yaml, options, &case_dir).await?;
        let failed = failures(&verification);
        progress(&format!(
            "{}: case {} ({}): {} probes, {failed} failed",
            mesh.name(),
            case.number,
            case.title,
            verification.probes.len()
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

async fn verify_case(
    mesh: Mesh,
    case: &SecurityCase,
    policy: &Policy,
    policy_yaml: &str,
    options: &VerifyOptions,
    dir: &std::path::Path,
) -> Result<(CaseVerification, Vec<meshbench_results::IdentityCheck>), Error> {
    std::fs::create_dir_all(dir).map_err(|source| Error::Io {
        path: dir.to_owned(),
        source,
    })?;
    let topology = e3::topology(case);
    let net = LabNetwork::create_off_runtime(Backend::Netns, &new_lab_id(), &topology).await?;
    let identity_checked = case.checks_identities(mesh);
    // Where identities are checked, SVIDs live seconds, so they rotate during the case
    // (unless the mesh's own CA signs them: it is rotated instead).
    let svid_ttl = (identity_checked && !mesh.renews_by_ca_rotation()).then_some(ROTATION_TTL);
    // The case's proxy files, where the proxy user can reach them (removed with it).
    let area = ProxyArea::create(dir)?;
    let cell_area = area.private_dir("case")?;
    let pki = MeshPki::create_with_ttl(&area, &topology, policy_yaml, svid_ttl)?;
    let lab = LabContext {
        net: &net,
        pki: &pki,
        exe: &options.exe,
        work_dir: dir,
        area: &area,
        cell_area: &cell_area,
        cgroups: None,
        sut_cpus: None,
        wire: None,
    };
    let mut components = vec![];
    for pod in topology.pods() {
        components.push(start_app(&lab, &pod, options).await?);
    }
    components.extend(enroll(mesh, &lab).await?);

    let mut probes = vec![];
    for (i, probe) in PROBES.iter().enumerate() {
        let source_ip = topology
            .first_pod(probe.from)
            .and_then(|p| net.pod_ip(&p.name).ok());
        let expected = expect_through(mesh, policy, probe, case.meshed, source_ip);
        let marker = format!("mb-verify-marker-{}-{}-{i}", mesh.name(), case.number);
        let enrolled = |w: &str| case.meshed.contains(&w);
        let both_enrolled = enrolled(probe.from) && enrolled(probe.to);
        let (netns, interface, point, path) = capture_point(&net, probe, mesh, both_enrolled)?;
        let capture = WireCapture::start(
            &netns,
            &interface,
            &dir.join(format!("probe-{i}-{}-{}.pcap", probe.from, probe.to)),
        )?;
        let observed = run_probe(&net, probe, &marker)?;
        let report = capture.finish(marker.as_bytes())?;
        let expectation = WireExpectation::of(mesh, both_enrolled, path == "same-node");
        let wire = evidence(
            &report,
            point,
            path,
            &marker,
            expectation,
            observed.allowed(),
        );
        probes.push(probe_verdict(probe, expected, observed, wire));
    }
    let mut checks = vec![];
    if identity_checked {
        let plan = IdentityPlan::prepare(mesh, &pki, &dir.join("identity"), pki.svid_ttl)?;
        let access = NodeAccess {
            net: &net,
            guard: Guard::of(mesh, &net)?,
        };
        let ca_rotation = mesh.renews_by_ca_rotation().then(|| mesh.rotate_ca(&lab));
        checks = plan.run(&access, ca_rotation).await?;
    }
    for component in components {
        component.stop(Duration::from_secs(2)).await;
    }
    if let Err(e) = meshbench_meshes::collect_outputs(&cell_area, dir) {
        tracing::warn!(error = %e, "the proxies' outputs were not all copied into the results");
    }
    drop(net);
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

/// A probe's verification: what the policy expects, what was observed, and the wire.
pub(crate) fn probe_verdict(
    probe: &e3::Probe,
    expected: crate::Expectation,
    observed: crate::probe::Observation,
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
pub(crate) fn not_verified(mesh: Mesh, why: String) -> MeshVerification {
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
pub(crate) fn all_passed(meshes: &[MeshVerification]) -> bool {
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
pub(crate) fn failures(case: &CaseVerification) -> usize {
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

async fn start_app(
    lab: &LabContext<'_>,
    pod: &Pod,
    options: &VerifyOptions,
) -> Result<LabComponent, Error> {
    let file = e3::app_file(&pod.workload.name);
    let args =
        WorkloadFile::command_line(&lab.write(&format!("{}-app.yaml", pod.name), &file.to_yaml())?);
    let launch = lab.app_launch(pod, None)?;
    Ok(LabComponent::start(
        &pod.name,
        "app",
        &launch,
        &options.exe,
        &args,
        Readiness::ReadyLine,
        Duration::from_secs(20),
    )
    .await?)
}

fn now() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}
