//! A table as the reports show it, whatever the format (terminal, Markdown, HTML, CSV).

#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    pub title: String,
    pub headers: Vec<String>,
    pub rows: Vec<Vec<String>>,
}
