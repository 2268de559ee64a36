//! Errors of the harness; each names the field or file at fault.

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid {field} {value:?}: {reason}")]
    Invalid {
        field: &'static str,
        value: String,
        reason: String,
    },
    #[error("cannot read {path}: {source}")]
    Read {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Identity(#[from] meshbench_identity::Error),
    #[error(transparent)]
    Bind(#[from] meshbench_net::BindError),
    #[error(transparent)]
    Config(#[from] meshbench_role::Error),
}

impl meshbench_role::InputFault for Error {
    fn is_bad_input(&self) -> bool {
        // A field, a file named in the configuration or an address: all the user's to fix,
        // except what the CA says is the machine's.
        match self {
            Error::Identity(e) => e.is_bad_input(),
            _ => true,
        }
    }
}
