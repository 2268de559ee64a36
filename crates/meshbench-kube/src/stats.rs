//! Per-container CPU and memory from each node's kubelet, through the API server
//! (`/api/v1/nodes/<node>/proxy/stats/summary`), so that no port of a node needs to be
//! reachable from where meshbench runs; and each node's whole CPU from the same summary (its
//! root cgroup: every task on the machine, the kernel's work inside them included, but no
//! split by state, so interrupts outside a task are not seen).
//!
//! Clocks. The load generator reports its window on its monotonic clock with the offset to its
//! wall clock, and readings are placed on wall clocks, so the cut is as good as the clocks of
//! the generator's node and of the machine running meshbench agree (on one machine exactly;
//! across machines, their NTP offset, usually far below the sampling interval). A reading's
//! time: the summary stamps it with the node's clock truncated to whole seconds, too coarse
//! for cells of a few seconds. A kubelet with `PodAndContainerStatsFromCRI` reads the
//! container runtime on every request, so a reading stamped within the request's second is
//! taken during the request, and its time is the request's midpoint (uncertain by half the
//! request's round trip, tens of milliseconds). Otherwise cAdvisor's housekeeping refreshes
//! it every 10 to 15 s; such a reading keeps its own stamp, and a cell shorter than that gets
//! few distinct readings, which `samples` in the results shows.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::Node;
use kube::Client;
use meshbench_results::{Sample, SampleSeries};

use crate::outage::{Outages, Reach};
use serde::Deserialize;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Where the figures come from, as results name it.
pub const SOURCE: &str = "kubelet-summary";

/// How long a sampler told to stop keeps reading for a node figure stamped after the stop.
/// A kubelet refreshes its node's figures only at its housekeeping interval and stamps them
/// to the second, so the reading that closes a cell's window can come a second or two after
/// the cell ended; on a cluster with the default 10 s housekeeping it may not come at all,
/// and the node is then left out of that cell.
const NODE_SETTLE: Duration = Duration::from_secs(3);
/// How often a stopping sampler reads while it waits for that reading.
const SETTLE_POLL: Duration = Duration::from_millis(250);

#[derive(Debug, Deserialize)]
struct Summary {
    node: Option<NodeStats>,
    pods: Option<Vec<PodStats>>,
}

#[derive(Debug, Deserialize)]
struct NodeStats {
    cpu: Option<Cpu>,
    memory: Option<Memory>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodStats {
    pod_ref: PodRef,
    containers: Option<Vec<ContainerStats>>,
}

#[derive(Debug, Deserialize)]
struct PodRef {
    name: String,
    namespace: String,
}

#[derive(Debug, Deserialize)]
struct ContainerStats {
    name: String,
    cpu: Option<Cpu>,
    memory: Option<Memory>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Cpu {
    time: String,
    usage_core_nano_seconds: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Memory {
    working_set_bytes: Option<u64>,
    rss_bytes: Option<u64>,
}

/// A container to follow, and how results name it.
#[derive(Debug, Clone)]
pub struct Target {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    pub node: String,
    pub component: String,
    pub role: String,
}

/// The shortest interval the kubelets' summaries are read at. Reading them is not free (the
/// API server's proxy, the kubelet, the runtime's stats of every container): read every
/// 100 ms on this project's two-core test cluster, one cell of two had its load generator
/// stalled for half a second (its corrected latency showed it). At 500 ms a 2 s window still
/// gets about four readings.
pub const MIN_SAMPLE_INTERVAL: Duration = Duration::from_millis(500);

/// What a Node object says of its machine.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeFacts {
    pub name: String,
    pub cpus: u32,
    pub boot_id: Option<String>,
}

/// A Node object's CPUs and boot id; `None` without a readable CPU capacity.
pub fn node_facts(node: &Node) -> Option<NodeFacts> {
    let status = node.status.as_ref()?;
    let cpu = status.capacity.as_ref()?.get("cpu")?;
    // Capacity is whole CPUs on every kubelet ("2"); a millicore form would not be a
    // machine's count.
    let cpus: u32 = cpu.0.parse().ok()?;
    Some(NodeFacts {
        name: node.metadata.name.clone()?,
        cpus,
        boot_id: status
            .node_info
            .as_ref()
            .map(|i| i.boot_id.clone())
            .filter(|b| !b.is_empty()),
    })
}

/// One reading per machine: nodes with the same boot id run on one kernel (a test cluster's
/// nodes on one machine), whose root cgroup each of their kubelets reports, so the first of
/// them that `read` can read stands for the machine and the others are named beside it by
/// `same_machine`. A node without a boot id is a machine of its own.
pub fn per_machine<T>(
    facts: &[NodeFacts],
    mut read: impl FnMut(&NodeFacts) -> Option<T>,
    mut same_machine: impl FnMut(&mut T, &NodeFacts),
) -> Vec<T> {
    let mut out: Vec<(Option<&str>, T)> = vec![];
    for fact in facts {
        let kernel = fact.boot_id.as_deref();
        if let Some((_, machine)) = (out.iter_mut()).find(|(k, _)| kernel.is_some() && *k == kernel)
        {
            same_machine(machine, fact);
            continue;
        }
        if let Some(machine) = read(fact) {
            out.push((kernel, machine));
        }
    }
    out.into_iter().map(|(_, machine)| machine).collect()
}

/// Test readings of nodes' whole CPU.
#[cfg(test)]
pub(crate) mod test_nodes {
    use super::*;

    pub const S: u64 = 1_000_000_000;

    /// A node's root cgroup read every second from 0 to `seconds`, busy at `cores`.
    pub fn busy(node: &str, cores: f64, seconds: u64) -> (String, SampleSeries) {
        let samples = (0..=seconds)
            .map(|i| Sample {
                t_ns: i * S,
                cpu_ns: (i as f64 * cores * S as f64) as u64,
                rss_bytes: 0,
                working_set_bytes: None,
            })
            .collect();
        let series = SampleSeries {
            component: format!("node/{node}"),
            role: "node".into(),
            pid: 0,
            source: SOURCE,
            samples,
        };
        (node.to_owned(), series)
    }

    /// A node of 2 CPUs on the kernel `boot_id`.
    pub fn fact(name: &str, boot_id: &str) -> NodeFacts {
        NodeFacts {
            name: name.into(),
            cpus: 2,
            boot_id: Some(boot_id.into()),
        }
    }
}

/// What a sampler read.
#[derive(Debug, Default)]
pub struct Readings {
    /// Each target's series (times in Unix nanoseconds).
    pub containers: Vec<(Target, SampleSeries)>,
    /// Each node read, with its whole CPU (the root cgroup) as a series.
    pub nodes: Vec<(String, SampleSeries)>,
}

/// Reads every target's node summary every interval until finished.
pub struct SummarySampler {
    stop: watch::Sender<bool>,
    task: JoinHandle<Readings>,
}

impl SummarySampler {
    /// Follows `targets`, noting in `outages` when a kubelet or the API server does not
    /// answer.
    pub fn start(
        client: Client,
        targets: Vec<Target>,
        interval: Duration,
        outages: Outages,
    ) -> Self {
        let nodes: BTreeSet<String> = targets.iter().map(|t| t.node.clone()).collect();
        Self::spawn(client, targets, nodes, interval, outages)
    }

    /// Reads only `nodes`' whole CPU (no container followed): a cluster at rest.
    pub fn start_nodes(client: Client, nodes: BTreeSet<String>, interval: Duration) -> Self {
        Self::spawn(client, vec![], nodes, interval, Outages::default())
    }

    fn spawn(
        client: Client,
        targets: Vec<Target>,
        nodes: BTreeSet<String>,
        interval: Duration,
        outages: Outages,
    ) -> Self {
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(sample_loop(
            client, targets, nodes, interval, stopped, outages,
        ));
        SummarySampler { stop, task }
    }

    /// Takes a last reading and returns every target's and every node's series.
    pub async fn finish(self) -> Readings {
        let _ = self.stop.send(true);
        self.task.await.unwrap_or_default()
    }
}

async fn sample_loop(
    client: Client,
    targets: Vec<Target>,
    nodes: BTreeSet<String>,
    interval: Duration,
    mut stopped: watch::Receiver<bool>,
    outages: Outages,
) -> Readings {
    let mut series: Vec<(Target, SampleSeries)> = targets
        .into_iter()
        .map(|t| {
            let s = SampleSeries {
                component: t.component.clone(),
                role: t.role.clone(),
                pid: 0,
                source: SOURCE,
                samples: vec![],
            };
            (t, s)
        })
        .collect();
    let mut node_series: Vec<(String, SampleSeries)> = nodes
        .iter()
        .map(|n| {
            let s = SampleSeries {
                component: format!("node/{n}"),
                role: "node".to_owned(),
                pid: 0,
                source: SOURCE,
                samples: vec![],
            };
            (n.clone(), s)
        })
        .collect();
    let mut stopping_since: Option<u64> = None;
    loop {
        for (node, whole) in nodes.iter().zip(node_series.iter_mut()) {
            let asked = unix_ns(SystemTime::now());
            let kubelet = Reach::Kubelet(node.clone());
            match read_summary(&client, node).await {
                Ok(summary) => {
                    let answered = SystemTime::now();
                    outages.answered(kubelet, answered);
                    let answered = unix_ns(answered);
                    record(&summary, (asked, answered), &mut series);
                    record_node(&summary, (asked, answered), &mut whole.1);
                }
                Err(e) => {
                    tracing::debug!(node, error = %e, "kubelet summary unreadable");
                    outages.failed(kubelet, &e, SystemTime::now());
                }
            }
        }
        let now = unix_ns(SystemTime::now());
        if *stopped.borrow() || stopping_since.is_some() {
            let since = *stopping_since.get_or_insert(now);
            let settled = node_series
                .iter()
                .all(|(_, s)| s.samples.last().is_some_and(|last| last.t_ns >= since));
            if settled || now >= since + NODE_SETTLE.as_nanos() as u64 {
                break;
            }
            tokio::time::sleep(SETTLE_POLL).await;
            continue;
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = stopped.changed() => {}
        }
    }
    Readings {
        containers: series,
        nodes: node_series,
    }
}

async fn read_summary(client: &Client, node: &str) -> Result<Summary, kube::Error> {
    let request = http::Request::get(format!("/api/v1/nodes/{node}/proxy/stats/summary"))
        .body(Vec::new())
        .map_err(kube::Error::HttpError)?;
    client.request::<Summary>(request).await
}

/// Appends each target's reading from a summary asked for and answered at `request` (Unix
/// nanoseconds), once per distinct reading time.
fn record(summary: &Summary, request: (u64, u64), series: &mut [(Target, SampleSeries)]) {
    let by_container: BTreeMap<(&str, &str, &str), &ContainerStats> = summary
        .pods
        .iter()
        .flatten()
        .flat_map(|p| {
            p.containers.iter().flatten().map(move |c| {
                (
                    (
                        p.pod_ref.namespace.as_str(),
                        p.pod_ref.name.as_str(),
                        c.name.as_str(),
                    ),
                    c,
                )
            })
        })
        .collect();
    for (target, s) in series.iter_mut() {
        let key = (
            target.namespace.as_str(),
            target.pod.as_str(),
            target.container.as_str(),
        );
        let Some(sample) = by_container
            .get(&key)
            .and_then(|c| sample(c.cpu.as_ref(), c.memory.as_ref(), request))
        else {
            continue;
        };
        push_once(&mut s.samples, sample);
    }
}

/// Appends the node's whole CPU from a summary, once per distinct reading time.
fn record_node(summary: &Summary, request: (u64, u64), series: &mut SampleSeries) {
    let Some(node) = &summary.node else { return };
    if let Some(sample) = sample(node.cpu.as_ref(), node.memory.as_ref(), request) {
        push_once(&mut series.samples, sample);
    }
}

fn push_once(samples: &mut Vec<Sample>, sample: Sample) {
    // A counter never goes back: a lower one is a container that has ended (the runtime
    // reports zeros for it), not a reading of the one followed.
    let follows = |last: &Sample| last.t_ns < sample.t_ns && last.cpu_ns <= sample.cpu_ns;
    if samples.last().is_none_or(follows) {
        samples.push(sample);
    }
}

fn sample(
    cpu: Option<&Cpu>,
    memory: Option<&Memory>,
    (asked, answered): (u64, u64),
) -> Option<Sample> {
    let cpu = cpu?;
    let stamped = unix_ns(humantime::parse_rfc3339_weak(&cpu.time).ok()?);
    // Stamped in the request's second (truncated): read during the request.
    let fresh = stamped + 1_000_000_000 > asked && stamped <= answered;
    let t_ns = if fresh {
        asked + (answered - asked) / 2
    } else {
        stamped
    };
    let working_set = memory.and_then(|m| m.working_set_bytes);
    Some(Sample {
        t_ns,
        cpu_ns: cpu.usage_core_nano_seconds?,
        // Without the runtime's RSS figure, the working set is the closest the kubelet
        // reports (and the results say which figure their source had).
        rss_bytes: memory
            .and_then(|m| m.rss_bytes)
            .or(working_set)
            .unwrap_or(0),
        working_set_bytes: working_set,
    })
}

fn unix_ns(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readings_are_kept_once_per_time_and_per_target() {
        let summary = |t: &str, cpu: u64| -> Summary {
            serde_json::from_value(serde_json::json!({"node": {"nodeName": "node-2",
                "cpu": {"time": t, "usageCoreNanoSeconds": 10 * cpu}}, "pods": [{
                "podRef": {"name": "echo-server-1-abc", "namespace": "meshbench-r", "uid": "u"},
                "containers": [{"name": "meshbench",
                    "cpu": {"time": t, "usageNanoCores": 5, "usageCoreNanoSeconds": cpu},
                    "memory": {"time": t, "workingSetBytes": 4096, "rssBytes": 2048}}]}]}))
            .unwrap()
        };
        let target = Target {
            namespace: "meshbench-r".into(),
            pod: "echo-server-1-abc".into(),
            container: "meshbench".into(),
            node: "node-2".into(),
            component: "echo-server-1".into(),
            role: "app".into(),
        };
        let mut series = vec![(
            target,
            SampleSeries {
                component: "echo-server-1".into(),
                role: "app".into(),
                pid: 0,
                source: SOURCE,
                samples: vec![],
            },
        )];
        const S: u64 = 1_000_000_000;
        let at = |stamp: &str| unix_ns(humantime::parse_rfc3339(stamp).unwrap());
        // A cached reading (stamped seconds before the request) keeps its stamp, once.
        let long_after = (
            at("2026-11-24T06:32:09Z"),
            at("2026-11-24T06:32:09Z") + S / 10,
        );
        record(
            &summary("2026-11-24T06:32:05Z", 100),
            long_after,
            &mut series,
        );
        record(
            &summary("2026-11-24T06:32:05Z", 100),
            long_after,
            &mut series,
        );
        // A fresh one (stamped in the request's second) is placed at the request's midpoint.
        let asked = at("2026-11-24T06:32:06Z") + 400_000_000;
        record(
            &summary("2026-11-24T06:32:06Z", 600_000_100),
            (asked, asked + 200_000_000),
            &mut series,
        );
        // The container ended: the runtime reports zeros, which are not a reading.
        let later = (asked + 2 * S, asked + 2 * S + S / 10);
        record(&summary("2026-11-24T06:32:08Z", 0), later, &mut series);
        let samples = &series[0].1.samples;
        assert_eq!(samples.len(), 2);
        assert_eq!(samples[0].t_ns, at("2026-11-24T06:32:05Z"));
        assert_eq!(samples[1].t_ns - samples[0].t_ns, 1_500_000_000);
        assert_eq!(samples[1].rss_bytes, 2048);
        assert_eq!(samples[1].working_set_bytes, Some(4096));
        let r = series[0].1.summarize(samples[0].t_ns, samples[1].t_ns);
        assert!((r.cpu_cores_mean - 0.4).abs() < 1e-9);
    }

    #[test]
    fn a_nodes_whole_cpu_is_read_from_its_summary() {
        let summary: Summary = serde_json::from_value(serde_json::json!({
            "node": {"nodeName": "node-2", "cpu": {"time": "2026-11-24T06:32:06Z",
                "usageNanoCores": 5, "usageCoreNanoSeconds": 7_000_000_000u64},
                "memory": {"time": "2026-11-24T06:32:06Z", "workingSetBytes": 4096}},
            "pods": []}))
        .unwrap();
        let mut series = SampleSeries {
            component: "node/node-2".into(),
            role: "node".into(),
            pid: 0,
            source: SOURCE,
            samples: vec![],
        };
        let asked = unix_ns(humantime::parse_rfc3339("2026-11-24T06:32:06Z").unwrap());
        record_node(&summary, (asked, asked + 1_000_000), &mut series);
        record_node(&summary, (asked, asked + 1_000_000), &mut series);
        assert_eq!(series.samples.len(), 1);
        assert_eq!(series.samples[0].cpu_ns, 7_000_000_000);
        // Without a node section (an older kubelet), nothing is recorded.
        let bare: Summary = serde_json::from_value(serde_json::json!({"pods": []})).unwrap();
        record_node(
            &bare,
            (asked + 2_000_000_000, asked + 2_100_000_000),
            &mut series,
        );
        assert_eq!(series.samples.len(), 1);
    }
}
