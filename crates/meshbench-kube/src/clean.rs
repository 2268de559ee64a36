//! Removes what meshbench left on a cluster: every namespace it labelled (a run's), and
//! every labelled object elsewhere (a cell's, in a namespace meshbench did not create).

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Service, ServiceAccount};
use kube::api::{DeleteParams, ListParams};
use kube::{Api, Client};

use crate::objects::MANAGED_BY;
use crate::Error;

/// Deletes every object labelled `app.kubernetes.io/managed-by=meshbench` and waits for the
/// namespaces to go; returns how many objects it deleted.
pub async fn clean(client: &Client) -> Result<usize, Error> {
    let params = ListParams::default().labels(&format!("{}={}", MANAGED_BY.0, MANAGED_BY.1));
    let mut deleted = 0;
    deleted += delete_all(&Api::<Pod>::all(client.clone()), client, &params).await?;
    deleted += delete_all(&Api::<Service>::all(client.clone()), client, &params).await?;
    deleted += delete_all(&Api::<ConfigMap>::all(client.clone()), client, &params).await?;
    deleted += delete_all(&Api::<ServiceAccount>::all(client.clone()), client, &params).await?;
    let namespaces = Api::<Namespace>::all(client.clone());
    let names: Vec<String> = namespaces
        .list(&params)
        .await
        .map_err(Error::api("listing meshbench's namespaces"))?
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    deleted += names.len();
    crate::platform::delete_labelled_namespaces(client, &names, &params).await?;
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
