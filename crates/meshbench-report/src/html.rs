//! The HTML report: one self-contained file (inline CSS, no scripts, no external resources)
//! that opens offline.

use std::fmt::Write;

use meshbench_results::{RunResult, VerifyReport};

use crate::tables::Table;
use crate::Analysis;

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:2rem;color:#222}\
table{border-collapse:collapse;margin:0.5rem 0 1.5rem}\
th,td{border:1px solid #ccc;padding:0.25rem 0.6rem;text-align:right}\
th{background:#f3f3f3}td:nth-child(-n+2),th:nth-child(-n+2){text-align:left}\
dt{font-weight:bold;float:left;clear:left;width:11rem}dd{margin-left:12rem}\
figure{margin:0 0 1.5rem}figcaption{color:#555;font-size:0.9rem}\
td.text{text-align:left;max-width:48rem}\
td.held{background:#e3f4e3}td.did-not-hold{background:#f8dede}td.inconclusive{background:#fdf3d8}";

pub fn render_html(
    result: &RunResult,
    analysis: &Analysis,
    verification: Option<&VerifyReport>,
) -> String {
    let (header, tables) = crate::verify::run_report_parts(result, analysis, verification);
    let charts = crate::charts::charts(analysis);
    let mut out = page(
        &format!("meshbench report: {}", result.config.profile),
        "meshbench report",
        &header,
        &tables,
    );
    // Charts first, after the description and the study's findings: what a reader looks at
    // before the numbers.
    let mut figures = String::from("<h2>Charts</h2>\n");
    for chart in &charts {
        let _ = writeln!(
            figures,
            "<figure>{}<figcaption>{}</figcaption></figure>",
            chart.svg,
            escape(&chart.title)
        );
    }
    let mut at = out.find("</dl>\n").map(|at| at + "</dl>\n".len());
    if tables
        .first()
        .is_some_and(|t| t.title.starts_with(crate::findings::TITLE))
    {
        const END: &str = "</table>\n";
        at = at.and_then(|from| out[from..].find(END).map(|end| from + end + END.len()));
    }
    if let Some(at) = at {
        out.insert_str(at, &figures);
    }
    out
}

/// A self-contained HTML page: a heading, key-value lines, then the tables.
pub(crate) fn page(
    title: &str,
    heading: &str,
    header: &[(String, String)],
    tables: &[Table],
) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>{}</title><style>{STYLE}</style></head><body>\n\
         <h1>{}</h1>\n<dl>\n",
        escape(title),
        escape(heading)
    );
    for (key, value) in header {
        let _ = writeln!(out, "<dt>{}</dt><dd>{}</dd>", escape(key), escape(value));
    }
    out.push_str("</dl>\n");
    for table in tables {
        write_table(&mut out, table);
    }
    out.push_str("</body></html>\n");
    out
}

/// A table as the HTML report renders it (`meshbench serve` shows the same markup).
pub fn table_html(table: &Table) -> String {
    let mut out = String::new();
    write_table(&mut out, table);
    out
}

fn write_table(out: &mut String, table: &Table) {
    let _ = writeln!(out, "<h2>{}</h2>", escape(&table.title));
    if table.rows.is_empty() {
        out.push_str("<p>(no data)</p>\n");
        return;
    }
    out.push_str("<table><thead><tr>");
    for h in &table.headers {
        let _ = write!(out, "<th>{}</th>", escape(h));
    }
    out.push_str("</tr></thead><tbody>\n");
    for row in &table.rows {
        out.push_str("<tr>");
        for cell in row {
            let _ = match cell_class(cell) {
                Some(class) => write!(out, "<td class=\"{class}\">{}</td>", escape(cell)),
                None => write!(out, "<td>{}</td>", escape(cell)),
            };
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody></table>\n");
}

/// A verdict's colour, or prose aligned as text rather than as a figure.
fn cell_class(cell: &str) -> Option<&'static str> {
    match cell {
        "held" => Some("held"),
        "did not hold" => Some("did-not-hold"),
        "inconclusive" => Some("inconclusive"),
        _ if cell.len() > 24 && cell.contains(' ') => Some("text"),
        _ => None,
    }
}

/// Text made safe for HTML content and quoted attributes.
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}
