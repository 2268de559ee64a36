//! Where a mesh's components run in the local lab ([`LabContext`]: network, PKI, proxy area,
//! cgroups, CPUs) and what every mesh module uses to start them: our roles from their typed
//! configs, third-party proxies from theirs, as the proxy user when they are proxies, with
//! their configs written where that user can read them.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use meshbench_dataplane::{NodeAgentFile, SidecarFile};
use meshbench_identity::{CaServerFile, ClientTlsFiles};
use meshbench_lab::{CgroupFs, LabComponent, Launch, Readiness};
use meshbench_netlab::{LabNetwork, SidecarCapture, WireTap, PROXY_UID};
use meshbench_role::RoleConfig;
use meshbench_topology::Pod;

use crate::pki::PkiLayout;
use crate::ports::Ports;
use crate::{Error, MeshPki, ProxyArea};

const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// Our proxies' final metrics: `<work dir>/<component>.metrics/metrics.prom`.
pub const PROXY_METRICS_DIR_SUFFIX: &str = ".metrics";
pub const PROXY_METRICS_FILE: &str = "metrics.prom";

/// Where a lab's components run: the network, the PKI, the binary, the cell's directory,
/// cgroups and CPUs. Everything that starts a component goes through it.
pub struct LabContext<'a> {
    pub net: &'a LabNetwork,
    pub pki: &'a MeshPki,
    /// The meshbench binary (sidecars, agents and the CA are roles of it).
    pub exe: &'a Path,
    /// The cell's directory in the results: logs, and a copy of every config for the record.
    pub work_dir: &'a Path,
    /// The run's proxy area, and this cell's directory in it: what proxies read and write.
    pub area: &'a ProxyArea,
    pub cell_area: &'a Path,
    pub cgroups: Option<&'a CgroupFs>,
    /// CPUs for the system under test (apps, proxies), as a taskset list.
    pub sut_cpus: Option<String>,
    /// Recording relays standing for the link between nodes (loopback backend, when the
    /// cell wants wire evidence): what the client side dials on the server side goes
    /// through them.
    pub wire: Option<&'a WireTap>,
}

/// What an adapter needs to know about the cell it deploys into: the lab, and the client
/// and server pods with the service in front of the server.
pub struct MeshContext<'a> {
    pub lab: LabContext<'a>,
    pub client_pod: &'a Pod,
    pub server_pod: &'a Pod,
    /// The service in front of the server pod.
    pub service: &'a str,
}

impl<'a> std::ops::Deref for MeshContext<'a> {
    type Target = LabContext<'a>;

    fn deref(&self) -> &LabContext<'a> {
        &self.lab
    }
}

impl MeshContext<'_> {
    pub(crate) fn server_svid(&self) -> crate::WorkloadSvid {
        let w = &self.server_pod.workload;
        self.pki.svid(&w.namespace, &w.service_account)
    }

    pub(crate) fn client_svid(&self) -> crate::WorkloadSvid {
        let w = &self.client_pod.workload;
        self.pki.svid(&w.namespace, &w.service_account)
    }

    /// The URL of the service as the client dials it, plain or TLS.
    pub(crate) fn service_url(&self, scheme: &str) -> Result<String, Error> {
        if self.wire.is_some() {
            let relay = self.across_link(self.net.service_addr(self.service)?)?;
            return Ok(format!("{scheme}://{relay}/"));
        }
        Ok(format!(
            "{scheme}://{}/",
            self.net.service_host(self.service)?
        ))
    }
}

/// A deployed mesh: its components and how the client reaches the server through it.
pub struct Deployment {
    pub components: Vec<LabComponent>,
    pub url: String,
    /// The client's own TLS, when the app does mTLS itself.
    pub client_tls: Option<ClientTlsFiles>,
}

/// Where a component runs.
pub(crate) enum Place<'a> {
    Pod(&'a str),
    Node(&'a str),
}

impl LabContext<'_> {
    /// The address that reaches server-side `addr` from the client side: through the wire
    /// tap's relay where there is one.
    pub(crate) fn across_link(&self, addr: SocketAddr) -> Result<SocketAddr, Error> {
        match self.wire {
            Some(tap) => Ok(tap.relay_to(addr)?),
            None => Ok(addr),
        }
    }

    /// How to start a pod's app (named after the pod) in its own cgroup, on `cpus`.
    pub fn app_launch(&self, pod: &Pod, cpus: Option<String>) -> Result<Launch, Error> {
        let mut launch = self.launch(&pod.name, &Place::Pod(&pod.name), false)?;
        launch.cpus = cpus;
        Ok(launch)
    }

    /// How to start a component at `place`, in a cgroup of its own, on the system under
    /// test's CPUs.
    pub(crate) fn launch(
        &self,
        name: &str,
        place: &Place<'_>,
        as_proxy: bool,
    ) -> Result<Launch, Error> {
        let mut launch = match place {
            Place::Pod(pod) => self.net.launch_in_pod(pod)?,
            Place::Node(node) => self.net.launch_on_node(node)?,
        };
        if let Some(fs) = self.cgroups {
            launch.cgroup = Some(fs.create(self.net.id(), name)?);
        }
        launch.cpus = self.sut_cpus.clone();
        if as_proxy {
            launch.run_as = Some(PROXY_UID);
        }
        Ok(launch)
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn start(
        &self,
        name: &str,
        role: &str,
        place: Place<'_>,
        as_proxy: bool,
        program: &Path,
        args: Vec<String>,
        readiness: Readiness,
    ) -> Result<LabComponent, Error> {
        let launch = self.launch(name, &place, as_proxy)?;
        Ok(LabComponent::start(
            name,
            role,
            &launch,
            program,
            &args,
            readiness,
            READY_TIMEOUT,
        )
        .await?)
    }

    /// Writes `config` (as `<name>.yaml`) and starts meshbench's role `name` from it.
    pub(crate) async fn start_role<C: RoleConfig>(
        &self,
        name: &str,
        role: &str,
        place: Place<'_>,
        as_proxy: bool,
        config: &C,
    ) -> Result<LabComponent, Error> {
        let path = self.write(&format!("{name}.yaml"), &config.to_yaml())?;
        let args = C::command_line(&path);
        self.start(
            name,
            role,
            place,
            as_proxy,
            self.exe,
            args,
            Readiness::ReadyLine,
        )
        .await
    }

    /// Writes a component's config where the proxy user can read it, and a copy into the
    /// results; returns the path the component is given.
    pub fn write(&self, name: &str, contents: &str) -> Result<PathBuf, Error> {
        let record = self.work_dir.join(name);
        std::fs::write(&record, contents).map_err(|source| Error::Io {
            path: record.clone(),
            source,
        })?;
        self.area.write(self.cell_area, name, contents.as_bytes())
    }

    /// Where our proxy `component` writes its final metrics when it stops
    /// (`<component>.metrics/metrics.prom` in the cell's area, collected into the results).
    pub(crate) fn metrics_file(&self, component: &str) -> Result<PathBuf, Error> {
        Ok(self
            .proxy_dir(&format!("{component}{PROXY_METRICS_DIR_SUFFIX}"))?
            .join(PROXY_METRICS_FILE))
    }

    /// A directory of the cell's area the proxy user may write to; copied into the results
    /// when the cell ends unless `name` ends with [`crate::PRIVATE_SUFFIX`].
    pub(crate) fn proxy_dir(&self, name: &str) -> Result<PathBuf, Error> {
        self.area.private_dir(self.cell_area.join(name))
    }

    pub(crate) fn pod_ip(&self, pod: &Pod) -> Result<IpAddr, Error> {
        Ok(self.net.pod_ip(&pod.name)?)
    }

    /// The CA service, on the first node (the lab's control plane).
    pub(crate) async fn control_plane(&self) -> Result<(LabComponent, SocketAddr), Error> {
        let node = self.net.topology().nodes[0].clone();
        let listen = SocketAddr::new(self.net.node_bind_ip(&node)?, Ports::CA);
        let mut file = CaServerFile::new(self.pki.dir.clone(), listen);
        if let Some(ttl) = self.pki.svid_ttl {
            file.ttl = ttl;
        }
        let ca = self
            .start_role("ca", "control-plane", Place::Node(&node), false, &file)
            .await?;
        Ok((ca, SocketAddr::new(self.net.node_ip(&node)?, Ports::CA)))
    }

    /// The lab's credentials as our proxies read them: the run's area.
    pub(crate) fn pki_layout<'s>(
        &self,
        svid: &'s dyn Fn(&Pod) -> (PathBuf, PathBuf),
    ) -> PkiLayout<'s> {
        PkiLayout {
            ca: self.pki.ca.clone(),
            policy: self.pki.policy.clone(),
            svid,
        }
    }

    /// A pod's SVID in the run's area: certificate and key.
    pub(crate) fn svid_files(&self, pod: &Pod) -> (PathBuf, PathBuf) {
        let svid = self
            .pki
            .svid(&pod.workload.namespace, &pod.workload.service_account);
        (svid.cert, svid.key)
    }

    /// Starts meshbench's sidecar (`args` from [`LabContext::sidecar_args`] and more) in
    /// `pod` as the proxy user, then captures the pod's traffic into it.
    pub(crate) async fn start_our_sidecar(
        &self,
        pod: &Pod,
        mut file: SidecarFile,
        capture: &SidecarCapture,
    ) -> Result<LabComponent, Error> {
        let name = format!("{}-sidecar", pod.name);
        file.metrics_file = file.metrics.then(|| self.metrics_file(&name)).transpose()?;
        let sidecar = self
            .start_role(&name, "sidecar", Place::Pod(&pod.name), true, &file)
            .await?;
        self.pod_capture(pod, capture)?;
        Ok(sidecar)
    }

    /// Starts meshbench's node agent from `file` on its node, on one thread, keeping its
    /// final metrics.
    pub(crate) async fn start_node_agent(
        &self,
        mut file: NodeAgentFile,
    ) -> Result<LabComponent, Error> {
        let name = format!("{}-agent", file.node);
        file.threads = Some(1);
        file.metrics_file = Some(self.metrics_file(&name)?);
        let node = file.node.clone();
        self.start_role(&name, "node-agent", Place::Node(&node), false, &file)
            .await
    }

    pub(crate) fn pod_capture(&self, pod: &Pod, capture: &SidecarCapture) -> Result<(), Error> {
        if self.net.captures() {
            self.net.capture_sidecar(&pod.name, capture)?;
        }
        Ok(())
    }
}
