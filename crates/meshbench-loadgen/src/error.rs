//! Errors that stop a load run before it starts. Failures of individual requests are not
//! errors: they are outcomes, counted by class.

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid --url {url:?}: {reason}")]
    InvalidUrl { url: String, reason: String },
    #[error("invalid {field} {value}: {reason}")]
    InvalidConfig {
        field: &'static str,
        value: String,
        reason: String,
    },
    #[error("{url} uses https but no TLS client configuration was given (--cacert)")]
    TlsRequired { url: String },
    #[error("cannot resolve {host}: {source}")]
    Resolve {
        host: String,
        source: std::io::Error,
    },
    #[error("cannot start the load generator runtime: {0}")]
    Runtime(std::io::Error),
}

impl meshbench_role::InputFault for Error {
    fn is_bad_input(&self) -> bool {
        !matches!(self, Error::Runtime(_))
    }
}
