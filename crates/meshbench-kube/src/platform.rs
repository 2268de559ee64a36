//! Kubernetes as a platform (the connected cluster is [`crate::cluster`]): a run's namespaces
//! and service accounts (a service account per workload, so SPIFFE identities mean what they
//! do in a mesh), the run's identities (meshbench's CA, as on the local lab; each pod is given
//! only its own), and each cell realized on the nodes its placement names ([`crate::site`]).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Node, ServiceAccount};
use kube::api::ListParams;
use kube::Api;
use meshbench_experiment::platform::{AtRest, CellPlace, Platform, Site, SiteError};
use meshbench_meshes::{BoxFuture, MeshPki, Scenario};
use meshbench_results::{MeshInstallation, UnavailableScenario};
use meshbench_topology::Topology;

use crate::cluster::KubePlatform;
use crate::objects;
use crate::site::KubeSite;
use crate::Error;

impl KubePlatform {
    /// A site for `topology` (its services applied), its nodes the cluster's schedulable
    /// nodes in name order; its files go to `dir`. What `realize` gives a cell, for callers
    /// that drive the site themselves (the verifier).
    pub async fn realize_topology(
        &self,
        topology: &Topology,
        dir: &std::path::Path,
    ) -> Result<KubeSite<'_>, Error> {
        let cluster_nodes = self.nodes().await?;
        let need = topology.nodes.len();
        if cluster_nodes.len() < need {
            return Err(Error::TooFewNodes {
                have: cluster_nodes.len(),
                need,
                names: cluster_nodes.join(", "),
            });
        }
        let spare = cluster_nodes.get(need).cloned();
        let nodes: BTreeMap<String, String> =
            topology.nodes.iter().cloned().zip(cluster_nodes).collect();
        KubeSite::realize(self, topology, dir, nodes, spare).await
    }

    /// The schedulable nodes, by name.
    pub(crate) async fn nodes(&self) -> Result<Vec<String>, Error> {
        let nodes = Api::<Node>::all(self.client.clone())
            .list(&ListParams::default())
            .await
            .map_err(Error::api("listing nodes"))?;
        let mut names: Vec<String> = nodes
            .items
            .into_iter()
            .filter(|n| {
                let unschedulable = n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true);
                let tainted = n
                    .spec
                    .as_ref()
                    .and_then(|s| s.taints.as_ref())
                    .is_some_and(|t| {
                        t.iter()
                            .any(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
                    });
                !unschedulable && !tainted
            })
            .filter_map(|n| n.metadata.name)
            .collect();
        names.sort();
        Ok(names)
    }
}

impl Platform for KubePlatform {
    fn name(&self) -> String {
        format!("kubernetes/{} ({})", self.version, self.server)
    }

    /// Every application runs on a cluster: E1's echo, E3's application with its
    /// experimenter in a pod, and E4's counter chain enrolled as a whole.
    fn check(
        &self,
        _profile: &meshbench_experiment::Profile,
    ) -> Result<(), meshbench_experiment::Error> {
        Ok(())
    }

    /// Within a node too: the server pod's interface is recorded, and ambient documents that
    /// same-node traffic is encrypted as well.
    fn records_wire(&self, _placement: meshbench_experiment::Placement) -> bool {
        self.capture_wire
    }

    /// A mesh without a Kubernetes flavour yet; the binaries of the rest are in the image.
    fn unavailable(&self, mesh: Scenario) -> Option<UnavailableScenario> {
        if let Some(installed) = self.installed.get(mesh.name()) {
            return installed.unusable.as_ref().map(|why| UnavailableScenario {
                name: mesh.name().to_owned(),
                reason: why.clone(),
                install: String::new(),
            });
        }
        if mesh.cluster().is_some() {
            return None;
        }
        let available: Vec<&str> = Scenario::all()
            .filter(|m| m.cluster().is_some())
            .map(|m| m.name())
            .collect();
        Some(UnavailableScenario {
            name: mesh.name().to_owned(),
            reason: format!(
                "mesh {} does not run on Kubernetes yet (on a cluster: {})",
                mesh.name(),
                available.join(", ")
            ),
            install: String::new(),
        })
    }

    fn cluster_meshes(&self) -> Vec<MeshInstallation> {
        self.installed
            .iter()
            .map(|(scenario, i)| MeshInstallation {
                scenario: (*scenario).to_owned(),
                usable: i.unusable.is_none(),
                version: i.version.clone(),
                mode: i.mode.clone(),
                namespace: i.namespace.clone(),
                revision: i.revision.clone(),
                reason: i.unusable.clone(),
            })
            .collect()
    }

    /// The schedulable nodes' machines with no cell's pods on them. A failure to read them
    /// is told in the log and leaves the cells judged against no background.
    fn background(&self, window: Duration, interval: Duration) -> BoxFuture<'_, Option<AtRest>> {
        Box::pin(async move {
            match self.at_rest(window, interval).await {
                Ok(at_rest) => at_rest,
                Err(e) => {
                    tracing::warn!(error = %e, "the cluster's background could not be read");
                    None
                }
            }
        })
    }

    fn prepare<'a>(
        &'a mut self,
        topology: &'a Topology,
        policy: &'a meshbench_policy::Policy,
    ) -> BoxFuture<'a, Result<(), meshbench_experiment::Error>> {
        Box::pin(async move {
            let platform_err = |e: Error| meshbench_experiment::Error::Mesh(e.into());
            let shared = MeshPki::for_run(&self.work_dir, topology, policy);
            self.pki = Some(shared.map_err(meshbench_experiment::Error::Mesh)?);
            // The run's own namespace holds meshbench's CA service, whatever the topology's
            // namespaces are.
            let run_namespace = meshbench_experiment::NAMESPACE.to_owned();
            let namespaces = std::iter::once(&run_namespace)
                .chain(topology.workloads.iter().map(|w| &w.namespace));
            for topology_namespace in namespaces {
                if self.namespaces.contains_key(topology_namespace) {
                    continue;
                }
                let namespace = self.namespace_for(topology_namespace);
                let api = Api::<Namespace>::all(self.client.clone());
                objects::apply(&api, &objects::namespace(&namespace, &self.run))
                    .await
                    .map_err(platform_err)?;
                self.namespaces
                    .insert(topology_namespace.clone(), namespace);
            }
            for workload in &topology.workloads {
                let namespace = self.namespace_for(&workload.namespace);
                let api = Api::<ServiceAccount>::namespaced(self.client.clone(), &namespace);
                objects::apply(
                    &api,
                    &objects::service_account(&workload.service_account, &namespace, &self.run),
                )
                .await
                .map_err(platform_err)?;
            }
            Ok(())
        })
    }

    fn realize<'a>(
        &'a self,
        cell: CellPlace<'a>,
    ) -> BoxFuture<'a, Result<Box<dyn Site<'a> + 'a>, SiteError>> {
        Box::pin(async move {
            let site = self.realize_topology(cell.topology, cell.dir).await?;
            Ok(Box::new(site) as Box<dyn Site<'a> + 'a>)
        })
    }
}
