//! SPIFFE IDs: parsing, the Kubernetes-style `ns/<ns>/sa/<sa>` path, and reading them from a
//! certificate's URI SANs.

use std::fmt;

use rustls_pki_types::CertificateDer;
use x509_parser::extensions::GeneralName;

use crate::Error;

/// A SPIFFE ID such as `spiffe://cluster.local/ns/default/sa/client`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SpiffeId {
    trust_domain: String,
    path: String,
}

impl SpiffeId {
    /// The workload identity meshes derive from a Kubernetes namespace and service account.
    pub fn for_workload(trust_domain: &str, ns: &str, sa: &str) -> Result<Self, Error> {
        validate_trust_domain(trust_domain)?;
        validate_segment("namespace", ns)?;
        validate_segment("service account", sa)?;
        Ok(SpiffeId {
            trust_domain: trust_domain.to_owned(),
            path: format!("/ns/{ns}/sa/{sa}"),
        })
    }

    /// The ID of a trust domain itself (`spiffe://<td>`), carried by the CA certificate.
    pub fn for_trust_domain(trust_domain: &str) -> Result<Self, Error> {
        validate_trust_domain(trust_domain)?;
        Ok(SpiffeId {
            trust_domain: trust_domain.to_owned(),
            path: String::new(),
        })
    }

    pub fn parse(value: &str) -> Result<Self, Error> {
        let invalid = |reason: &str| Error::InvalidSpiffeId {
            value: value.to_owned(),
            reason: reason.to_owned(),
        };
        let rest = value
            .strip_prefix("spiffe://")
            .ok_or_else(|| invalid("must start with spiffe://"))?;
        let (td, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        validate_trust_domain(td).map_err(|_| invalid("bad trust domain"))?;
        if path == "/" || path.ends_with('/') {
            return Err(invalid("path must not end with /"));
        }
        if !path.is_empty() {
            for segment in path[1..].split('/') {
                validate_segment("path segment", segment)
                    .map_err(|_| invalid("bad path segment"))?;
            }
        }
        Ok(SpiffeId {
            trust_domain: td.to_owned(),
            path: path.to_owned(),
        })
    }

    pub fn trust_domain(&self) -> &str {
        &self.trust_domain
    }

    pub fn path(&self) -> &str {
        &self.path
    }
}

impl fmt::Display for SpiffeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "spiffe://{}{}", self.trust_domain, self.path)
    }
}

impl std::str::FromStr for SpiffeId {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        SpiffeId::parse(s)
    }
}

fn validate_trust_domain(td: &str) -> Result<(), Error> {
    let ok = !td.is_empty()
        && td.len() <= 255
        && td
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-._".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidName {
            field: "trust domain",
            value: td.to_owned(),
            reason: "use lowercase letters, digits, '-', '.', '_'".to_owned(),
        })
    }
}

fn validate_segment(field: &'static str, segment: &str) -> Result<(), Error> {
    let ok = !segment.is_empty()
        && segment != "."
        && segment != ".."
        && segment
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidName {
            field,
            value: segment.to_owned(),
            reason: "use letters, digits, '-', '.', '_'".to_owned(),
        })
    }
}

/// The SPIFFE IDs among a certificate's URI SANs (an SVID has exactly one).
pub fn spiffe_ids_of(cert: &CertificateDer<'_>) -> Vec<SpiffeId> {
    san_names(cert, |name| match name {
        GeneralName::URI(uri) => SpiffeId::parse(uri).ok(),
        _ => None,
    })
}

/// The DNS names a certificate carries in its SAN: what Linkerd's identities are.
pub fn dns_names_of(cert: &CertificateDer<'_>) -> Vec<String> {
    san_names(cert, |name| match name {
        GeneralName::DNSName(dns) => Some((*dns).to_owned()),
        _ => None,
    })
}

/// What `pick` takes of a certificate's SAN entries; nothing for what does not parse.
fn san_names<T>(cert: &CertificateDer<'_>, pick: impl Fn(&GeneralName) -> Option<T>) -> Vec<T> {
    let Ok((_, parsed)) = x509_parser::parse_x509_certificate(cert) else {
        return Vec::new();
    };
    let Ok(Some(san)) = parsed.subject_alternative_name() else {
        return Vec::new();
    };
    san.value.general_names.iter().filter_map(pick).collect()
}

/// When a certificate expires, in Unix seconds.
pub fn not_after_unix(cert: &CertificateDer<'_>) -> Option<i64> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert).ok()?;
    Some(parsed.validity().not_after.timestamp())
}

/// What tells one issued certificate from another: its serial and validity.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CertificateSummary {
    /// The serial, as colon-separated hex.
    pub serial: String,
    /// Validity, in Unix seconds.
    pub not_before: i64,
    pub not_after: i64,
}

impl CertificateSummary {
    /// `None` for what does not parse as X.509.
    pub fn of(cert: &CertificateDer<'_>) -> Option<Self> {
        let (_, parsed) = x509_parser::parse_x509_certificate(cert).ok()?;
        let validity = parsed.validity();
        Some(CertificateSummary {
            serial: parsed.raw_serial_as_string(),
            not_before: validity.not_before.timestamp(),
            not_after: validity.not_after.timestamp(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_workload_ids_and_rejects_malformed_ones() {
        let id = SpiffeId::parse("spiffe://cluster.local/ns/default/sa/client").unwrap();
        assert_eq!(id.trust_domain(), "cluster.local");
        assert_eq!(id.path(), "/ns/default/sa/client");
        assert_eq!(
            id,
            SpiffeId::for_workload("cluster.local", "default", "client").unwrap()
        );
        for bad in [
            "http://cluster.local/ns/a/sa/b",
            "spiffe://",
            "spiffe://Cluster.Local/ns/a",
            "spiffe://td/ns//sa/b",
            "spiffe://td/ns/a/",
            "spiffe://td/ns/../sa",
        ] {
            assert!(SpiffeId::parse(bad).is_err(), "{bad} should be rejected");
        }
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(4000))]

            /// Whatever parses prints back as itself: no two spellings of one identity
            /// (case, dots, slashes) that a policy could tell apart.
            #[test]
            fn what_parses_prints_back_as_itself(value in "(spiffe://)?[a-zA-Z0-9._/%:@ -]{0,40}") {
                if let Ok(id) = SpiffeId::parse(&value) {
                    prop_assert_eq!(id.to_string(), value.clone());
                    prop_assert_eq!(SpiffeId::parse(&id.to_string()).unwrap(), id);
                }
            }

            #[test]
            fn no_string_panics_the_parser(value in any::<String>()) {
                let _ = SpiffeId::parse(&value);
                let _ = SpiffeId::parse(&format!("spiffe://{value}"));
            }

            #[test]
            fn workload_ids_round_trip(
                td in "[a-z0-9][a-z0-9.-]{0,20}",
                ns in "[a-zA-Z0-9][a-zA-Z0-9._-]{0,15}",
                sa in "[a-zA-Z0-9][a-zA-Z0-9._-]{0,15}",
            ) {
                prop_assume!(![ns.as_str(), sa.as_str()].iter().any(|s| *s == "." || *s == ".."));
                let id = SpiffeId::for_workload(&td, &ns, &sa).unwrap();
                prop_assert_eq!(SpiffeId::parse(&id.to_string()).unwrap(), id.clone());
                prop_assert_eq!(id.trust_domain(), td.as_str());
            }
        }
    }
}
