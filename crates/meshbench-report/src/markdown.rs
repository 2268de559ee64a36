//! The Markdown report.

use std::fmt::Write;

use meshbench_results::{RunResult, VerifyReport};

use crate::tables::Table;
use crate::Analysis;

pub fn render_markdown(
    result: &RunResult,
    analysis: &Analysis,
    verification: Option<&VerifyReport>,
) -> String {
    let (header, tables) = crate::verify::run_report_parts(result, analysis, verification);
    page("meshbench report", &header, &tables)
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
    for (key, value) in header {
        let _ = writeln!(out, "- **{key}**: {value}");
    }
    for table in tables {
        out.push('\n');
        write_table(&mut out, table);
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
