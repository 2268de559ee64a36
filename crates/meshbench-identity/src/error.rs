//! Errors of the identity crate; each names the file or value at fault.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: no PEM certificate found")]
    NoCertificate { path: PathBuf },
    #[error("{path}: no PEM private key found (expected PKCS#8, SEC1 or PKCS#1)")]
    NoPrivateKey { path: PathBuf },
    #[error("{path}: malformed PEM: {reason}")]
    MalformedPem { path: PathBuf, reason: String },
    #[error("invalid SPIFFE ID {value:?}: {reason}")]
    InvalidSpiffeId { value: String, reason: String },
    #[error("invalid {field} {value:?}: {reason}")]
    InvalidName {
        field: &'static str,
        value: String,
        reason: String,
    },
    #[error("a CA already exists in {dir}; refusing to overwrite it")]
    CaExists { dir: PathBuf },
    #[error("{dir} holds no CA (expected ca.pem and ca.key; run `meshbench ca init`)")]
    NoCa { dir: PathBuf },
    #[error("certificate signing request rejected: {0}")]
    Csr(String),
    #[error(transparent)]
    Bind(#[from] meshbench_net::BindError),
    #[error("SVID renewal through the CA at {endpoint} failed: {reason}")]
    Renew {
        endpoint: std::net::SocketAddr,
        reason: String,
    },
    #[error(transparent)]
    Config(#[from] meshbench_role::Error),
    #[error("the Istio CA at {address}: {reason}")]
    IstioCa { address: String, reason: String },
    #[error("Linkerd's identity controller at {address}: {reason}")]
    LinkerdIdentity { address: String, reason: String },
    #[error("certificate generation failed: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("TLS configuration rejected: {0}")]
    Tls(#[from] rustls::Error),
    #[error("client certificate verifier: {0}")]
    ClientVerifier(#[from] rustls::server::VerifierBuilderError),
}

impl meshbench_role::InputFault for Error {
    /// True when the error is the user's input (a path, a name, a file's content) rather than
    /// a failure of the machine; the CLI exits with code 2 for these.
    fn is_bad_input(&self) -> bool {
        !matches!(
            self,
            Error::Write { .. }
                | Error::Generate(_)
                | Error::Renew { .. }
                | Error::IstioCa { .. }
                | Error::LinkerdIdentity { .. }
        )
    }
}
