//! The verification report (`verify.md`, `verify.html`): per mesh and case, every probe's
//! expected and observed outcome with its verdict and wire evidence, then the identity
//! checks. Rendered through the same table model as run reports.

use meshbench_results::{
    MeshVerification, ProbeVerification, RunResult, Verdict, VerifyReport, WireEvidence,
};

use crate::tables::Table;
use crate::Analysis;

pub fn verify_header(report: &VerifyReport) -> Vec<(String, String)> {
    let mut lines = vec![
        (
            "verdict".to_owned(),
            if report.passed { "PASS" } else { "FAIL" }.to_owned(),
        ),
        ("started".to_owned(), report.started_at.clone()),
        ("machine".to_owned(), report.environment.hostname.clone()),
    ];
    if let Some(platform) = &report.platform {
        lines.push(("platform".to_owned(), platform.clone()));
    }
    lines.extend([(
        "policy".to_owned(),
        "STRICT mTLS in namespace app; other namespaces denied; only app/experimenter may \
             call the calculator (E3's rules; verify.json holds the YAML)"
            .to_owned(),
    )]);
    for mesh in &report.meshes {
        if let Some(error) = &mesh.error {
            lines.push((mesh.mesh.clone(), format!("not verified: {error}")));
        }
        for note in &mesh.notes {
            lines.push((mesh.mesh.clone(), note.clone()));
        }
    }
    lines
}

/// A run report's header and tables, with the run's verification added if it has one: its
/// verdict as a header line, its tables after the run's, titled as verification.
/// A run's report before it is rendered: the glance, the run's facts, then every table.
pub(crate) struct ReportParts {
    pub glance: crate::glance::Glance,
    pub header: Vec<(String, String)>,
    pub tables: Vec<Table>,
}

pub(crate) fn run_report_parts(
    result: &RunResult,
    analysis: &Analysis,
    verification: Option<&VerifyReport>,
) -> ReportParts {
    let mut glance = crate::glance::glance(result, analysis);
    let mut header = crate::tables::header_lines(result);
    let mut tables = crate::tables::report_tables(result, analysis);
    let Some(report) = verification else {
        return ReportParts {
            glance,
            header,
            tables,
        };
    };
    glance.sentences.push(format!(
        "Verification {} for {} (E3's zero-trust matrix, wire evidence and identity checks).",
        if report.passed { "passed" } else { "FAILED" },
        report
            .meshes
            .iter()
            .map(|m| m.mesh.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    ));
    let meshes: Vec<&str> = report.meshes.iter().map(|m| m.mesh.as_str()).collect();
    header.push((
        "verification".to_owned(),
        format!(
            "{} for {} (E3's zero-trust matrix, wire evidence and identity checks; \
             verify/verify.json)",
            if report.passed { "PASS" } else { "FAIL" },
            meshes.join(", ")
        ),
    ));
    header.extend(
        verify_header(report)
            .into_iter()
            .filter(|(key, _)| meshes.contains(&key.as_str()))
            .map(|(key, value)| (format!("verification of {key}"), value)),
    );
    tables.extend(verify_tables(report).into_iter().map(|mut table| {
        table.title = format!("Verification, {}", table.title);
        table
    }));
    ReportParts {
        glance,
        header,
        tables,
    }
}

pub fn verify_tables(report: &VerifyReport) -> Vec<Table> {
    let mut tables = vec![verdicts_at_a_glance(report)];
    for mesh in report.meshes.iter().filter(|m| m.error.is_none()) {
        for case in &mesh.cases {
            let meshed = if case.meshed.is_empty() {
                "none".to_owned()
            } else {
                case.meshed.join(", ")
            };
            tables.push(Table {
                title: format!(
                    "{}: case {}, {} (enrolled: {meshed})",
                    mesh.mesh, case.case, case.title
                ),
                note: String::new(),
                headers: [
                    "from -> to",
                    "request",
                    "expected",
                    "observed",
                    "verdict",
                    "on the wire",
                    "note",
                ]
                .map(str::to_owned)
                .to_vec(),
                rows: case.probes.iter().map(probe_row).collect(),
            });
        }
        // Identity checks are made only where every member is enrolled: no empty table
        // where the mesh's notes explain their absence.
        if !mesh.identity.is_empty() || mesh.notes.is_empty() {
            tables.push(identity_table(mesh));
        }
    }
    tables
}

/// One row per mesh: each case's probes passed of those made, the identity checks, and what
/// crossed the wire encrypted where encryption was expected; the tables after it have every
/// probe.
fn verdicts_at_a_glance(report: &VerifyReport) -> Table {
    let cases: Vec<(u32, String)> = {
        let mut cases: Vec<(u32, String)> = report
            .meshes
            .iter()
            .flat_map(|m| m.cases.iter().map(|c| (c.case, c.title.clone())))
            .collect();
        cases.sort();
        cases.dedup_by_key(|(case, _)| *case);
        cases
    };
    let mut headers = vec!["mesh".to_owned()];
    headers.extend(
        cases
            .iter()
            .map(|(case, title)| format!("case {case}: {title}")),
    );
    headers.extend(["identity checks", "encrypted where expected", "verdict"].map(String::from));
    let count = |passed: usize, total: usize| {
        if passed == total {
            format!("{passed}/{total}")
        } else {
            format!("{passed}/{total} (FAIL)")
        }
    };
    let rows = report
        .meshes
        .iter()
        .map(|mesh| {
            let mut row = vec![mesh.mesh.clone()];
            if let Some(error) = &mesh.error {
                row.extend(cases.iter().map(|_| "-".to_owned()));
                row.extend(["-".to_owned(), "-".to_owned()]);
                row.push(format!("not verified: {error}"));
                return row;
            }
            let mut all_passed = true;
            for (case, _) in &cases {
                let probes: Vec<&ProbeVerification> = mesh
                    .cases
                    .iter()
                    .filter(|c| c.case == *case)
                    .flat_map(|c| &c.probes)
                    .collect();
                let passed = probes.iter().filter(|p| probe_passed(p)).count();
                all_passed &= passed == probes.len();
                row.push(if probes.is_empty() {
                    "-".to_owned()
                } else {
                    count(passed, probes.len())
                });
            }
            let identity_passed = mesh
                .identity
                .iter()
                .filter(|c| c.verdict == Verdict::Pass)
                .count();
            all_passed &= identity_passed == mesh.identity.len();
            row.push(if mesh.identity.is_empty() && mesh.notes.is_empty() {
                "none made".to_owned()
            } else if mesh.identity.is_empty() {
                "not made (see the notes)".to_owned()
            } else {
                count(identity_passed, mesh.identity.len())
            });
            let expected: Vec<&WireEvidence> = mesh
                .cases
                .iter()
                .flat_map(|c| &c.probes)
                .filter_map(|p| p.wire.as_ref())
                .filter(|w| w.encryption_expected)
                .collect();
            let encrypted = expected
                .iter()
                .filter(|w| w.verdict == Verdict::Pass)
                .count();
            row.push(if expected.is_empty() {
                "none expected".to_owned()
            } else {
                count(encrypted, expected.len())
            });
            row.push(if all_passed { "pass" } else { "FAIL" }.to_owned());
            row
        })
        .collect();
    Table {
        title: "Verdicts at a glance".to_owned(),
        note: "Per mesh, the probes of each enrollment case that behaved as the policy says \
               (allowed or denied, and encrypted where both ends are enrolled), the identity \
               checks against the calculator's proxy, and the probes whose traffic crossed the \
               wire encrypted where it should. `baseline` enrolls nothing, so it is the \
               negative control: it should fail wherever the policy denies."
            .to_owned(),
        headers,
        rows,
    }
}

fn probe_passed(p: &ProbeVerification) -> bool {
    let wire_failed = p.wire.as_ref().is_some_and(|w| w.verdict == Verdict::Fail);
    p.verdict == Verdict::Pass && !wire_failed
}

fn probe_row(p: &ProbeVerification) -> Vec<String> {
    let verdict = if probe_passed(p) { "pass" } else { "FAIL" };
    vec![
        format!("{} -> {}", p.from, p.to),
        p.request.clone(),
        format!(
            "{} ({})",
            if p.expected_allowed {
                "allowed"
            } else {
                "denied"
            },
            p.expected_reason
        ),
        p.observed.clone(),
        verdict.to_owned(),
        p.wire.as_ref().map(wire_cell).unwrap_or_default(),
        notes(p),
    ]
}

/// The probe's note, and the wire's unless it only confirms encryption.
fn notes(p: &ProbeVerification) -> String {
    let wire_note = p
        .wire
        .as_ref()
        .filter(|w| !(w.encryption_expected && w.verdict == Verdict::Pass))
        .and_then(|w| w.note.clone());
    [p.note.clone(), wire_note]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join("; ")
}

fn wire_cell(w: &WireEvidence) -> String {
    let mut text = format!("{}: {}/{} TLS", w.path, w.tls_connections, w.connections);
    if !w.tls_versions.is_empty() {
        text.push_str(&format!(" {}", w.tls_versions.join(",")));
    }
    if !w.cipher_suites.is_empty() {
        text.push_str(&format!(" {}", w.cipher_suites.join(",")));
    }
    text.push_str(if w.marker_seen {
        ", marker in clear"
    } else {
        ", marker not seen"
    });
    if w.verdict == Verdict::Fail {
        text.push_str(" (FAIL)");
    }
    text
}

fn identity_table(mesh: &MeshVerification) -> Table {
    Table {
        title: format!(
            "{}: identity checks against the calculator's proxy",
            mesh.mesh
        ),
        note: String::new(),
        headers: [
            "check",
            "expected",
            "observed",
            "server identity",
            "verdict",
        ]
        .map(str::to_owned)
        .to_vec(),
        rows: mesh
            .identity
            .iter()
            .map(|c| {
                vec![
                    format!("{}: {}", c.name, c.description),
                    c.expected.clone(),
                    c.observed.clone(),
                    c.server_id.clone().unwrap_or_else(|| "-".into()),
                    if c.verdict == Verdict::Pass {
                        "pass"
                    } else {
                        "FAIL"
                    }
                    .to_owned(),
                ]
            })
            .collect(),
    }
}
