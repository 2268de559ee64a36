//! The cluster's machines at rest: each schedulable node's whole CPU read through its kubelet
//! with no cell's pods running, as a cell's machines are read (the same summaries, the same
//! interval, nodes on one kernel read once as one machine). What the kubelets, the container
//! runtimes, the control planes, the meshes' idle parts and meshbench's own reading of the
//! summaries take anyway: the background a cell's CPU outside its pods is judged against.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use meshbench_experiment::platform::AtRest;
use meshbench_results::{cores_per_interval, MachineBackground, Sample, SampleSeries};

use crate::cluster::KubePlatform;
use crate::stats::{
    node_facts, per_machine, NodeFacts, SummarySampler, MIN_SAMPLE_INTERVAL, SOURCE,
};
use crate::Error;

impl KubePlatform {
    /// Every schedulable node's machine over `window`, read every `interval` (at least the
    /// cells' shortest); `Ok(None)` where no node's kubelet gave a node figure.
    pub(crate) async fn at_rest(
        &self,
        window: Duration,
        interval: Duration,
    ) -> Result<Option<AtRest>, Error> {
        let names: BTreeSet<String> = self.nodes().await?.into_iter().collect();
        let interval = interval.max(MIN_SAMPLE_INTERVAL);
        let sampler = SummarySampler::start_nodes(self.reader.clone(), names, interval);
        tokio::time::sleep(window).await;
        let readings = sampler.finish().await;
        let api = Api::<Node>::all(self.client.clone());
        let mut facts = vec![];
        for (name, _) in &readings.nodes {
            match api.get(name).await {
                Ok(node) => facts.extend(node_facts(&node)),
                Err(e) => tracing::debug!(node = %name, error = %e, "node unreadable"),
            }
        }
        let machines = machines_at_rest(&facts, &readings.nodes, interval);
        Ok((!machines.is_empty()).then_some(AtRest { interval, machines }))
    }
}

/// One machine per kernel, as a cell's machines are made: the first node of each boot id
/// read, the others named beside it; each machine's cores over every whole `interval` its
/// readings span. A node with fewer than two readings is left out.
fn machines_at_rest(
    facts: &[NodeFacts],
    series: &[(String, SampleSeries)],
    interval: Duration,
) -> Vec<MachineBackground> {
    let interval_ns = u64::try_from(interval.as_nanos()).unwrap_or(u64::MAX);
    let read = |fact: &NodeFacts| {
        let (_, s) = series.iter().find(|(n, _)| *n == fact.name)?;
        let (first, last) = (s.samples.first()?, s.samples.last()?);
        let cores = cores_per_interval(
            &s.samples,
            (first.t_ns, last.t_ns),
            interval_ns,
            |r: &Sample| r.t_ns,
            |r: &Sample| r.cpu_ns as f64,
        );
        if cores.is_empty() {
            tracing::debug!(node = %fact.name, "too few readings of the node at rest");
            return None;
        }
        Some(MachineBackground {
            source: SOURCE.to_owned(),
            node: Some(fact.name.clone()),
            same_machine_nodes: vec![],
            cpus: fact.cpus,
            cores,
        })
    };
    per_machine(facts, read, |machine, fact| {
        machine.same_machine_nodes.push(fact.name.clone())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::test_nodes::{busy, fact};

    #[test]
    fn nodes_on_one_kernel_are_one_machine_at_rest() {
        let series = [
            busy("node-1", 0.25, 6),
            busy("node-2", 0.25, 6),
            busy("node-3", 0.5, 4),
            busy("node-4", 0.5, 1),
        ];
        let facts = [
            fact("node-1", "a"),
            fact("node-2", "a"),
            fact("node-3", "b"),
            fact("node-4", "c"),
        ];
        let machines = machines_at_rest(&facts, &series, Duration::from_secs(2));
        // node-4's one second of readings holds no whole 2 s interval: it is left out.
        assert_eq!(machines.len(), 2, "{machines:?}");
        assert_eq!(machines[0].node.as_deref(), Some("node-1"));
        assert_eq!(machines[0].same_machine_nodes, ["node-2"]);
        assert_eq!(machines[0].cores, [0.25, 0.25, 0.25]);
        assert!(machines[0].is_machine_of(Some("node-2")));
        assert_eq!(machines[1].cores, [0.5, 0.5]);
        assert!(!machines[1].is_machine_of(Some("node-1")));
    }
}
