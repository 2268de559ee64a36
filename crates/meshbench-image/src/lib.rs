//! `meshbench image build`: the images a Kubernetes cluster runs, made without Docker or a
//! registry: meshbench's roles, and third-party programs laid out as their upstream images
//! lay them out (ztunnel, istio-cni, Linkerd's proxy). One layer holds the meshbench binary
//! (the running one, by default), the interpreter and shared libraries it loads ([`elf`]),
//! optionally Envoy and iptables with theirs, files placed at chosen paths (each executable
//! with its libraries), other names for them (the `iptables-nft` family is one multi-call
//! binary), and the few files a container expects (`/etc/passwd` with the proxy user,
//! `/etc/nsswitch.conf` with files before DNS, `/tmp`). The entrypoint is meshbench unless another program is named. It is written as
//! an OCI image-layout archive (`oci-layout`, `index.json`, `blobs/sha256/…`), which
//! `ctr images import` loads into containerd and registry tools push. Every entry has owner
//! 0, a fixed mode and time 0, and entries are sorted, so the same binaries always give the
//! same digests.

pub mod elf;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use aws_lc_rs::digest::{Context, SHA256};
use oci_spec::image::{
    Arch, ConfigBuilder, DescriptorBuilder, ImageConfigurationBuilder, ImageIndexBuilder,
    ImageManifestBuilder, MediaType, Os, PlatformBuilder, RootFsBuilder, Sha256Digest,
};

/// Where binaries go in the image; `PATH` holds it.
pub const BIN_DIR: &str = "/usr/local/bin";
/// iptables in the image (the nf_tables multi-call binary, with its extensions): what a
/// sidecar mesh's init container runs as `IPTABLES iptables-restore FILE`.
pub const IPTABLES: &str = "/usr/local/bin/xtables-nft-multi";
/// The UID proxies run as (the lab's and Istio's), named in the image's `/etc/passwd`.
pub const PROXY_UID: u32 = 1337;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read {0}: {1}")]
    Read(PathBuf, #[source] std::io::Error),
    #[error("{path} is not an ELF executable: {reason}")]
    NotElf { path: PathBuf, reason: String },
    #[error("{library}, needed by {needed_by}, is in none of the loader's directories")]
    MissingLibrary { library: String, needed_by: PathBuf },
    #[error(
        "{host} finds its libraries relative to its own directory ($ORIGIN in its RUNPATH), so \
         it cannot be placed at {in_image}: place it at its own path (--file {host}={host}) \
         and give it another name with --alias {in_image}={host}"
    )]
    OriginRelative { host: String, in_image: String },
    #[error("cannot write {0}: {1}")]
    Write(PathBuf, #[source] std::io::Error),
    #[error("--tag {0:?} is not an image reference such as meshbench:0.1.0")]
    BadReference(String),
    #[error("{0:?} is not an absolute path in the image without `.` or `..` components")]
    BadImagePath(String),
    #[error("{path} is placed in the image twice: as {first} and as {second}")]
    Conflict {
        path: String,
        first: String,
        second: String,
    },
    #[error("building the image's metadata: {0}")]
    Oci(#[from] oci_spec::OciSpecError),
}

/// A binary that cannot be read or packed, or a malformed reference, is the input's fault;
/// a failed write is the machine's.
impl meshbench_role::InputFault for Error {
    fn is_bad_input(&self) -> bool {
        !matches!(self, Error::Write(..) | Error::Oci(_))
    }
}

/// What to put in the image and where to write it.
#[derive(Debug, Clone)]
pub struct ImageOptions {
    /// meshbench's binary; it becomes the entrypoint.
    pub binary: PathBuf,
    /// Further executables (Envoy, iptables), each with its libraries, in [`BIN_DIR`].
    pub extra: Vec<PathBuf>,
    /// Shared objects a packed program opens at run time (iptables' extensions), each with
    /// its libraries, at their paths on this machine, where that program looks for them.
    pub loadable: Vec<PathBuf>,
    /// Files at the paths the image's programs expect them (`/opt/cni/bin/istio-cni`); an
    /// executable brings its interpreter and libraries.
    pub placed: Vec<Placed>,
    /// Other names of files in the image, as symbolic links: `(name, target)`.
    pub aliases: Vec<(String, String)>,
    /// The program the container runs and its arguments (the image's `Entrypoint` and
    /// `Cmd`); meshbench, without arguments, when `None`.
    pub entrypoint: Option<(String, Vec<String>)>,
    /// The numeric `UID[:GID]` the container runs as (the image's `User`); root when `None`.
    /// Upstream images that run as a user (Istio's pilot, 1337) need it: a pod that asks
    /// for `runAsNonRoot` refuses an image that would run as root.
    pub user: Option<String>,
    /// `name:tag`, with a registry host in front or not.
    pub reference: String,
    /// The archive to write (replaced atomically).
    pub out: PathBuf,
}

/// A file of this machine at a path of the image.
#[derive(Debug, Clone)]
pub struct Placed {
    pub host: PathBuf,
    pub in_image: String,
}

impl std::str::FromStr for Placed {
    type Err = String;

    /// `HOST=IN_IMAGE`, as `--file` takes it.
    fn from_str(s: &str) -> Result<Self, String> {
        let (host, in_image) = s
            .split_once('=')
            .ok_or_else(|| format!("{s:?} is not HOST_PATH=PATH_IN_IMAGE"))?;
        let in_image = image_path(in_image).map_err(|e| e.to_string())?;
        Ok(Placed {
            host: PathBuf::from(host),
            in_image,
        })
    }
}

/// `path` if it is absolute and plain (no `.`, `..` or empty components), so that an entry
/// lands where it says.
pub fn image_path(path: &str) -> Result<String, Error> {
    let plain = path.starts_with('/')
        && path.len() > 1
        && path[1..]
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..")
        && !path.contains('\0');
    match plain {
        true => Ok(path.to_owned()),
        false => Err(Error::BadImagePath(path.to_owned())),
    }
}

/// The names the nf_tables multi-call binary answers to, as iptables' own packages install
/// them: programs that call `iptables-nft-save` or `ip6tables-restore` find them on `PATH`.
pub const IPTABLES_NAMES: [&str; 12] = [
    "iptables",
    "iptables-save",
    "iptables-restore",
    "ip6tables",
    "ip6tables-save",
    "ip6tables-restore",
    "iptables-nft",
    "iptables-nft-save",
    "iptables-nft-restore",
    "ip6tables-nft",
    "ip6tables-nft-save",
    "ip6tables-nft-restore",
];

/// What was written.
#[derive(Debug, Clone)]
pub struct BuiltImage {
    /// The reference containerd will know the image by (`docker.io/library/` added to a
    /// bare name, as every container tool does).
    pub reference: String,
    pub manifest_digest: String,
    /// Every file of the layer, by its path in the image.
    pub files: Vec<String>,
    pub archive_bytes: u64,
}

/// One layer entry: a file copied from the host, content of its own, or a link.
enum Source {
    Host(PathBuf),
    Text(String),
    Directory,
    Link(String),
}

struct Entry {
    source: Source,
    mode: u32,
}

/// iptables on this machine, as the image packs it: the nf_tables multi-call binary and the
/// extensions it loads (`<libdir>/xtables/*.so`); `None` when it is not installed.
pub fn iptables_on_host() -> Option<(PathBuf, Vec<PathBuf>)> {
    let binary = ["/usr/sbin/xtables-nft-multi", "/sbin/xtables-nft-multi"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())?;
    let mut extensions: Vec<PathBuf> = ["/usr/lib", "/usr/lib64", "/lib"]
        .iter()
        .flat_map(|lib| {
            let direct = PathBuf::from(lib).join("xtables");
            let multiarch = std::fs::read_dir(lib)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path().join("xtables"));
            std::iter::once(direct).chain(multiarch)
        })
        .filter(|dir| dir.is_dir())
        .flat_map(|dir| std::fs::read_dir(dir).into_iter().flatten().flatten())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "so") && p.is_file())
        .collect();
    extensions.sort();
    extensions.dedup();
    Some((binary, extensions))
}

/// Builds the image and writes its archive.
pub fn build_image(options: &ImageOptions) -> Result<BuiltImage, Error> {
    let reference = full_reference(&options.reference)?;
    let tag = reference
        .rsplit_once(':')
        .map_or("latest", |(_, t)| t)
        .to_owned();
    let entries = layer_entries(options)?;
    let files: Vec<String> = entries
        .iter()
        .filter(|(_, e)| !matches!(e.source, Source::Directory | Source::Link(_)))
        .map(|(p, _)| p.clone())
        .collect();

    let layer_tar = layer_tar(&entries)?;
    let diff_id = sha256_hex(&layer_tar);
    let layer = gzip(&layer_tar).map_err(|source| Error::Write(options.out.clone(), source))?;
    drop(layer_tar);
    let layer_digest = sha256_hex(&layer);

    let (entrypoint, cmd) = options
        .entrypoint
        .clone()
        .unwrap_or_else(|| (format!("{BIN_DIR}/meshbench"), Vec::new()));
    let mut runs = ConfigBuilder::default()
        .entrypoint(vec![entrypoint])
        .env(vec![format!(
            "PATH={BIN_DIR}:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin"
        )])
        .working_dir("/".to_owned());
    if !cmd.is_empty() {
        runs = runs.cmd(cmd);
    }
    if let Some(user) = &options.user {
        runs = runs.user(user.clone());
    }
    let config = ImageConfigurationBuilder::default()
        .architecture(arch())
        .os(Os::Linux)
        .config(runs.build()?)
        .rootfs(
            RootFsBuilder::default()
                .typ("layers".to_owned())
                .diff_ids(vec![format!("sha256:{diff_id}")])
                .build()?,
        )
        .build()?;
    let config_json = serde_json::to_vec(&config).expect("an image config serializes");
    let config_digest = sha256_hex(&config_json);

    let descriptor = |media: MediaType, hex: &str, size: usize| {
        DescriptorBuilder::default()
            .media_type(media)
            .digest(Sha256Digest::from_str(hex).expect("a sha256 digest"))
            .size(size as u64)
            .build()
    };
    let manifest = ImageManifestBuilder::default()
        .schema_version(2u32)
        .media_type(MediaType::ImageManifest)
        .config(descriptor(
            MediaType::ImageConfig,
            &config_digest,
            config_json.len(),
        )?)
        .layers(vec![descriptor(
            MediaType::ImageLayerGzip,
            &layer_digest,
            layer.len(),
        )?])
        .build()?;
    let manifest_json = serde_json::to_vec(&manifest).expect("a manifest serializes");
    let manifest_digest = sha256_hex(&manifest_json);

    let mut in_index = descriptor(
        MediaType::ImageManifest,
        &manifest_digest,
        manifest_json.len(),
    )?;
    in_index.set_platform(Some(
        PlatformBuilder::default()
            .architecture(arch())
            .os(Os::Linux)
            .build()?,
    ));
    in_index.set_annotations(Some(
        [
            ("org.opencontainers.image.ref.name".to_owned(), tag),
            ("io.containerd.image.name".to_owned(), reference.clone()),
        ]
        .into(),
    ));
    let index = ImageIndexBuilder::default()
        .schema_version(2u32)
        .media_type(MediaType::ImageIndex)
        .manifests(vec![in_index])
        .build()?;
    let index_json = serde_json::to_vec(&index).expect("an index serializes");

    let blobs = [
        (config_digest, config_json),
        (layer_digest, layer),
        (manifest_digest.clone(), manifest_json),
    ];
    let archive_bytes = write_archive(&options.out, &index_json, &blobs)?;
    Ok(BuiltImage {
        reference,
        manifest_digest: format!("sha256:{manifest_digest}"),
        files,
        archive_bytes,
    })
}

/// `name:tag` → `docker.io/library/name:tag`; a reference with a registry host stays.
fn full_reference(reference: &str) -> Result<String, Error> {
    let valid = !reference.is_empty()
        && reference
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-/:".contains(c))
        && !reference.starts_with(['/', ':', '.', '-'])
        && !reference.ends_with([':', '/']);
    if !valid {
        return Err(Error::BadReference(reference.to_owned()));
    }
    let with_tag = match reference
        .rsplit_once('/')
        .map_or(reference, |(_, last)| last)
        .contains(':')
    {
        true => reference.to_owned(),
        false => format!("{reference}:latest"),
    };
    let first = with_tag.split('/').next().unwrap_or_default();
    let has_host = with_tag.contains('/') && (first.contains('.') || first.contains(':'));
    Ok(match (has_host, with_tag.contains('/')) {
        (true, _) => with_tag,
        (false, true) => format!("docker.io/{with_tag}"),
        (false, false) => format!("docker.io/library/{with_tag}"),
    })
}

fn arch() -> Arch {
    match std::env::consts::ARCH {
        "aarch64" => Arch::ARM64,
        _ => Arch::Amd64,
    }
}

/// The layer's entries by path, directories included.
fn layer_entries(options: &ImageOptions) -> Result<BTreeMap<String, Entry>, Error> {
    let mut entries = BTreeMap::new();
    let mut add = |path: String, source: Source, mode: u32| {
        let mut dir = Path::new(&path).parent();
        while let Some(d) = dir.filter(|d| *d != Path::new("/")) {
            entries
                .entry(d.to_string_lossy().into_owned())
                .or_insert(Entry {
                    source: Source::Directory,
                    mode: 0o755,
                });
            dir = d.parent();
        }
        entries.insert(path, Entry { source, mode });
    };
    let mut placed_at = BTreeMap::new();
    for (in_image, real) in placed_files(&options.placed)? {
        if let Some(first) = placed_at.insert(in_image.clone(), real.clone()) {
            if first != real {
                return Err(Error::Conflict {
                    path: in_image,
                    first: first.display().to_string(),
                    second: real.display().to_string(),
                });
            }
        }
        if is_elf(&real)? {
            let closure = elf::closure(&real)?;
            if closure.origin_relative && Path::new(&in_image) != real {
                return Err(Error::OriginRelative {
                    host: real.display().to_string(),
                    in_image,
                });
            }
            for library in closure.files {
                let path = library.to_string_lossy().into_owned();
                add(path, Source::Host(library), 0o755);
            }
        }
        let mode = match is_executable(&real)? {
            true => 0o755,
            false => 0o644,
        };
        add(in_image, Source::Host(real), mode);
    }
    for (name, target) in &options.aliases {
        add(image_path(name)?, Source::Link(target.clone()), 0o777);
    }
    let binaries = std::iter::once((&options.binary, "meshbench".to_owned())).chain(
        options.extra.iter().map(|p| {
            (
                p,
                p.file_name()
                    .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
            )
        }),
    );
    for (binary, name) in binaries {
        let real = binary
            .canonicalize()
            .map_err(|source| Error::Read(binary.clone(), source))?;
        for library in elf::closure(&real)?.files {
            let path = library.to_string_lossy().into_owned();
            add(path, Source::Host(library), 0o755);
        }
        add(format!("{BIN_DIR}/{name}"), Source::Host(real), 0o755);
    }
    for object in &options.loadable {
        for library in elf::closure(object)?.files {
            let path = library.to_string_lossy().into_owned();
            add(path, Source::Host(library), 0o755);
        }
        let path = object.to_string_lossy().into_owned();
        add(path, Source::Host(object.clone()), 0o755);
    }
    add(
        "/etc/passwd".into(),
        Source::Text(format!(
            "root:x:0:0:root:/root:/sbin/nologin\n\
             meshbench-proxy:x:{PROXY_UID}:{PROXY_UID}::/nonexistent:/sbin/nologin\n\
             nobody:x:65534:65534::/nonexistent:/sbin/nologin\n"
        )),
        0o644,
    );
    add(
        "/etc/group".into(),
        Source::Text(format!(
            "root:x:0:\nmeshbench-proxy:x:{PROXY_UID}:\nnogroup:x:65534:\n"
        )),
        0o644,
    );
    // As every distribution's base image has it: the pod's /etc/hosts (where meshbench gives
    // pods the Services they call, as host aliases) before DNS. Without the file, glibc asks DNS
    // first and stops at its "no such name", so a cluster with DNS would hide the aliases.
    add(
        "/etc/nsswitch.conf".into(),
        Source::Text("passwd: files\ngroup: files\nhosts: files dns\n".into()),
        0o644,
    );
    add("/tmp".into(), Source::Directory, 0o1777);
    Ok(entries)
}

/// Every file `--file` places, as `(path in the image, real path on this machine)`: a file
/// as given, a directory as the files of its tree (sorted), each at its relative path under
/// the directory's place in the image (Cilium's BPF sources go in whole, as its image has
/// them). Links inside a tree are followed to files; a link to a directory is refused rather
/// than followed, so that a tree cannot lead outside itself or around in a loop.
fn placed_files(placed: &[Placed]) -> Result<Vec<(String, PathBuf)>, Error> {
    let mut files = Vec::new();
    for placed in placed {
        let real = placed
            .host
            .canonicalize()
            .map_err(|source| Error::Read(placed.host.clone(), source))?;
        if real.is_dir() {
            tree_files(&real, &placed.in_image, &mut files)?;
        } else {
            files.push((placed.in_image.clone(), real));
        }
    }
    Ok(files)
}

fn tree_files(dir: &Path, in_image: &str, files: &mut Vec<(String, PathBuf)>) -> Result<(), Error> {
    let read = |source| Error::Read(dir.to_path_buf(), source);
    let mut children = std::fs::read_dir(dir)
        .map_err(read)?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(read)?;
    children.sort();
    for child in children {
        let name = child
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| Error::BadImagePath(format!("{in_image}/{}", child.display())))?;
        let path = image_path(&format!("{in_image}/{name}"))?;
        let kind = std::fs::symlink_metadata(&child)
            .map_err(|source| Error::Read(child.clone(), source))?
            .file_type();
        if kind.is_dir() {
            tree_files(&child, &path, files)?;
            continue;
        }
        let real = child
            .canonicalize()
            .map_err(|source| Error::Read(child.clone(), source))?;
        if real.is_dir() {
            return Err(Error::Read(
                child,
                std::io::Error::other("a link to a directory inside a placed tree"),
            ));
        }
        files.push((path, real));
    }
    Ok(())
}

fn is_elf(path: &Path) -> Result<bool, Error> {
    use std::io::Read;
    let mut magic = [0u8; 4];
    let mut file = std::fs::File::open(path).map_err(|e| Error::Read(path.to_path_buf(), e))?;
    let read = file
        .read(&mut magic)
        .map_err(|e| Error::Read(path.to_path_buf(), e))?;
    Ok(read == 4 && magic == *b"\x7fELF")
}

fn is_executable(path: &Path) -> Result<bool, Error> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).map_err(|e| Error::Read(path.to_path_buf(), e))?;
    Ok(meta.permissions().mode() & 0o111 != 0)
}

/// The layer as an uncompressed tar: sorted, owner 0, time 0. It is built in memory, so
/// the only I/O that can fail is reading a host file, and the error names that file.
fn layer_tar(entries: &BTreeMap<String, Entry>) -> Result<Vec<u8>, Error> {
    let mut builder = tar::Builder::new(Vec::new());
    for (path, entry) in entries {
        let name = path.trim_start_matches('/');
        let mut header = tar::Header::new_ustar();
        header.set_mode(entry.mode);
        header.set_uid(0);
        header.set_gid(0);
        header.set_mtime(0);
        let in_memory = |source| Error::Write(PathBuf::from(path), source);
        match &entry.source {
            Source::Directory => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_size(0);
                builder
                    .append_data(&mut header, format!("{name}/"), std::io::empty())
                    .map_err(in_memory)?;
            }
            Source::Link(target) => {
                header.set_entry_type(tar::EntryType::Symlink);
                header.set_size(0);
                builder
                    .append_link(&mut header, name, target)
                    .map_err(in_memory)?;
            }
            Source::Text(text) => {
                header.set_entry_type(tar::EntryType::Regular);
                header.set_size(text.len() as u64);
                builder
                    .append_data(&mut header, name, text.as_bytes())
                    .map_err(in_memory)?;
            }
            Source::Host(host) => {
                let file = std::fs::File::open(host)
                    .map_err(|source| Error::Read(host.clone(), source))?;
                let len = file
                    .metadata()
                    .map_err(|source| Error::Read(host.clone(), source))?
                    .len();
                header.set_entry_type(tar::EntryType::Regular);
                header.set_size(len);
                builder
                    .append_data(&mut header, name, file)
                    .map_err(|source| Error::Read(host.clone(), source))?;
            }
        }
    }
    builder
        .into_inner()
        .map_err(|source| Error::Write(PathBuf::from("layer"), source))
}

fn gzip(data: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(data)?;
    encoder.finish()
}

fn sha256_hex(data: &[u8]) -> String {
    let mut context = Context::new(&SHA256);
    context.update(data);
    context
        .finish()
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Writes the image layout as a tar beside `out`, then renames it into place.
fn write_archive(out: &Path, index: &[u8], blobs: &[(String, Vec<u8>)]) -> Result<u64, Error> {
    let failed = |source| Error::Write(out.to_path_buf(), source);
    let partial = out.with_extension("partial");
    let file = std::fs::File::create(&partial).map_err(failed)?;
    let mut builder = tar::Builder::new(std::io::BufWriter::new(file));
    let mut append = |name: &str, data: &[u8]| {
        let mut header = tar::Header::new_ustar();
        header.set_mode(0o644);
        header.set_mtime(0);
        header.set_size(data.len() as u64);
        builder.append_data(&mut header, name, data)
    };
    append("oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#).map_err(failed)?;
    append("index.json", index).map_err(failed)?;
    for (hex, data) in blobs {
        append(&format!("blobs/sha256/{hex}"), data).map_err(failed)?;
    }
    let mut writer = builder.into_inner().map_err(failed)?;
    writer.flush().map_err(failed)?;
    drop(writer);
    std::fs::rename(&partial, out).map_err(failed)?;
    Ok(std::fs::metadata(out).map_err(failed)?.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_placed_file_names_a_plain_absolute_path_in_the_image() {
        let placed: Placed = "./istio-cni=/opt/cni/bin/istio-cni".parse().unwrap();
        assert_eq!(placed.host, PathBuf::from("./istio-cni"));
        assert_eq!(placed.in_image, "/opt/cni/bin/istio-cni");
        for bad in [
            "no-equals",
            "a=relative/path",
            "a=/",
            "a=/opt/../etc/passwd",
            "a=/opt/./x",
            "a=/opt//x",
            "a=/opt/x/",
        ] {
            assert!(bad.parse::<Placed>().is_err(), "{bad:?}");
        }
    }

    proptest! {
        /// Whatever the text, the parser answers without panicking, and a path it accepts
        /// stays under the image's root: absolute, no `..`, `.` or empty component.
        #[test]
        fn image_paths_never_escape_the_root(text in "\\PC{0,40}") {
            if let Ok(path) = image_path(&text) {
                prop_assert!(path.starts_with('/'));
                prop_assert!(path[1..].split('/').all(|c| !c.is_empty() && c != ".." && c != "."));
            }
            let _ = text.parse::<Placed>();
        }
    }

    #[test]
    fn a_placed_directory_places_its_tree_sorted_and_refuses_a_link_to_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        let tree = dir.path().join("bpf");
        std::fs::create_dir_all(tree.join("lib")).unwrap();
        std::fs::write(tree.join("bpf_lxc.c"), "int x;").unwrap();
        std::fs::write(tree.join("lib/common.h"), "#pragma once").unwrap();
        std::os::unix::fs::symlink(tree.join("bpf_lxc.c"), tree.join("alias.c")).unwrap();
        let placed = vec![Placed {
            host: tree.clone(),
            in_image: "/var/lib/cilium/bpf".into(),
        }];
        let files = placed_files(&placed).unwrap();
        let in_image: Vec<&str> = files.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            in_image,
            [
                "/var/lib/cilium/bpf/alias.c",
                "/var/lib/cilium/bpf/bpf_lxc.c",
                "/var/lib/cilium/bpf/lib/common.h",
            ]
        );
        assert_eq!(files[0].1, tree.join("bpf_lxc.c").canonicalize().unwrap());

        std::os::unix::fs::symlink(dir.path(), tree.join("lib/up")).unwrap();
        let err = placed_files(&placed).unwrap_err().to_string();
        assert!(err.contains("a link to a directory"), "{err}");
    }

    #[test]
    fn an_executable_that_finds_its_libraries_beside_it_stays_at_its_own_path() {
        let sysroot = std::process::Command::new("rustc")
            .args(["--print", "sysroot"])
            .output()
            .unwrap();
        let rustc = Path::new(String::from_utf8(sysroot.stdout).unwrap().trim())
            .join("bin/rustc")
            .canonicalize()
            .unwrap();
        let options = |in_image: &str| ImageOptions {
            binary: std::env::current_exe().unwrap(),
            extra: vec![],
            loadable: vec![],
            placed: vec![Placed {
                host: rustc.clone(),
                in_image: in_image.into(),
            }],
            aliases: vec![],
            entrypoint: None,
            user: None,
            reference: "meshbench:test".into(),
            out: PathBuf::from("/nonexistent"),
        };
        let Err(err) = layer_entries(&options("/usr/local/bin/rustc")) else {
            panic!("rustc placed away from its libraries");
        };
        let err = err.to_string();
        assert!(
            err.contains("relative to its own directory")
                && err.contains("--alias /usr/local/bin/rustc="),
            "{err}"
        );
        let entries = layer_entries(&options(&rustc.to_string_lossy())).unwrap();
        assert!(entries
            .keys()
            .any(|p| p.contains("librustc_driver") && !p.contains("..")));
    }

    #[test]
    fn bare_names_get_docker_hubs_library_and_a_tag() {
        for (given, full) in [
            ("meshbench:0.1.0", "docker.io/library/meshbench:0.1.0"),
            ("meshbench", "docker.io/library/meshbench:latest"),
            ("team/meshbench:1", "docker.io/team/meshbench:1"),
            ("localhost:5000/meshbench:1", "localhost:5000/meshbench:1"),
        ] {
            assert_eq!(full_reference(given).unwrap(), full);
        }
        for bad in ["", "mesh bench", ":1", "meshbench:", "a/"] {
            assert!(full_reference(bad).is_err(), "{bad:?}");
        }
    }
}
