//! String patterns of the policy language: exact, `*`, `prefix*` and `*suffix`.

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pattern {
    Any,
    Exact(String),
    Prefix(String),
    Suffix(String),
}

impl Pattern {
    /// `None` for a pattern with a `*` anywhere but at one end.
    pub fn parse(text: &str) -> Option<Pattern> {
        if text == "*" {
            return Some(Pattern::Any);
        }
        let stars = text.matches('*').count();
        match stars {
            0 if !text.is_empty() => Some(Pattern::Exact(text.to_owned())),
            1 if text.ends_with('*') => {
                Some(Pattern::Prefix(text.trim_end_matches('*').to_owned()))
            }
            1 if text.starts_with('*') => {
                Some(Pattern::Suffix(text.trim_start_matches('*').to_owned()))
            }
            _ => None,
        }
    }

    pub fn matches(&self, value: &str) -> bool {
        match self {
            Pattern::Any => true,
            Pattern::Exact(p) => value == p,
            Pattern::Prefix(p) => value.starts_with(p.as_str()),
            Pattern::Suffix(s) => value.ends_with(s.as_str()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_only_at_one_end() {
        assert!(Pattern::parse("*").unwrap().matches("anything"));
        assert!(Pattern::parse("/api/*").unwrap().matches("/api/v1"));
        assert!(!Pattern::parse("/api/*").unwrap().matches("/apx"));
        assert!(Pattern::parse("*.json").unwrap().matches("/a.json"));
        assert!(Pattern::parse("/add").unwrap().matches("/add"));
        assert!(!Pattern::parse("/add").unwrap().matches("/add/"));
        assert_eq!(Pattern::parse("/a*b"), None);
        assert_eq!(Pattern::parse("*a*"), None);
        assert_eq!(Pattern::parse(""), None);
    }
}
