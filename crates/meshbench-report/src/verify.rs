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
    let mut tables = vec![];
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

fn probe_row(p: &ProbeVerification) -> Vec<String> {
    let wire_failed = p.wire.as_ref().is_some_and(|w| w.verdict == Verdict::Fail);
    let verdict = if p.verdict == Verdict::Pass && !wire_failed {
        "pass"
    } else {
        "FAIL"
    };
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
