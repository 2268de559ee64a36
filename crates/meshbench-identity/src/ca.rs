//! The built-in certificate authority: a self-signed ECDSA P-256 root whose certificate carries
//! the trust domain's own SPIFFE ID, issuing short-lived workload SVIDs.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType, PKCS_ECDSA_P256_SHA256,
};
use rustls_pki_types::CertificateDer;
use time::OffsetDateTime;

use crate::spiffe::{spiffe_ids_of, SpiffeId};
use crate::Error;

/// SVID lifetime when none is given: 24 h, as Istio and Linkerd default to.
pub const DEFAULT_SVID_TTL: Duration = Duration::from_secs(24 * 3600);
const CA_TTL: Duration = Duration::from_secs(365 * 24 * 3600);
/// Tolerated clock skew between the CA and the peers that verify its certificates.
const BACKDATE: Duration = Duration::from_secs(300);

const CA_CERT_FILE: &str = "ca.pem";
const CA_KEY_FILE: &str = "ca.key";

pub struct CertificateAuthority {
    trust_domain: String,
    cert_pem: String,
    cert_der: CertificateDer<'static>,
    issuer: Issuer<'static, KeyPair>,
}

#[derive(Debug, Clone, Default)]
pub struct IssueOptions {
    /// Lifetime of the SVID; [`DEFAULT_SVID_TTL`] when `None`.
    pub ttl: Option<Duration>,
    /// Extra DNS SANs, so tools that verify host names (curl, openssl) accept the certificate.
    pub dns_names: Vec<String>,
    pub ip_addresses: Vec<IpAddr>,
}

/// A certificate signed for a key the workload keeps to itself.
#[derive(Debug, Clone)]
pub struct SignedSvid {
    pub cert_pem: String,
    pub not_after: OffsetDateTime,
}

/// A freshly issued SVID, as PEM.
#[derive(Debug, Clone)]
pub struct IssuedSvid {
    pub spiffe_id: SpiffeId,
    pub cert_pem: String,
    pub key_pem: String,
    pub not_after: OffsetDateTime,
}

/// An intermediate CA this CA issued ([`CertificateAuthority::issue_intermediate`]), as PEM.
#[derive(Debug, Clone)]
pub struct IssuedCa {
    pub cert_pem: String,
    pub key_pem: String,
    pub not_after: OffsetDateTime,
}

impl IssuedCa {
    /// Writes `<stem>.pem` (certificate) and `<stem>.key` (PKCS#8 key, owner-only) into `dir`.
    pub fn write(&self, dir: &Path, stem: &str) -> Result<(PathBuf, PathBuf), Error> {
        write_pair(dir, stem, &self.cert_pem, &self.key_pem)
    }
}

impl IssuedSvid {
    /// Writes `<stem>.pem` (certificate) and `<stem>.key` (PKCS#8 key) into `dir`.
    pub fn write(&self, dir: &Path, stem: &str) -> Result<(PathBuf, PathBuf), Error> {
        write_pair(dir, stem, &self.cert_pem, &self.key_pem)
    }
}

/// `<stem>.pem` and `<stem>.key` in `dir`, the key readable by its owner only.
fn write_pair(
    dir: &Path,
    stem: &str,
    cert_pem: &str,
    key_pem: &str,
) -> Result<(PathBuf, PathBuf), Error> {
    let cert = dir.join(format!("{stem}.pem"));
    let key = dir.join(format!("{stem}.key"));
    write_file(&cert, cert_pem)?;
    write_private_file(&key, key_pem)?;
    Ok((cert, key))
}

impl CertificateAuthority {
    /// Creates a new root CA for `trust_domain` in memory.
    pub fn generate(trust_domain: &str) -> Result<Self, Error> {
        let td_id = SpiffeId::for_trust_domain(trust_domain)?;
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::OrganizationName, "meshbench");
        dn.push(
            DnType::CommonName,
            format!("meshbench root CA ({trust_domain})"),
        );
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        params.subject_alt_names = vec![SanType::URI(ia5(&td_id.to_string())?)];
        set_validity(&mut params, CA_TTL);
        let cert = params.self_signed(&key)?;
        let cert_pem = cert.pem();
        let cert_der = cert.der().clone();
        Ok(CertificateAuthority {
            trust_domain: trust_domain.to_owned(),
            cert_pem,
            cert_der,
            issuer: Issuer::new(params, key),
        })
    }

    /// Creates a CA and writes `ca.pem` and `ca.key` into `dir`; refuses to overwrite one.
    pub fn init(dir: &Path, trust_domain: &str) -> Result<Self, Error> {
        if dir.join(CA_KEY_FILE).exists() || dir.join(CA_CERT_FILE).exists() {
            return Err(Error::CaExists {
                dir: dir.to_path_buf(),
            });
        }
        let ca = Self::generate(trust_domain)?;
        write_file(&dir.join(CA_CERT_FILE), &ca.cert_pem)?;
        write_private_file(&dir.join(CA_KEY_FILE), &ca.issuer.key().serialize_pem())?;
        Ok(ca)
    }

    /// Loads a CA written by [`CertificateAuthority::init`]; the trust domain comes from the
    /// CA certificate's own SPIFFE ID.
    pub fn load(dir: &Path) -> Result<Self, Error> {
        let cert_path = dir.join(CA_CERT_FILE);
        let key_path = dir.join(CA_KEY_FILE);
        if !cert_path.exists() || !key_path.exists() {
            return Err(Error::NoCa {
                dir: dir.to_path_buf(),
            });
        }
        let cert_der = crate::load_certs(&cert_path)?.remove(0);
        let key_pem = read_string(&key_path)?;
        let key = KeyPair::from_pem(&key_pem).map_err(|e| Error::MalformedPem {
            path: key_path.clone(),
            reason: e.to_string(),
        })?;
        let trust_domain = spiffe_ids_of(&cert_der)
            .into_iter()
            .next()
            .map(|id| id.trust_domain().to_owned())
            .ok_or_else(|| Error::MalformedPem {
                path: cert_path.clone(),
                reason: "CA certificate carries no spiffe://<trust-domain> URI SAN".to_owned(),
            })?;
        let issuer = Issuer::from_ca_cert_der(&cert_der, key)?;
        let cert_pem = read_string(&cert_path)?;
        Ok(CertificateAuthority {
            trust_domain,
            cert_pem,
            cert_der,
            issuer,
        })
    }

    pub fn trust_domain(&self) -> &str {
        &self.trust_domain
    }

    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    pub fn cert_der(&self) -> &CertificateDer<'static> {
        &self.cert_der
    }

    /// Issues an SVID for the workload running as service account `sa` in namespace `ns`.
    /// Each SVID gets a fresh key pair; it is valid for both client and server use, as mesh
    /// workload certificates are.
    pub fn issue(&self, ns: &str, sa: &str, opts: &IssueOptions) -> Result<IssuedSvid, Error> {
        let spiffe_id = SpiffeId::for_workload(&self.trust_domain, ns, sa)?;
        let (params, not_after) = self.workload_params(&spiffe_id, opts)?;
        self.sign_with_new_key(spiffe_id, params, not_after)
    }

    /// Issues an SVID for `id`, named the way the mesh that trusts this CA names workloads
    /// (Consul's `/ns/default/dc/dc1/svc/<name>`, say); it must be of this CA's trust domain.
    pub fn issue_for(&self, id: &SpiffeId, opts: &IssueOptions) -> Result<IssuedSvid, Error> {
        if id.trust_domain() != self.trust_domain {
            return Err(Error::InvalidName {
                field: "SPIFFE ID",
                value: id.to_string(),
                reason: format!("is not in this CA's trust domain {}", self.trust_domain),
            });
        }
        let (params, not_after) = self.workload_params(id, opts)?;
        self.sign_with_new_key(id.clone(), params, not_after)
    }

    /// The certificate and key files of the CA kept in `dir` (as [`Self::init`] writes them).
    pub fn files(dir: &Path) -> (PathBuf, PathBuf) {
        (dir.join(CA_CERT_FILE), dir.join(CA_KEY_FILE))
    }

    /// Issues an intermediate CA named `name` (its subject's CN and its one DNS SAN), with a
    /// fresh ECDSA P-256 key: `CA:TRUE, pathlen:0`, allowed to sign certificates and CRLs and
    /// nothing else. A mesh whose own CA signs the workloads' certificates takes it as its
    /// issuer under meshbench's root: Linkerd's identity controller, named
    /// `identity.linkerd.cluster.local`, as `step certificate create --profile
    /// intermediate-ca` makes it in Linkerd's documentation.
    pub fn issue_intermediate(&self, name: &str, ttl: Duration) -> Result<IssuedCa, Error> {
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, name);
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params.subject_alt_names = vec![SanType::DnsName(ia5(name)?)];
        params.use_authority_key_identifier_extension = true;
        let not_after = set_validity(&mut params, ttl);
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(IssuedCa {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            not_after,
        })
    }

    /// A fresh key pair, and `params` signed for it.
    fn sign_with_new_key(
        &self,
        spiffe_id: SpiffeId,
        params: CertificateParams,
        not_after: OffsetDateTime,
    ) -> Result<IssuedSvid, Error> {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(IssuedSvid {
            spiffe_id,
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            not_after,
        })
    }

    /// Issues a leaf with exactly these URI SANs, whatever their trust domain or number: a
    /// certificate this CA never issues to a workload, for the tests and identity checks that
    /// must present what a compromised or foreign CA would.
    pub fn issue_with_uris(&self, uris: &[&str]) -> Result<IssuedSvid, Error> {
        let first = uris.first().ok_or_else(|| Error::InvalidName {
            field: "URI SANs",
            value: String::new(),
            reason: "give at least one".to_owned(),
        })?;
        let spiffe_id = SpiffeId::parse(first)?;
        let (mut params, not_after) = self.workload_params(&spiffe_id, &IssueOptions::default())?;
        params.subject_alt_names = uris
            .iter()
            .map(|uri| Ok(SanType::URI(ia5(uri)?)))
            .collect::<Result<_, Error>>()?;
        self.sign_with_new_key(spiffe_id, params, not_after)
    }

    /// Signs a certificate signing request for `id`, the identity the caller has already
    /// authenticated. Only the request's public key is used (its signature proves possession);
    /// whatever names it asks for are ignored, so a workload cannot widen its identity.
    pub fn sign_request(
        &self,
        csr_pem: &str,
        id: &SpiffeId,
        ttl: Option<Duration>,
    ) -> Result<SignedSvid, Error> {
        let request = rcgen::CertificateSigningRequestParams::from_pem(csr_pem)
            .map_err(|e| Error::Csr(e.to_string()))?;
        let opts = IssueOptions {
            ttl,
            ..IssueOptions::default()
        };
        let (signed, _) = self.sign_parsed(&request, id, &opts, None)?;
        Ok(signed)
    }

    /// Signs a DER certificate signing request as Linkerd's identity controller does: a leaf
    /// whose one name is the DNS-like identity `dns_name` (Linkerd refuses URIs in its
    /// certificates), for the workload `id` the caller has already authenticated; the leaf as
    /// PEM and as DER. As in [`Self::sign_request`], only the request's public key is used.
    pub fn sign_der_request_for_dns(
        &self,
        csr_der: &[u8],
        id: &SpiffeId,
        dns_name: &str,
        ttl: Duration,
    ) -> Result<(SignedSvid, Vec<u8>), Error> {
        let der = rustls_pki_types::CertificateSigningRequestDer::from(csr_der);
        let request = rcgen::CertificateSigningRequestParams::from_der(&der)
            .map_err(|e| Error::Csr(e.to_string()))?;
        let opts = IssueOptions {
            ttl: Some(ttl),
            ..IssueOptions::default()
        };
        let names = vec![SanType::DnsName(ia5(dns_name)?)];
        self.sign_parsed(&request, id, &opts, Some(names))
    }

    /// Signs `request`'s key for `id`; `names` in place of the SANs an SVID carries.
    fn sign_parsed(
        &self,
        request: &rcgen::CertificateSigningRequestParams,
        id: &SpiffeId,
        opts: &IssueOptions,
        names: Option<Vec<SanType>>,
    ) -> Result<(SignedSvid, Vec<u8>), Error> {
        if id.trust_domain() != self.trust_domain {
            return Err(Error::Csr(format!(
                "{id} is not in trust domain {}",
                self.trust_domain
            )));
        }
        let (mut params, not_after) = self.workload_params(id, opts)?;
        if let Some(names) = names {
            params.subject_alt_names = names;
        }
        let cert = params.signed_by(&request.public_key, &self.issuer)?;
        Ok((
            SignedSvid {
                cert_pem: cert.pem(),
                not_after,
            },
            cert.der().to_vec(),
        ))
    }

    fn workload_params(
        &self,
        id: &SpiffeId,
        opts: &IssueOptions,
    ) -> Result<(CertificateParams, OffsetDateTime), Error> {
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::OrganizationName, self.trust_domain.clone());
        dn.push(DnType::CommonName, common_name(id));
        params.distinguished_name = dn;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params.use_authority_key_identifier_extension = true;
        let mut sans = vec![SanType::URI(ia5(&id.to_string())?)];
        for dns in &opts.dns_names {
            sans.push(SanType::DnsName(ia5(dns)?));
        }
        sans.extend(opts.ip_addresses.iter().copied().map(SanType::IpAddress));
        params.subject_alt_names = sans;
        let not_after = set_validity(&mut params, opts.ttl.unwrap_or(DEFAULT_SVID_TTL));
        Ok((params, not_after))
    }
}

/// `<sa>.<ns>` for Kubernetes-style IDs, the path otherwise; informational only.
fn common_name(id: &SpiffeId) -> String {
    match id
        .path()
        .strip_prefix("/ns/")
        .and_then(|p| p.split_once("/sa/"))
    {
        Some((ns, sa)) => format!("{sa}.{ns}"),
        None => id.path().trim_start_matches('/').to_owned(),
    }
}

fn set_validity(params: &mut CertificateParams, ttl: Duration) -> OffsetDateTime {
    let now = OffsetDateTime::now_utc();
    params.not_before = now - BACKDATE;
    params.not_after = now + ttl;
    params.not_after
}

fn ia5(value: &str) -> Result<rcgen::string::Ia5String, Error> {
    rcgen::string::Ia5String::try_from(value).map_err(|e| Error::InvalidName {
        field: "subject alternative name",
        value: value.to_owned(),
        reason: e.to_string(),
    })
}

pub(crate) fn read_string(path: &Path) -> Result<String, Error> {
    std::fs::read_to_string(path).map_err(|source| Error::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn write_file(path: &Path, contents: &str) -> Result<(), Error> {
    let err = |source| Error::Write {
        path: path.to_path_buf(),
        source,
    };
    // The directory a CA's key lives in is private from its creation.
    if let Some(dir) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        crate::files::create_private_dir(dir)?;
    }
    std::fs::write(path, contents).map_err(err)
}

/// Private keys are readable by their owner only, from their first byte.
fn write_private_file(path: &Path, contents: &str) -> Result<(), Error> {
    crate::files::write_secret(path, contents.as_bytes())
}
