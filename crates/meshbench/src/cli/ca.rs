//! `meshbench ca init|issue|serve|istio`: the built-in CA on disk, as the lab's control plane
//! that renews workload SVIDs, and answering Istio's certificate API for Istio's own proxies.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use meshbench_identity::{
    bind_ca_server, bind_istio_ca, CaServerFile, CertificateAuthority, IssueOptions, IstioCaFile,
};
use meshbench_lab::ReadyEvent;

use super::args;

#[derive(Debug, Subcommand)]
pub enum CaCommand {
    /// Create a root CA (ca.pem, ca.key) for a trust domain.
    Init(InitArgs),
    /// Issue a workload SVID (<ns>.<sa>.pem and .key) from an existing CA.
    Issue(IssueArgs),
    /// Issue an intermediate CA (<stem>.pem and .key, ECDSA P-256, CA:TRUE pathlen:0) from an
    /// existing CA, for a mesh whose own CA issues under meshbench's root: Linkerd's issuer,
    /// named identity.linkerd.cluster.local.
    Intermediate(IntermediateArgs),
    /// Serve SVID renewals over mTLS (POST a CSR to /v1/svid), authenticated by the caller's
    /// current SVID.
    Serve(ServeArgs),
    /// Answer Istio's certificate API (istio.v1.auth.IstioCertificateService, gRPC over TLS)
    /// for the callers the file names, each by a bearer token: ztunnel gets its SVIDs from
    /// meshbench's CA as it would from istiod.
    Istio(IstioArgs),
    /// Ask an Istio CA (istiod, or `ca istio`) for an SVID with a service-account token, as
    /// ztunnel does: writes <name>.pem (the chain to present), <name>.key and
    /// <name>.root.pem (the root the chain ends in), and prints {"cert", "key", "root",
    /// "not_after"} as JSON.
    RequestIstio(RequestIstioArgs),
    /// Ask Linkerd's identity controller for a certificate with a service-account token, as
    /// linkerd2-proxy does (io.linkerd.proxy.identity.Identity/Certify): writes <name>.pem
    /// (the chain to present), <name>.key and <name>.root.pem (the trust anchors), and prints
    /// {"cert", "key", "root", "not_after"} as JSON. The controller decides the lifetime.
    RequestLinkerd(RequestLinkerdArgs),
}

#[derive(Debug, Args)]
pub struct RequestLinkerdArgs {
    /// The controller's `host:port` (the proxies' LINKERD2_PROXY_IDENTITY_SVC_ADDR).
    #[arg(long)]
    address: String,
    /// The identity its serving certificate carries (LINKERD2_PROXY_IDENTITY_SVC_NAME).
    #[arg(long)]
    server_name: String,
    /// The trust anchors (PEM).
    #[arg(long)]
    root: PathBuf,
    /// A file holding a service-account token for audience identity.l5d.io.
    #[arg(long)]
    token_file: PathBuf,
    /// The identity asked for (`<sa>.<ns>.serviceaccount.identity.linkerd.<trust domain>`).
    #[arg(long)]
    identity: String,
    #[arg(long, default_value = ".")]
    out: PathBuf,
    #[arg(long)]
    name: String,
}

#[derive(Debug, Args)]
pub struct RequestIstioArgs {
    /// The CA's `host:port` (istiod's 15012).
    #[arg(long)]
    address: String,
    /// The name its serving certificate carries.
    #[arg(long, default_value = meshbench_identity::ISTIOD_HOSTNAME)]
    server_name: String,
    /// The root its serving certificate chains to (PEM).
    #[arg(long)]
    root: PathBuf,
    /// A file holding the bearer token (a service-account token for audience istio-ca).
    #[arg(long)]
    token_file: PathBuf,
    /// The SPIFFE ID asked for; the answer must carry it.
    #[arg(long)]
    identity: String,
    #[arg(long, value_parser = super::args::positive_duration, default_value = "1h")]
    ttl: Duration,
    /// The cluster whose API server reviews the token (istiod's `ClusterID`).
    #[arg(long, default_value = "Kubernetes")]
    cluster_id: String,
    #[arg(long, default_value = ".")]
    out: PathBuf,
    #[arg(long)]
    name: String,
}

#[derive(Debug, Args)]
pub struct IstioArgs {
    /// The configuration (YAML, `IstioCaFile`): the CA's directory, the address, the callers
    /// and their token files.
    #[arg(long)]
    config: PathBuf,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The whole configuration as a file (YAML, `CaServerFile`); no other flag then.
    #[arg(long, conflicts_with_all = ["dir", "listen", "ttl", "handshake_timeout"])]
    config: Option<PathBuf>,
    /// Directory of the CA.
    #[arg(long, default_value = "meshbench-ca")]
    dir: PathBuf,
    #[arg(long, default_value = "127.0.0.1:15012")]
    listen: SocketAddr,
    /// Lifetime of the SVIDs it signs.
    #[arg(long, value_parser = args::duration, default_value = "24h")]
    ttl: Duration,
    /// From connecting to a finished TLS handshake (and to a complete request head).
    #[arg(long, value_parser = super::args::positive_duration, default_value = "10s")]
    handshake_timeout: Duration,
}

#[derive(Debug, Args)]
pub struct InitArgs {
    /// Directory for ca.pem and ca.key.
    #[arg(long, default_value = "meshbench-ca")]
    dir: PathBuf,
    #[arg(long, default_value = "cluster.local")]
    trust_domain: String,
}

#[derive(Debug, Args)]
pub struct IntermediateArgs {
    /// The intermediate's name: its subject's CN and its DNS SAN.
    #[arg(long)]
    name: String,
    /// Directory of the CA that signs it.
    #[arg(long, default_value = "meshbench-ca")]
    dir: PathBuf,
    /// Where to write it (default: the CA directory).
    #[arg(long)]
    out: Option<PathBuf>,
    /// File stem: <stem>.pem and <stem>.key.
    #[arg(long, default_value = "issuer")]
    stem: String,
    /// Lifetime (at most the root's year).
    #[arg(long, value_parser = args::positive_duration, default_value = "8760h")]
    ttl: Duration,
}

#[derive(Debug, Args)]
pub struct IssueArgs {
    /// Namespace of the workload.
    #[arg(long)]
    ns: String,
    /// Service account of the workload.
    #[arg(long)]
    sa: String,
    /// Directory of the CA.
    #[arg(long, default_value = "meshbench-ca")]
    dir: PathBuf,
    /// Where to write the SVID (default: the CA directory).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Lifetime of the SVID.
    #[arg(long, value_parser = args::duration, default_value = "24h")]
    ttl: Duration,
    /// Extra DNS SAN (repeatable), for tools that check host names.
    #[arg(long = "dns")]
    dns_names: Vec<String>,
    /// Extra IP SAN (repeatable).
    #[arg(long = "ip")]
    ip_addresses: Vec<IpAddr>,
}

pub fn run(command: CaCommand) -> anyhow::Result<()> {
    match command {
        CaCommand::Init(a) => {
            let ca = CertificateAuthority::init(&a.dir, &a.trust_domain)?;
            println!(
                "created CA for trust domain {} in {}",
                ca.trust_domain(),
                a.dir.join("ca.pem").display()
            );
        }
        CaCommand::Intermediate(a) => {
            let ca = CertificateAuthority::load(&a.dir)?;
            let issued = ca.issue_intermediate(&a.name, a.ttl)?;
            let (cert, _key) = issued.write(a.out.as_ref().unwrap_or(&a.dir), &a.stem)?;
            println!(
                "issued intermediate CA {} until {} in {}",
                a.name,
                issued.not_after,
                cert.display()
            );
        }
        CaCommand::Issue(a) => {
            let ca = CertificateAuthority::load(&a.dir)?;
            let svid = ca.issue(
                &a.ns,
                &a.sa,
                &IssueOptions {
                    ttl: Some(a.ttl),
                    dns_names: a.dns_names,
                    ip_addresses: a.ip_addresses,
                },
            )?;
            let out = a.out.unwrap_or(a.dir);
            let (cert, key) = svid.write(&out, &format!("{}.{}", a.ns, a.sa))?;
            println!(
                "issued {} (valid until {}): {} {}",
                svid.spiffe_id,
                svid.not_after,
                cert.display(),
                key.display()
            );
        }
        CaCommand::Serve(a) => serve(a)?,
        CaCommand::Istio(a) => serve_istio(&a.config)?,
        CaCommand::RequestIstio(a) => request_istio(a)?,
        CaCommand::RequestLinkerd(a) => request_linkerd(a)?,
    }
    Ok(())
}

fn serve(a: ServeArgs) -> anyhow::Result<()> {
    let file = match &a.config {
        Some(path) => CaServerFile::load(path)?,
        None => CaServerFile {
            dir: a.dir,
            listen: a.listen,
            ttl: a.ttl,
            handshake_timeout: a.handshake_timeout,
        },
    };
    let ca = CertificateAuthority::load(&file.dir)?;
    let runtime = meshbench_workload::role_runtime(Some(1))?;
    runtime.block_on(async move {
        let server = bind_ca_server(ca, file.listen, file.ttl)
            .await?
            .with_handshake_timeout(file.handshake_timeout);
        let ready = ReadyEvent::ready(Some(server.local_addr()?.to_string()));
        println!("{}", serde_json::to_string(&ready)?);
        server.serve(super::workload::shutdown_signal()).await;
        Ok(())
    })
}

fn serve_istio(config: &std::path::Path) -> anyhow::Result<()> {
    let file = IstioCaFile::load(config)?;
    let callers = file.read_callers()?;
    let ca = CertificateAuthority::load(&file.dir)?;
    let runtime = meshbench_workload::role_runtime(Some(1))?;
    runtime.block_on(async move {
        let server = bind_istio_ca(ca, file.listen, callers, &file.options()).await?;
        let ready = ReadyEvent::ready(Some(server.local_addr()?.to_string()));
        println!("{}", serde_json::to_string(&ready)?);
        server.serve(super::workload::shutdown_signal()).await;
        Ok(())
    })
}

fn read_input(path: &std::path::Path) -> Result<String, meshbench_identity::Error> {
    std::fs::read_to_string(path).map_err(|source| meshbench_identity::Error::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Writes what a mesh's CA issued as `<name>.pem`, `<name>.key` and `<name>.root.pem` in
/// `out`, and prints where, with the leaf's notAfter, as JSON.
fn write_issued(
    out: &std::path::Path,
    name: &str,
    chain_pem: &str,
    key_pem: &str,
    root_pem: &str,
    not_after: i64,
) -> anyhow::Result<()> {
    meshbench_identity::create_private_dir(out)?;
    let cert = out.join(format!("{name}.pem"));
    let key = out.join(format!("{name}.key"));
    let root = out.join(format!("{name}.root.pem"));
    meshbench_identity::write_secret(&cert, chain_pem.as_bytes())?;
    meshbench_identity::write_secret(&key, key_pem.as_bytes())?;
    meshbench_identity::write_secret(&root, root_pem.as_bytes())?;
    println!(
        "{}",
        serde_json::json!({
            "cert": cert,
            "key": key,
            "root": root,
            "not_after": not_after,
        })
    );
    Ok(())
}

fn request_istio(a: RequestIstioArgs) -> anyhow::Result<()> {
    let request = meshbench_identity::IstioSvidRequest {
        address: a.address,
        server_name: a.server_name,
        root_pem: read_input(&a.root)?,
        identity: meshbench_identity::SpiffeId::parse(&a.identity)?,
        ttl: a.ttl,
        cluster_id: a.cluster_id,
    };
    let token = read_input(&a.token_file)?;
    let runtime = meshbench_workload::role_runtime(Some(1))?;
    let svid = runtime.block_on(meshbench_identity::request_istio_svid(&request, &token))?;
    // The workloads' root is the one the answer's chain ends in, which the mesh's proxies
    // trust; it may differ from the root of the CA's serving certificate (an external istiod
    // serves with a certificate of its own).
    let workload_root = svid.root_pem.clone().unwrap_or(request.root_pem.clone());
    write_issued(
        &a.out,
        &a.name,
        &svid.chain_pem,
        &svid.key_pem,
        &workload_root,
        svid.not_after,
    )
}

fn request_linkerd(a: RequestLinkerdArgs) -> anyhow::Result<()> {
    let request = meshbench_identity::LinkerdCertifyRequest {
        address: a.address,
        server_name: a.server_name,
        trust_anchors_pem: read_input(&a.root)?,
        identity: a.identity,
    };
    let token = read_input(&a.token_file)?;
    let runtime = meshbench_workload::role_runtime(Some(1))?;
    let issued = runtime.block_on(meshbench_identity::request_linkerd_certificate(
        &request, &token,
    ))?;
    // Linkerd's proxies trust the anchors, which its identity controller's own serving
    // certificate chains to as well.
    write_issued(
        &a.out,
        &a.name,
        &issued.chain_pem,
        &issued.key_pem,
        &request.trust_anchors_pem,
        issued.not_after,
    )
}
