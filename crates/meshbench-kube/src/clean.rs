//! Deleting what meshbench created, and waiting until the cluster has removed it: a cell's
//! objects (by its label), a run's namespaces, and for `meshbench lab clean --kubernetes`
//! every object labelled by meshbench. Deletions from a `Drop` run to their end on a runtime
//! of their own.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret, Service, ServiceAccount};
use kube::api::{DeleteParams, ListParams};
use kube::{Api, Client, Config};

use crate::objects::{self, MANAGED_BY};
use crate::Error;

/// How long clean-up waits for the cluster to remove what it deletes.
const DELETE_TIMEOUT: Duration = Duration::from_secs(90);
/// How often a wait for deletions checks whether what is left can go at all.
const HELD_CHECK: Duration = Duration::from_secs(5);
/// How long a node's kubelet has to answer its health check before its node counts as lost.
const KUBELET_ANSWER: Duration = Duration::from_secs(2);

/// Deletes every object labelled `app.kubernetes.io/managed-by=meshbench` and waits for the
/// namespaces to go; returns how many objects it deleted.
pub async fn clean(client: &Client) -> Result<usize, Error> {
    let params = ListParams::default().labels(&format!("{}={}", MANAGED_BY.0, MANAGED_BY.1));
    let mut deleted = 0;
    deleted += delete_all(&Api::<Pod>::all(client.clone()), client, &params).await?;
    deleted += delete_all(&Api::<Service>::all(client.clone()), client, &params).await?;
    deleted += delete_all(&Api::<ConfigMap>::all(client.clone()), client, &params).await?;
    deleted += delete_all(&Api::<Secret>::all(client.clone()), client, &params).await?;
    deleted += delete_all(&Api::<ServiceAccount>::all(client.clone()), client, &params).await?;
    let names: Vec<String> = Api::<Namespace>::all(client.clone())
        .list(&params)
        .await
        .map_err(Error::api("listing meshbench's namespaces"))?
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    deleted += names.len();
    delete_namespaces(client, &names, &params).await?;
    Ok(deleted)
}

async fn delete_all<K>(all: &Api<K>, client: &Client, params: &ListParams) -> Result<usize, Error>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let kind = K::kind(&Default::default()).to_string();
    let items = all
        .list(params)
        .await
        .map_err(Error::api(format!("listing meshbench's {kind}s")))?;
    let mut deleted = 0;
    for item in items {
        let (Some(name), Some(namespace)) =
            (item.meta().name.clone(), item.meta().namespace.clone())
        else {
            continue;
        };
        match Api::<K>::namespaced(client.clone(), &namespace)
            .delete(&name, &DeleteParams::default())
            .await
        {
            Ok(_) => deleted += 1,
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(Error::api(format!("deleting {kind} {namespace}/{name}"))(e)),
        }
    }
    Ok(deleted)
}

/// Deletes a cell's pods, config maps, secrets and services in `namespaces`, and waits until
/// its pods are gone (so they never run into the next cell).
pub(crate) async fn delete_cell(
    client: Client,
    run: String,
    cell: String,
    namespaces: Vec<String>,
) -> Result<(), Error> {
    let params = ListParams::default().labels(&objects::selector(&run, Some(&cell)));
    for namespace in &namespaces {
        let pods = Api::<Pod>::namespaced(client.clone(), namespace);
        pods.delete_collection(&DeleteParams::default(), &params)
            .await
            .map_err(Error::api(format!(
                "deleting the cell's pods in {namespace}"
            )))?;
        Api::<ConfigMap>::namespaced(client.clone(), namespace)
            .delete_collection(&DeleteParams::default(), &params)
            .await
            .map_err(Error::api(format!(
                "deleting the cell's config maps in {namespace}"
            )))?;
        Api::<Secret>::namespaced(client.clone(), namespace)
            .delete_collection(&DeleteParams::default(), &params)
            .await
            .map_err(Error::api(format!(
                "deleting the cell's secrets in {namespace}"
            )))?;
        // Services have no collection delete.
        let services = Api::<Service>::namespaced(client.clone(), namespace);
        for s in services
            .list(&params)
            .await
            .map_err(Error::api("listing services"))?
        {
            if let Some(name) = s.metadata.name {
                services
                    .delete(&name, &DeleteParams::default())
                    .await
                    .map_err(Error::api(format!("deleting service {name}")))?;
            }
        }
        wait_all_gone(&pods, &params, &client, &namespaces).await?;
    }
    Ok(())
}

/// Deletes `namespaces` (and so everything in them) and waits until no namespace matches
/// `params`.
pub(crate) async fn delete_namespaces(
    client: &Client,
    namespaces: &[String],
    params: &ListParams,
) -> Result<(), Error> {
    let api = Api::<Namespace>::all(client.clone());
    for namespace in namespaces {
        match api.delete(namespace, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(Error::api(format!("deleting namespace {namespace}"))(e)),
        }
    }
    wait_all_gone(&api, params, client, namespaces).await
}

/// The nodes holding every pod left in `namespaces`, when none of their kubelets answers:
/// those pods stay Terminating until their kubelet is back, so waiting for them only holds
/// the run. Empty when a pod left is on a node that answers, or none is left.
async fn held_by_lost_nodes(client: &Client, namespaces: &[String]) -> Vec<String> {
    let mut nodes = std::collections::BTreeSet::new();
    for namespace in namespaces {
        let Ok(pods) = Api::<Pod>::namespaced(client.clone(), namespace)
            .list(&ListParams::default())
            .await
        else {
            return vec![];
        };
        for pod in pods {
            match pod.spec.and_then(|s| s.node_name) {
                Some(node) => nodes.insert(node),
                // Never scheduled: nothing holds it.
                None => return vec![],
            };
        }
    }
    for node in &nodes {
        let health = http::Request::get(format!("/api/v1/nodes/{node}/proxy/healthz"))
            .body(Vec::new())
            .expect("a static request");
        let answered = tokio::time::timeout(KUBELET_ANSWER, client.request_text(health)).await;
        if matches!(answered, Ok(Ok(_))) {
            return vec![];
        }
    }
    nodes.into_iter().collect()
}

/// Waits until nothing matches `params`, re-counting on every change a watch reports, or
/// until what is left in `namespaces` is held by nodes whose kubelet is gone.
async fn wait_all_gone<K>(
    api: &Api<K>,
    params: &ListParams,
    client: &Client,
    namespaces: &[String],
) -> Result<(), Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    K::DynamicType: Default,
{
    let selector = params.label_selector.clone().unwrap_or_default();
    let config = kube::runtime::watcher::Config::default().labels(&selector);
    let deadline = tokio::time::Instant::now() + DELETE_TIMEOUT;
    let mut events = kube::runtime::watcher(api.clone(), config).boxed();
    loop {
        let remaining = api
            .list(params)
            .await
            .map_err(Error::api("listing what is being deleted"))?
            .items
            .len();
        if remaining == 0 {
            return Ok(());
        }
        let waited = tokio::select! {
            waited = tokio::time::timeout_at(deadline, events.next()) => waited.is_ok(),
            () = tokio::time::sleep(HELD_CHECK) => {
                let nodes = held_by_lost_nodes(client, namespaces).await;
                if !nodes.is_empty() {
                    return Err(Error::HeldByLostNodes { nodes });
                }
                true
            }
        };
        if !waited {
            return Err(Error::Timeout {
                namespace: String::new(),
                pod: selector,
                what: "deleted",
                seconds: DELETE_TIMEOUT.as_secs(),
            });
        }
    }
}

/// Runs clean-up to its end from a `Drop`, on a runtime of its own in a thread of its own:
/// the caller's runtime may be the one being torn down, or blocked in this very drop.
pub(crate) fn off_runtime<F, Fut>(work: F, config: Config)
where
    F: FnOnce(Client) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<(), Error>>,
{
    let joined = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        runtime.block_on(async move {
            let client = Client::try_from(config).map_err(|e| e.to_string())?;
            work(client).await.map_err(|e| e.to_string())
        })
    })
    .join();
    if let Ok(Err(e)) | Err(e) = joined.map_err(|_| "the clean-up thread panicked".to_string()) {
        tracing::warn!(error = %e, "clean-up incomplete; run `meshbench lab clean --kubernetes`");
    }
}
