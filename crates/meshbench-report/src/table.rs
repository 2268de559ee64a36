//! A table as the reports show it, whatever the format (terminal, Markdown, HTML, CSV).

#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    /// The heading: a few words a reader scans for.
    pub title: String,
    /// How the figures were made and how to read them, shown under the heading; empty when
    /// the heading says enough.
    pub note: String,
    pub headers: Vec<String>,
    pub rows: Vec<Vec<String>>,
}
