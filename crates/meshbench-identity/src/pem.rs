//! Loading certificates and keys from PEM files, with errors that name the file.

use std::path::Path;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::Error;

fn read(path: &Path) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|source| Error::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Every certificate in a PEM file, in file order (leaf first for a chain).
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, Error> {
    let bytes = read(path)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Error::MalformedPem {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(Error::NoCertificate {
            path: path.to_path_buf(),
        });
    }
    Ok(certs)
}

/// The first private key in a PEM file.
pub fn load_private_key(path: &Path) -> Result<PrivateKeyDer<'static>, Error> {
    let bytes = read(path)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| match e {
        rustls_pki_types::pem::Error::NoItemsFound => Error::NoPrivateKey {
            path: path.to_path_buf(),
        },
        other => Error::MalformedPem {
            path: path.to_path_buf(),
            reason: other.to_string(),
        },
    })
}

/// Certificates from PEM text held in memory.
pub(crate) fn certs_from_pem(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, Error> {
    CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Error::Csr(format!("not a PEM certificate: {e}")))
}

/// A private key from PEM text held in memory.
pub(crate) fn key_from_pem(pem: &[u8]) -> Result<PrivateKeyDer<'static>, Error> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| Error::Csr(format!("not a PEM key: {e}")))
}
