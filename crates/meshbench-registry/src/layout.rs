//! An OCI image-layout archive (`meshbench image build` writes one): its `index.json`, the
//! image manifest it points to, and the blobs that manifest names (config and layers), each
//! checked against its digest as it is read.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use aws_lc_rs::digest;
use bytes::Bytes;

use crate::Error;

/// The most an archive's index or manifest may take (a manifest of hundreds of layers is a
/// few tens of KiB).
const MAX_METADATA: u64 = 4 << 20;
/// The most one blob may take: blobs are held in memory while they are pushed.
pub const MAX_BLOB: u64 = 4 << 30;
const MANIFEST_TYPES: [&str; 2] = [
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
];

/// A blob: its digest (`sha256:<hex>`), media type and bytes (shared, not copied, by every
/// request that sends them).
#[derive(Debug, Clone)]
pub struct Blob {
    pub digest: String,
    pub media_type: String,
    pub bytes: Bytes,
}

/// What a push sends: the blobs, then the manifest that names them.
#[derive(Debug, Clone)]
pub struct Image {
    pub blobs: Vec<Blob>,
    pub manifest: Blob,
}

/// Reads the archive at `path`: the one image manifest its index names, and every blob that
/// manifest names, each checked against its digest and size.
pub fn read_archive(path: &Path) -> Result<Image, Error> {
    let bad = |why: String| Error::BadArchive {
        path: path.to_owned(),
        why,
    };
    let file = std::fs::File::open(path).map_err(|source| Error::Read {
        path: path.to_owned(),
        source,
    })?;
    // Every blob by its digest's hex (`blobs/sha256/<hex>`), and the index.
    let mut blobs: BTreeMap<String, Bytes> = BTreeMap::new();
    let mut index = None;
    let mut archive = tar::Archive::new(file);
    let entries = archive.entries().map_err(|e| bad(e.to_string()))?;
    for entry in entries {
        let entry = entry.map_err(|e| bad(e.to_string()))?;
        let name = entry
            .path()
            .map_err(|e| bad(e.to_string()))?
            .to_string_lossy()
            .trim_start_matches("./")
            .to_owned();
        if name == "index.json" {
            index = Some(
                read_capped(entry, MAX_METADATA).map_err(|e| bad(format!("index.json: {e}")))?,
            );
        } else if let Some(hex) = name.strip_prefix("blobs/sha256/") {
            let bytes = read_capped(entry, MAX_BLOB).map_err(|e| bad(format!("{name}: {e}")))?;
            blobs.insert(hex.to_owned(), Bytes::from(bytes));
        }
    }
    let index = index.ok_or_else(|| bad("no index.json: not an OCI image layout".into()))?;
    let index: serde_json::Value =
        serde_json::from_slice(&index).map_err(|e| bad(format!("index.json: {e}")))?;
    let manifests = index["manifests"].as_array().cloned().unwrap_or_default();
    let [descriptor] = manifests.as_slice() else {
        return Err(bad(format!(
            "index.json names {} manifests; one image is pushed at a time",
            manifests.len()
        )));
    };
    let manifest = blob_of(descriptor, &blobs).map_err(bad)?;
    if !MANIFEST_TYPES.contains(&manifest.media_type.as_str()) {
        return Err(bad(format!(
            "the index names a {}, not an image manifest",
            manifest.media_type
        )));
    }
    let parsed: serde_json::Value =
        serde_json::from_slice(&manifest.bytes).map_err(|e| bad(format!("the manifest: {e}")))?;
    let mut pushed = vec![blob_of(&parsed["config"], &blobs).map_err(bad)?];
    for layer in parsed["layers"].as_array().into_iter().flatten() {
        pushed.push(blob_of(layer, &blobs).map_err(bad)?);
    }
    Ok(Image {
        blobs: pushed,
        manifest,
    })
}

/// The blob `descriptor` names, checked against its digest and size.
fn blob_of(
    descriptor: &serde_json::Value,
    blobs: &BTreeMap<String, Bytes>,
) -> Result<Blob, String> {
    let digest = descriptor["digest"]
        .as_str()
        .ok_or_else(|| format!("a descriptor without a digest: {descriptor}"))?;
    let media_type = descriptor["mediaType"]
        .as_str()
        .ok_or_else(|| format!("{digest}: no media type"))?;
    let hex = digest
        .strip_prefix("sha256:")
        .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or_else(|| format!("{digest}: not a sha256 digest"))?;
    let bytes = blobs
        .get(hex)
        .ok_or_else(|| format!("{digest} is named but not in the archive"))?;
    if descriptor["size"].as_u64() != Some(bytes.len() as u64) {
        return Err(format!(
            "{digest}: {} bytes in the archive, {} in its descriptor",
            bytes.len(),
            descriptor["size"]
        ));
    }
    let actual = sha256(bytes);
    if actual != digest {
        return Err(format!("{digest}: its bytes hash to {actual}"));
    }
    Ok(Blob {
        digest: digest.to_owned(),
        media_type: media_type.to_owned(),
        bytes: bytes.clone(),
    })
}

/// `sha256:<hex>` of `bytes`.
pub fn sha256(bytes: &[u8]) -> String {
    let hash = digest::digest(&digest::SHA256, bytes);
    let hex: String = hash.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

fn read_capped(entry: impl Read, cap: u64) -> Result<Vec<u8>, String> {
    let mut bytes = vec![];
    entry
        .take(cap + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > cap {
        return Err(format!("larger than {cap} bytes"));
    }
    Ok(bytes)
}
