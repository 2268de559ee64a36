//! What a pod's Secret holds (mounted at `POD_PKI_DIR`): files of the run's identity
//! directory, read when the pod is created. A site whose SVIDs are short-lived (the verifier
//! makes them rotate while it checks identities) issues each workload's SVID as its pod is
//! created instead: one made when the run started would have expired before a pod of a later
//! cell started.

use std::collections::BTreeMap;
use std::time::Duration;

use meshbench_meshes::MeshPki;
use meshbench_topology::Topology;

use crate::Error;

/// The first SVID of a pod whose SVIDs are short-lived lives at least this long: its pod must
/// start before it expires, then renews it from meshbench's CA service (at half of its life)
/// for one living the site's short lifetime. It plays the part of the service-account token a
/// mesh's agent bootstraps with.
pub const BOOTSTRAP_SVID_TTL: Duration = Duration::from_secs(60);

/// The contents of `names`, files of the run's identity directory, for a pod of `topology`.
/// With `short_ttl`, a workload's certificate, key and combined PEM are a new SVID instead,
/// living [`BOOTSTRAP_SVID_TTL`] or `short_ttl`, whichever is longer.
pub(crate) fn secret_data(
    pki: &MeshPki,
    topology: &Topology,
    short_ttl: Option<Duration>,
    names: &[String],
) -> Result<BTreeMap<String, Vec<u8>>, Error> {
    let mut data = BTreeMap::new();
    let mut issued = BTreeMap::new();
    for name in names {
        let fresh = match short_ttl {
            Some(ttl) => workload_file(topology, name)
                .map(|(namespace, service_account, part)| {
                    let key = (namespace.to_owned(), service_account.to_owned());
                    if !issued.contains_key(&key) {
                        let svid =
                            pki.issue_now(namespace, service_account, ttl.max(BOOTSTRAP_SVID_TTL))?;
                        issued.insert(key.clone(), svid);
                    }
                    let svid = &issued[&key];
                    Ok::<_, Error>(match part {
                        SvidPart::Certificate => svid.cert_pem.clone(),
                        SvidPart::Key => svid.key_pem.clone(),
                        SvidPart::Combined => format!("{}{}", svid.cert_pem, svid.key_pem),
                    })
                })
                .transpose()?,
            None => None,
        };
        let bytes = match fresh {
            Some(pem) => pem.into_bytes(),
            None => {
                let path = pki.dir.join(name);
                std::fs::read(&path).map_err(|source| Error::Io { path, source })?
            }
        };
        data.insert(name.clone(), bytes);
    }
    Ok(data)
}

enum SvidPart {
    Certificate,
    Key,
    Combined,
}

/// The workload (namespace, service account) and part of an SVID file name of the run's
/// identity directory (`<namespace>.<service account>.pem`, `.key`, `.combined.pem`).
fn workload_file<'t>(topology: &'t Topology, name: &str) -> Option<(&'t str, &'t str, SvidPart)> {
    topology.workloads.iter().find_map(|w| {
        let stem = meshbench_meshes::svid_file_stem(&w.namespace, &w.service_account);
        let part = match name.strip_prefix(&stem)? {
            ".pem" => SvidPart::Certificate,
            ".key" => SvidPart::Key,
            ".combined.pem" => SvidPart::Combined,
            _ => return None,
        };
        Some((w.namespace.as_str(), w.service_account.as_str(), part))
    })
}
