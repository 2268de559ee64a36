//! The Markdown report.

use std::fmt::Write;

use meshbench_results::RunResult;

use crate::tables::{self, Table};

pub fn render_markdown(result: &RunResult) -> String {
    let mut out = String::from("# meshbench report\n\n");
    for (key, value) in tables::header_lines(result) {
        let _ = writeln!(out, "- **{key}**: {value}");
    }
    for table in tables::report_tables(result) {
        out.push('\n');
        write_table(&mut out, &table);
    }
    out
}

pub(crate) fn write_table(out: &mut String, table: &Table) {
    let _ = writeln!(out, "## {}\n", table.title);
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
