//! The meshes a cluster already runs (`meshbench_meshes::InstalledMesh`): finding them (their
//! CRDs, control-plane and node-agent pods, configuration), and applying a translation's
//! resources, labelled as the run's, with server-side apply as `meshbench`, or only its dry
//! run: the API server then validates each resource against the mesh's CRD schema (unknown
//! fields refused) and its admission webhooks (istiod's validation among them), and keeps
//! nothing.

use std::collections::BTreeMap;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, ValidationDirective,
};
use kube::discovery::Scope;
use kube::{Api, Client};
use meshbench_meshes::{Found, FoundConfigMap, FoundPod, Installation, Scenario, Signature};
use serde_json::Value;

use crate::objects::{FIELD_MANAGER, MANAGED_BY, RUN};
use crate::Error;

/// What `signature` finds on the cluster.
pub async fn detect(client: &Client, signature: &Signature) -> Result<Found, Error> {
    let mut found = Found::default();
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    for name in signature.crds {
        if let Some(crd) = crds
            .get_opt(name)
            .await
            .map_err(Error::api(format!("reading CRD {name}")))?
        {
            let versions = crd
                .spec
                .versions
                .iter()
                .filter(|v| v.served)
                .map(|v| v.name.clone())
                .collect();
            found.crds.insert((*name).to_owned(), versions);
        }
    }
    let webhooks = Api::<MutatingWebhookConfiguration>::all(client.clone());
    for name in signature.injector_webhooks {
        if let Some(config) = webhooks
            .get_opt(name)
            .await
            .map_err(Error::api(format!("reading webhook configuration {name}")))?
        {
            let targets = config
                .webhooks
                .unwrap_or_default()
                .into_iter()
                .map(|w| match (w.client_config.url, w.client_config.service) {
                    (Some(url), _) => url,
                    (None, Some(s)) => format!("service {}/{}", s.namespace, s.name),
                    (None, None) => String::new(),
                })
                .collect();
            found.injector_webhooks.insert((*name).to_owned(), targets);
        }
    }
    let pods = Api::<Pod>::all(client.clone());
    for (selectors, into) in [
        (signature.control_plane, &mut found.control_plane),
        (signature.node_agents, &mut found.node_agents),
    ] {
        for selector in selectors {
            let list = pods
                .list(&ListParams::default().labels(&selector.to_string()))
                .await
                .map_err(Error::api(format!("listing pods {selector}")))?;
            into.extend(list.items.iter().map(found_pod));
        }
    }
    for reference in signature.config_maps {
        let api = match reference.namespace {
            None => Api::<ConfigMap>::all(client.clone()),
            Some(namespace) => Api::<ConfigMap>::namespaced(client.clone(), namespace),
        };
        let list = api
            .list(&ListParams::default().fields(&format!("metadata.name={}", reference.name)))
            .await
            .map_err(Error::api(format!("listing config maps {reference}")))?;
        for cm in list.items {
            let key = FoundConfigMap {
                namespace: cm.metadata.namespace.unwrap_or_default(),
                name: cm.metadata.name.unwrap_or_default(),
            };
            found
                .config_maps
                .insert(key, cm.data.unwrap_or_default().into_iter().collect());
        }
    }
    Ok(found)
}

fn found_pod(pod: &Pod) -> FoundPod {
    let ready = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    FoundPod {
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        name: pod.metadata.name.clone().unwrap_or_default(),
        labels: pod.metadata.labels.clone().unwrap_or_default(),
        images: pod
            .spec
            .iter()
            .flat_map(crate::pods::long_running)
            .map(|c| (c.name.clone(), c.image.clone().unwrap_or_default()))
            .collect(),
        env: pod
            .spec
            .iter()
            .flat_map(crate::pods::long_running)
            .map(|c| {
                let literal = c
                    .env
                    .iter()
                    .flatten()
                    .filter_map(|e| Some((e.name.clone(), e.value.clone()?)))
                    .collect();
                (c.name.clone(), literal)
            })
            .collect(),
        ready,
        node: pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default(),
    }
}

/// Every registered mesh the cluster may run, with what detection says of it.
pub async fn detect_all(client: &Client) -> Result<BTreeMap<&'static str, Installation>, Error> {
    let mut all = BTreeMap::new();
    for mesh in Scenario::all() {
        let Some(installed) = mesh.cluster().and_then(|c| c.installed()) else {
            continue;
        };
        let found = detect(client, &installed.signature()).await?;
        all.insert(mesh.name(), installed.interpret(&found));
    }
    Ok(all)
}

/// How a resource was applied, or why the API server refused it.
#[derive(Debug)]
pub struct Applied {
    /// `Kind namespace/name`.
    pub resource: String,
    pub outcome: Result<(), String>,
}

/// Applies `resources` (each with `apiVersion`, `kind`, `metadata`) labelled as `run`'s (and
/// `cell`'s); with `dry_run`, only validated. Each resource's outcome is returned (a refusal
/// is a finding, not an error); what fails before the API server answers (discovery) is an
/// error.
pub async fn apply_resources(
    client: &Client,
    resources: &[Value],
    run: &str,
    cell: Option<&str>,
    dry_run: bool,
) -> Result<Vec<Applied>, Error> {
    let mut applied = vec![];
    for resource in resources {
        let api_version = resource["apiVersion"].as_str().unwrap_or_default();
        let kind = resource["kind"].as_str().unwrap_or_default();
        let name = resource["metadata"]["name"].as_str().unwrap_or_default();
        let namespace = resource["metadata"]["namespace"].as_str();
        let label = format!(
            "{kind} {}{name}",
            namespace.map(|n| format!("{n}/")).unwrap_or_default()
        );
        let api = match dynamic_api(client, resource).await {
            Ok(api) => api,
            Err(e) => {
                let why = match &e {
                    kube::Error::Api(status) if status.code == 404 => {
                        "(the mesh's CRDs are not installed)".to_owned()
                    }
                    other => format!("({other})"),
                };
                applied.push(Applied {
                    resource: label,
                    outcome: Err(format!(
                        "the cluster does not serve {api_version} {kind} {why}"
                    )),
                });
                continue;
            }
        };
        let mut object = resource.clone();
        let labels = &mut object["metadata"]["labels"];
        if !labels.is_object() {
            *labels = Value::Object(Default::default());
        }
        labels[MANAGED_BY.0] = Value::from(MANAGED_BY.1);
        labels[RUN] = Value::from(run);
        if let Some(cell) = cell {
            labels[crate::objects::CELL] = Value::from(cell);
        }
        let mut params = PatchParams::apply(FIELD_MANAGER).force();
        params.field_validation = Some(ValidationDirective::Strict);
        if dry_run {
            params = params.dry_run();
        }
        let outcome = api
            .patch(name, &params, &Patch::Apply(&object))
            .await
            .map(|_| ())
            .map_err(|e| e.to_string());
        applied.push(Applied {
            resource: label,
            outcome,
        });
    }
    Ok(applied)
}

/// What [`check`] found: each resource's dry run, and what the mesh's admission did to each
/// workload's pod.
#[derive(Debug)]
pub struct CheckReport {
    pub installation: Installation,
    pub resources: Vec<Applied>,
    pub pods: Vec<PodAdmission>,
    /// The translation's notes (what the mesh could not express, and how it was written).
    pub notes: Vec<String>,
}

impl CheckReport {
    /// Whether the API server accepted every resource and every pod.
    pub fn accepted(&self) -> bool {
        self.resources.iter().all(|a| a.outcome.is_ok())
            && self.pods.iter().all(|p| p.outcome.is_ok())
    }
}

/// A workload's pod as the cluster's admission left it (a dry-run create).
#[derive(Debug)]
pub struct PodAdmission {
    pub workload: String,
    pub enrolled: bool,
    /// The containers and init containers admission added, each with its class where the
    /// mesh claims it (`sidecar`), or the refusal.
    pub outcome: Result<Vec<(String, Option<&'static str>)>, String>,
}

/// Validates what meshbench would apply to run `mesh` for `topology` under `policy`, without
/// running anything: the topology's namespaces are created for the check (named
/// `mb-<run>-<namespace>`, so no run's namespaces are touched) with the mesh's enrollment
/// labels and the service accounts, every resource of the translation is applied as a dry
/// run, and each workload's pod is created as a dry run (admission webhooks, the mesh's
/// injector among them, answer as they would). The namespaces are deleted before returning.
pub async fn check(
    client: &Client,
    mesh: Scenario,
    topology: &meshbench_topology::Topology,
    policy: &meshbench_policy::Policy,
    run: &str,
    image: &str,
) -> Result<CheckReport, Error> {
    let Some(installed) = mesh.cluster().and_then(|c| c.installed()) else {
        return Err(Error::Unsupported {
            what: format!("checking mesh {}", mesh.name()),
            why: "meshbench brings that data plane itself; only an installed mesh is checked"
                .into(),
        });
    };
    let found = detect(client, &installed.signature()).await?;
    let installation = installed.interpret(&found);
    let namespaces: BTreeMap<String, String> = topology
        .workloads
        .iter()
        .map(|w| (w.namespace.clone(), format!("mb-{run}-{}", w.namespace)))
        .collect();
    let site = meshbench_meshes::InstalledSite {
        topology,
        policy,
        namespaces: &namespaces,
        installation: &installation,
    };
    let translation = installed.translate(&site)?;
    let mut created: Vec<String> = namespaces.values().cloned().collect();
    created.sort();
    created.dedup();
    let result = async {
        let ns_api = Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone());
        for ns in &created {
            crate::objects::apply(&ns_api, &crate::objects::namespace(ns, run)).await?;
        }
        for w in &topology.workloads {
            let ns = &namespaces[&w.namespace];
            let api =
                Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(client.clone(), ns);
            crate::objects::apply(
                &api,
                &crate::objects::service_account(&w.service_account, ns, run),
            )
            .await?;
        }
        let resources = apply_resources(client, &translation.resources, run, None, true).await?;
        let mut pods = vec![];
        for w in &topology.workloads {
            pods.push(PodAdmission {
                workload: w.name.clone(),
                enrolled: w.meshed,
                outcome: admit_pod(
                    client,
                    installed,
                    &translation,
                    w,
                    &namespaces[&w.namespace],
                    run,
                    image,
                )
                .await,
            });
        }
        Ok::<_, Error>((resources, pods))
    }
    .await;
    let params = ListParams::default().labels(&crate::objects::selector(run, None));
    crate::clean::delete_namespaces(client, &created, &params).await?;
    let (resources, pods) = result?;
    Ok(CheckReport {
        installation,
        resources,
        pods,
        notes: translation.enforced.notes,
    })
}

/// `workload`'s pod created as a dry run with the enrollment's labels and annotations: the
/// containers admission added, classified by the mesh.
async fn admit_pod(
    client: &Client,
    mesh: &dyn meshbench_meshes::InstalledMesh,
    translation: &meshbench_meshes::Translation,
    workload: &meshbench_topology::Workload,
    namespace: &str,
    run: &str,
    image: &str,
) -> Result<Vec<(String, Option<&'static str>)>, String> {
    use k8s_openapi::api::core::v1::{Container, PodSpec};
    let mut meta = crate::objects::meta(
        &workload.name,
        Some(namespace),
        run,
        None,
        &[(crate::objects::WORKLOAD, &workload.name)],
    );
    if let Some(extra) = translation.enrollment.pod_labels.get(&workload.name) {
        meta.labels
            .get_or_insert_with(Default::default)
            .extend(extra.clone());
    }
    meta.annotations = translation
        .enrollment
        .pod_annotations
        .get(&workload.name)
        .cloned();
    let pod = Pod {
        metadata: meta,
        spec: Some(PodSpec {
            service_account_name: Some(workload.service_account.clone()),
            containers: vec![Container {
                name: crate::objects::APP_CONTAINER.into(),
                image: Some(image.into()),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        ..Pod::default()
    };
    let api = Api::<Pod>::namespaced(client.clone(), namespace);
    let params = kube::api::PostParams {
        dry_run: true,
        field_manager: Some(FIELD_MANAGER.into()),
    };
    let admitted = api.create(&params, &pod).await.map_err(|e| e.to_string())?;
    let found = found_pod(&admitted);
    let spec = admitted.spec.unwrap_or_default();
    Ok(spec
        .init_containers
        .unwrap_or_default()
        .into_iter()
        .chain(spec.containers)
        .filter(|c| c.name != crate::objects::APP_CONTAINER)
        .map(|c| {
            let class = mesh.component(&found, &c.name).map(|k| k.role());
            (c.name, class)
        })
        .collect())
}

/// Waits until the cluster reports `resource` (as applied) with `condition` true in its
/// status, polling each second for at most `timeout`: a Gateway the mesh deploys a proxy for
/// (a waypoint) takes traffic only once it is programmed, and a probe before then would judge
/// the mesh by a proxy that is not there yet.
pub async fn wait_for_condition(
    client: &Client,
    resource: &Value,
    condition: &str,
    timeout: std::time::Duration,
) -> Result<(), Error> {
    let name = resource["metadata"]["name"].as_str().unwrap_or_default();
    let label = format!(
        "{} {}{name}",
        resource["kind"].as_str().unwrap_or_default(),
        resource["metadata"]["namespace"]
            .as_str()
            .map(|n| format!("{n}/"))
            .unwrap_or_default()
    );
    let api = dynamic_api(client, resource)
        .await
        .map_err(|source| Error::Api {
            what: label.clone(),
            source,
        })?;
    let deadline = tokio::time::Instant::now() + timeout;
    let mut last = "no status yet".to_owned();
    loop {
        let object = api.get(name).await.map_err(|source| Error::Api {
            what: label.clone(),
            source,
        })?;
        let conditions = object.data["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if let Some(c) = conditions.iter().find(|c| c["type"] == condition) {
            if c["status"] == "True" {
                return Ok(());
            }
            last = format!(
                "{condition} is {}: {}",
                c["status"].as_str().unwrap_or("unknown"),
                c["message"].as_str().unwrap_or_default()
            );
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Error::Refused {
                what: label,
                why: format!("not {condition} after {} s ({last})", timeout.as_secs()),
            });
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}

/// The API of `resource`'s kind (from its `apiVersion` and `kind`, as the cluster serves it),
/// in its namespace where the kind is namespaced.
async fn dynamic_api(client: &Client, resource: &Value) -> Result<Api<DynamicObject>, kube::Error> {
    let api_version = resource["apiVersion"].as_str().unwrap_or_default();
    let kind = resource["kind"].as_str().unwrap_or_default();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (ar, caps) = kube::discovery::pinned_kind(client, &gvk).await?;
    Ok(
        match (caps.scope, resource["metadata"]["namespace"].as_str()) {
            (Scope::Namespaced, Some(ns)) => Api::namespaced_with(client.clone(), ns, &ar),
            _ => Api::all_with(client.clone(), &ar),
        },
    )
}

/// Deletes `resources` (as [`apply_resources`] took them), those already gone or of a kind
/// the cluster no longer serves included.
pub async fn delete_resources(client: &Client, resources: &[Value]) -> Result<(), Error> {
    for resource in resources {
        let kind = resource["kind"].as_str().unwrap_or_default();
        let name = resource["metadata"]["name"].as_str().unwrap_or_default();
        let Ok(api) = dynamic_api(client, resource).await else {
            continue;
        };
        match api.delete(name, &Default::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(Error::api(format!("deleting {kind} {name}"))(e)),
        }
    }
    Ok(())
}
