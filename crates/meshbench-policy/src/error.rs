//! A policy that cannot be used is rejected with the rule and field at fault.

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read policy {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("policy is not valid YAML for meshbench: {0}")]
    Yaml(#[from] serde_yaml_ng::Error),
    #[error("{location}: {reason}")]
    Invalid { location: String, reason: String },
}

impl Error {
    pub(crate) fn invalid(location: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::Invalid {
            location: location.into(),
            reason: reason.into(),
        }
    }
}
