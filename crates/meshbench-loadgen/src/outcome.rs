//! How a request ended. Every sent request gets exactly one outcome, so the counts add up to
//! the number sent and a 403 is never confused with a refused connection or a TLS alert.

use std::error::Error as StdError;
use std::fmt;
use std::io;

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Outcome {
    /// A complete HTTP response with this status.
    Http(u16),
    /// A gRPC call the peer answered with this status code (0 = OK), from `grpc-status` or
    /// mapped from the HTTP status as gRPC clients do.
    Grpc(i32),
    ConnectRefused,
    /// Reset, or closed by the peer before the response was complete.
    ConnectionReset,
    /// TLS failed: a received alert (`alert_certificate_required`, ...) or a local
    /// verification failure (`invalid_certificate`, ...).
    Tls(String),
    Timeout,
    Other,
}

impl Outcome {
    /// The peer answered, whatever its status (HTTP or gRPC).
    pub fn is_response(&self) -> bool {
        matches!(self, Outcome::Http(_) | Outcome::Grpc(_))
    }

    /// A 2xx response, or a gRPC OK.
    pub fn is_success(&self) -> bool {
        matches!(self, Outcome::Http(200..=299) | Outcome::Grpc(0))
    }

    /// Classifies an error from connecting, the TLS handshake or the HTTP exchange by walking
    /// its source chain: a rustls error anywhere means TLS, then the I/O error kind decides.
    pub fn classify(err: &(dyn StdError + 'static)) -> Outcome {
        let mut current: Option<&(dyn StdError + 'static)> = Some(err);
        let mut io_kind = None;
        let mut incomplete = false;
        while let Some(e) = current {
            if let Some(tls) = e.downcast_ref::<rustls::Error>() {
                return Outcome::Tls(tls_reason(tls));
            }
            if let Some(ioe) = e.downcast_ref::<io::Error>() {
                if let Some(tls) = ioe
                    .get_ref()
                    .and_then(|i| i.downcast_ref::<rustls::Error>())
                {
                    return Outcome::Tls(tls_reason(tls));
                }
                io_kind.get_or_insert(ioe.kind());
            }
            if let Some(he) = e.downcast_ref::<hyper::Error>() {
                incomplete |= he.is_incomplete_message() || he.is_canceled() || he.is_closed();
            }
            current = e.source();
        }
        match io_kind {
            Some(io::ErrorKind::ConnectionRefused) => Outcome::ConnectRefused,
            Some(
                io::ErrorKind::ConnectionReset
                | io::ErrorKind::ConnectionAborted
                | io::ErrorKind::BrokenPipe
                | io::ErrorKind::UnexpectedEof,
            ) => Outcome::ConnectionReset,
            Some(io::ErrorKind::TimedOut) => Outcome::Timeout,
            _ if incomplete => Outcome::ConnectionReset,
            _ => Outcome::Other,
        }
    }
}

fn tls_reason(err: &rustls::Error) -> String {
    let raw = match err {
        rustls::Error::AlertReceived(alert) => format!("alert_{alert:?}"),
        rustls::Error::InvalidCertificate(cert) => format!("invalid_certificate_{cert:?}"),
        rustls::Error::NoCertificatesPresented => "no_certificates_presented".to_owned(),
        rustls::Error::PeerIncompatible(_) => "peer_incompatible".to_owned(),
        rustls::Error::PeerMisbehaved(_) => "peer_misbehaved".to_owned(),
        rustls::Error::InvalidMessage(_) => "invalid_message".to_owned(),
        other => format!("{other:?}"),
    };
    snake_case(&raw)
}

/// `alert_CertificateRequired` -> `alert_certificate_required`; drops anything but letters,
/// digits and underscores so the key stays a stable identifier.
fn snake_case(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len() + 8);
    let mut prev_lower = false;
    for c in raw.chars() {
        if c.is_ascii_uppercase() {
            if prev_lower {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
            prev_lower = false;
        } else if c.is_ascii_alphanumeric() {
            out.push(c);
            prev_lower = true;
        } else if c == '_' {
            out.push('_');
            prev_lower = false;
        } else {
            break;
        }
    }
    out
}

impl fmt::Display for Outcome {
    /// The stable key used in results: `http_200`, `connect_refused`, `tls_alert_...`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Http(code) => write!(f, "http_{code}"),
            Outcome::Grpc(code) => {
                write!(
                    f,
                    "grpc_{}",
                    snake_case(&format!("{:?}", tonic::Code::from(*code)))
                )
            }
            Outcome::ConnectRefused => f.write_str("connect_refused"),
            Outcome::ConnectionReset => f.write_str("connection_reset"),
            Outcome::Tls(reason) => write!(f, "tls_{reason}"),
            Outcome::Timeout => f.write_str("timeout"),
            Outcome::Other => f.write_str("other"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_alerts_get_stable_snake_case_keys() {
        let err = io::Error::new(
            io::ErrorKind::InvalidData,
            rustls::Error::AlertReceived(rustls::AlertDescription::CertificateRequired),
        );
        assert_eq!(
            Outcome::classify(&err).to_string(),
            "tls_alert_certificate_required"
        );
    }

    #[test]
    fn io_kinds_map_to_connection_classes() {
        let refused = io::Error::from(io::ErrorKind::ConnectionRefused);
        assert_eq!(Outcome::classify(&refused), Outcome::ConnectRefused);
        let reset = io::Error::from(io::ErrorKind::ConnectionReset);
        assert_eq!(Outcome::classify(&reset), Outcome::ConnectionReset);
    }
}
