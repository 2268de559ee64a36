//! The HTML report: one self-contained file (inline CSS, no scripts, no external resources)
//! that opens offline.

use std::fmt::Write;

use meshbench_results::{RunResult, VerifyReport};

use crate::glance::{Glance, TITLE as GLANCE};
use crate::tables::Table;
use crate::Analysis;

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:2rem;color:#222}\
table{border-collapse:collapse;margin:0.5rem 0 1.5rem}\
th,td{border:1px solid #ccc;padding:0.25rem 0.6rem;text-align:right}\
th{background:#f3f3f3}td:nth-child(-n+2),th:nth-child(-n+2){text-align:left}\
dt{font-weight:bold;float:left;clear:left;width:11rem}dd{margin-left:12rem}\
figure{margin:0 0 1.5rem}figcaption{color:#555;font-size:0.9rem}\
td.text{text-align:left;max-width:48rem}p.note{color:#555;max-width:60rem}\
ul.glance{max-width:60rem;line-height:1.5}\
td.held{background:#e3f4e3}td.did-not-hold{background:#f8dede}td.inconclusive{background:#fdf3d8}";

pub fn render_html(
    result: &RunResult,
    analysis: &Analysis,
    verification: Option<&VerifyReport>,
) -> String {
    let parts = crate::verify::run_report_parts(result, analysis, verification);
    let mut out = head(&format!("meshbench report: {}", result.config.profile));
    let _ = writeln!(out, "<h1>{}</h1>", escape("meshbench report"));
    out.push_str(&glance_html(
        &parts.glance,
        &crate::charts::charts(analysis),
    ));
    out.push_str("<h2>The run</h2>\n");
    write_body(&mut out, &parts.header, &parts.tables);
    out
}

/// The report's opening, as the HTML report and the web UI's run page show it: the plain
/// sentences, the verdict matrix, then the charts, what a reader looks at before the
/// numbers.
pub fn glance_html(glance: &Glance, charts: &[crate::Chart]) -> String {
    let mut out = format!(
        "<section id=\"at-a-glance\"><h2>{}</h2>\n<ul class=\"glance\">\n",
        escape(GLANCE)
    );
    for sentence in &glance.sentences {
        let _ = writeln!(out, "<li>{}</li>", escape(sentence));
    }
    out.push_str("</ul>\n");
    if let Some(matrix) = &glance.matrix {
        write_table(&mut out, matrix);
    }
    out.push_str("</section>\n");
    if !charts.is_empty() {
        out.push_str("<section id=\"charts\"><h2>Charts</h2>\n");
        for chart in charts {
            let _ = writeln!(
                out,
                "<figure>{}<figcaption>{}</figcaption></figure>",
                chart.svg,
                escape(&chart.title)
            );
        }
        out.push_str("</section>\n");
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
    let mut out = head(title);
    let _ = writeln!(out, "<h1>{}</h1>", escape(heading));
    write_body(&mut out, header, tables);
    out
}

/// The document up to the opening of its body.
fn head(title: &str) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>{}</title><style>{STYLE}</style></head><body>\n",
        escape(title)
    )
}

/// Key-value lines, the tables, and the end of the document.
fn write_body(out: &mut String, header: &[(String, String)], tables: &[Table]) {
    out.push_str("<dl>\n");
    for (key, value) in header {
        let _ = writeln!(out, "<dt>{}</dt><dd>{}</dd>", escape(key), escape(value));
    }
    out.push_str("</dl>\n");
    for table in tables {
        write_table(out, table);
    }
    out.push_str("</body></html>\n");
}

/// A table as the HTML report renders it (`meshbench serve` shows the same markup).
pub fn table_html(table: &Table) -> String {
    let mut out = String::new();
    write_table(&mut out, table);
    out
}

fn write_table(out: &mut String, table: &Table) {
    let _ = writeln!(out, "<h2>{}</h2>", escape(&table.title));
    if !table.note.is_empty() {
        let _ = writeln!(out, "<p class=\"note\">{}</p>", escape(&table.note));
    }
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

/// A verdict's colour (a bare verdict, or a verdict leading a matrix cell: "held: +0.1 ms"),
/// or prose aligned as text rather than as a figure.
fn cell_class(cell: &str) -> Option<&'static str> {
    let verdict = cell.split([':', ' ']).next().unwrap_or_default();
    match verdict {
        "held" => Some("held"),
        "did" if cell.starts_with("did not hold") => Some("did-not-hold"),
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
