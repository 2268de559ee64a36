//! The Markdown report.

use std::fmt::Write;

use meshbench_results::{RunResult, VerifyReport};

use crate::glance::{Glance, TITLE as GLANCE};
use crate::tables::Table;
use crate::Analysis;

pub fn render_markdown(
    result: &RunResult,
    analysis: &Analysis,
    verification: Option<&VerifyReport>,
) -> String {
    let parts = crate::verify::run_report_parts(result, analysis, verification);
    let mut out = "# meshbench report\n\n".to_owned();
    write_glance(&mut out, &parts.glance);
    out.push_str("## The run\n\n");
    write_body(&mut out, &parts.header, &parts.tables);
    out
}

/// The plain sentences, then the verdict matrix.
pub(crate) fn write_glance(out: &mut String, glance: &Glance) {
    let _ = writeln!(out, "## {GLANCE}\n");
    for sentence in &glance.sentences {
        let _ = writeln!(out, "- {sentence}");
    }
    if let Some(matrix) = &glance.matrix {
        out.push('\n');
        write_table(out, matrix);
    }
    out.push('\n');
}

/// Tables alone, as the terminal shows them.
pub fn render_tables(tables: &[Table]) -> String {
    let mut out = String::new();
    for table in tables {
        write_table(&mut out, table);
        out.push('\n');
    }
    out
}

/// A Markdown page: a title, key-value lines, then the tables.
pub(crate) fn page(title: &str, header: &[(String, String)], tables: &[Table]) -> String {
    let mut out = format!("# {title}\n\n");
    write_body(&mut out, header, tables);
    out
}

fn write_body(out: &mut String, header: &[(String, String)], tables: &[Table]) {
    for (key, value) in header {
        let _ = writeln!(out, "- **{key}**: {value}");
    }
    for table in tables {
        out.push('\n');
        write_table(out, table);
    }
}

pub(crate) fn write_table(out: &mut String, table: &Table) {
    let _ = writeln!(out, "## {}\n", table.title);
    if !table.note.is_empty() {
        let _ = writeln!(out, "{}\n", table.note);
    }
    if table.rows.is_empty() {
        out.push_str("(no data)\n");
        return;
    }
    let _ = writeln!(out, "| {} |", table.headers.join(" | "));
    let _ = writeln!(out, "|{}", "---|".repeat(table.headers.len()));
    for row in &table.rows {
        let _ = writeln!(out, "| {} |", row.join(" | "));
    }
}
