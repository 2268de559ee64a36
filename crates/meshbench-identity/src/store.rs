//! The SVID a running workload presents, swappable while it runs. TLS configurations resolve
//! their certificate from the store at every handshake, so a rotated SVID is used by new
//! connections while established ones keep the session they negotiated.

use std::fmt;
use std::path::Path;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use rcgen::{CertificateParams, KeyPair, PKCS_ECDSA_P256_SHA256};
use rustls::client::ResolvesClientCert;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::SignatureScheme;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::spiffe::{not_after_unix, spiffe_ids_of, SpiffeId};
use crate::{load_certs, load_private_key, Error};

pub struct SvidStore {
    spiffe_id: SpiffeId,
    current: RwLock<Arc<CertifiedKey>>,
    /// The same SVID as PEM, for proxies that read certificates from files (Envoy).
    pem: RwLock<Arc<SvidPem>>,
    not_after_unix: AtomicI64,
    rotations: AtomicU64,
}

impl fmt::Debug for SvidStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SvidStore")
            .field("spiffe_id", &self.spiffe_id)
            .field("not_after_unix", &self.not_after_unix())
            .field("rotations", &self.rotations())
            .finish()
    }
}

/// An SVID as PEM text: the certificate chain (leaf first) and its private key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SvidPem {
    pub cert: String,
    pub key: String,
}

/// A fresh key pair and a certificate signing request for it, for renewing an SVID.
pub struct SvidRequest {
    pub csr_pem: String,
    key: PrivateKeyDer<'static>,
    key_pem: String,
}

impl SvidRequest {
    pub fn generate() -> Result<Self, Error> {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?;
        // The CA takes the identity from the authenticated caller, not from the request.
        let csr = CertificateParams::default().serialize_request(&key)?;
        Ok(SvidRequest {
            csr_pem: csr.pem()?,
            key: PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            key_pem: key.serialize_pem(),
        })
    }
}

fn certified_key(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<CertifiedKey, Error> {
    let provider = rustls::crypto::aws_lc_rs::default_provider();
    let certified = CertifiedKey::from_der(chain, key, &provider)?;
    Ok(certified)
}

fn spiffe_id_of_leaf(chain: &[CertificateDer<'_>], what: &str) -> Result<SpiffeId, Error> {
    chain
        .first()
        .and_then(|leaf| spiffe_ids_of(leaf).into_iter().next())
        .ok_or_else(|| Error::InvalidName {
            field: "SVID",
            value: what.to_owned(),
            reason: "the certificate carries no spiffe:// URI SAN".to_owned(),
        })
}

impl SvidStore {
    /// The SVID in `cert` (leaf first) and its private key `key`.
    pub fn from_files(cert: &Path, key: &Path) -> Result<Self, Error> {
        let chain = load_certs(cert)?;
        let spiffe_id = spiffe_id_of_leaf(&chain, &cert.display().to_string())?;
        let not_after = chain.first().and_then(not_after_unix).unwrap_or(0);
        let certified =
            certified_key(chain, load_private_key(key)?).map_err(|e| Error::MalformedPem {
                path: key.to_path_buf(),
                reason: format!("does not belong to {}: {e}", cert.display()),
            })?;
        let pem = SvidPem {
            cert: crate::ca::read_string(cert)?,
            key: crate::ca::read_string(key)?,
        };
        Ok(SvidStore {
            spiffe_id,
            current: RwLock::new(Arc::new(certified)),
            pem: RwLock::new(Arc::new(pem)),
            not_after_unix: AtomicI64::new(not_after),
            rotations: AtomicU64::new(0),
        })
    }

    pub fn spiffe_id(&self) -> &SpiffeId {
        &self.spiffe_id
    }

    /// Expiry of the SVID presented now, in seconds since the Unix epoch.
    pub fn not_after_unix(&self) -> i64 {
        self.not_after_unix.load(Ordering::Relaxed)
    }

    /// How many times the SVID was replaced since the store was created.
    pub fn rotations(&self) -> u64 {
        self.rotations.load(Ordering::Relaxed)
    }

    /// The SVID presented now, as PEM.
    pub fn current_pem(&self) -> Arc<SvidPem> {
        self.pem
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    pub fn current(&self) -> Arc<CertifiedKey> {
        self.current
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Replaces the SVID with `cert_pem`, signed for `request`'s key. The new certificate must
    /// carry the same SPIFFE ID: a rotation renews an identity, it never changes it.
    pub fn install(&self, cert_pem: &str, request: SvidRequest) -> Result<(), Error> {
        let chain = crate::pem::certs_from_pem(cert_pem.as_bytes())?;
        let id = spiffe_id_of_leaf(&chain, "renewed SVID")?;
        if id != self.spiffe_id {
            return Err(Error::Csr(format!(
                "the CA issued {id}, expected {}",
                self.spiffe_id
            )));
        }
        let not_after = chain.first().and_then(not_after_unix).unwrap_or(0);
        let certified = certified_key(chain, request.key)?;
        *self
            .current
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Arc::new(certified);
        *self
            .pem
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Arc::new(SvidPem {
            cert: cert_pem.to_owned(),
            key: request.key_pem,
        });
        self.not_after_unix.store(not_after, Ordering::Relaxed);
        self.rotations.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

impl ResolvesServerCert for SvidStore {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

impl ResolvesClientCert for SvidStore {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }

    fn has_certs(&self) -> bool {
        true
    }
}
