//! Errors that stop a proxy from starting. Failures of single connections are logged and
//! counted, never fatal.

use meshbench_role::InputFault;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Bind(#[from] meshbench_net::BindError),
    #[error(transparent)]
    Identity(#[from] meshbench_identity::Error),
    #[error(transparent)]
    ConfigFile(#[from] meshbench_role::Error),
    #[error("the sidecar has neither an inbound nor an outbound listener")]
    NothingToDo,
    #[error("{0}")]
    Config(String),
}

impl InputFault for Error {
    fn is_bad_input(&self) -> bool {
        match self {
            Error::Identity(e) => e.is_bad_input(),
            _ => true,
        }
    }
}
