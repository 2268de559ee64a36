//! `meshbench harness linkerd`: the control-plane harness that lets linkerd2-proxy run
//! outside Kubernetes (identity with meshbench's CA, policy, destination), for the data plane
//! bench. A harness for a proxy, not a mesh.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use meshbench_identity::CertificateAuthority;
use meshbench_lab::ReadyEvent;
use meshbench_linkerd_harness::LinkerdHarnessFile;

#[derive(Debug, Subcommand)]
pub enum HarnessCommand {
    /// Answer linkerd2-proxy's control-plane APIs on a loopback address (plaintext gRPC, as
    /// the proxy speaks to a loopback control plane): Identity/Certify signed by meshbench's
    /// CA for the workloads the file names by token, outbound and inbound policy, and
    /// Destination.Get for its services. Prints a ready line with the address.
    Linkerd(LinkerdArgs),
}

#[derive(Debug, Args)]
pub struct LinkerdArgs {
    /// The configuration (YAML, `LinkerdHarnessFile`): the CA's directory, the loopback
    /// address, the workloads and their token files, the services.
    #[arg(long)]
    config: PathBuf,
}

pub fn run(cmd: HarnessCommand) -> anyhow::Result<()> {
    match cmd {
        HarnessCommand::Linkerd(args) => serve_linkerd(&args.config),
    }
}

fn serve_linkerd(config: &std::path::Path) -> anyhow::Result<()> {
    let (file, options) = LinkerdHarnessFile::load(config)?;
    let ca = CertificateAuthority::load(&file.dir)?;
    let runtime = meshbench_workload::role_runtime(Some(1))?;
    runtime.block_on(async move {
        let harness = meshbench_linkerd_harness::bind(ca, file.listen, options).await?;
        let ready = ReadyEvent::ready(Some(harness.local_addr()?.to_string()));
        println!("{}", serde_json::to_string(&ready)?);
        harness.serve(super::workload::shutdown_signal()).await;
        Ok(())
    })
}
