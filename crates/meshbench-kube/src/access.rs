//! What meshbench may do on a cluster, in one table: the rules of the ClusterRoles in
//! `docs/rbac.yaml` (rendered from [`RULES`]; a test keeps the file equal to it), and the
//! check that the caller holds each of them, one SelfSubjectAccessReview per verb and
//! resource, before a run or a verification starts (and in `doctor`), naming every one
//! missing.
//!
//! meshbench creates the namespaces of each run (`meshbench-<run>`, and a study's own such as
//! E3's `app` and `external`), so its rights on the objects in them are cluster-wide: RBAC can
//! grant a Role only in a namespace that exists. Reads of cluster-scoped things (nodes, the
//! kubelets' stats, CRDs, webhook configurations) are a role of their own, and so are the
//! meshes' resources, which a platform team may leave out for meshes it does not run.

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::{Api, Client};

use crate::Error;

/// One ClusterRole of meshbench's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Cluster-wide reads: nodes and their kubelets' stats, CRDs, webhooks, the meshes' pods.
    Read,
    /// The run's namespaces and everything meshbench creates in them.
    Run,
    /// The meshes' own resources, as which meshbench applies a policy to a mesh the cluster
    /// runs (and dry-runs them for `mesh check`).
    Meshes,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::Read, Role::Run, Role::Meshes];

    /// The ClusterRole's name in `docs/rbac.yaml`.
    pub fn name(self) -> &'static str {
        match self {
            Role::Read => "meshbench-read",
            Role::Run => "meshbench-run",
            Role::Meshes => "meshbench-meshes",
        }
    }

    fn description(self) -> &'static str {
        match self {
            Role::Read => "cluster-wide reads: nodes, their kubelets' stats, CRDs, webhooks",
            Role::Run => {
                "each run's namespaces and the pods, services, service accounts, config maps \
                 and secrets meshbench creates in them"
            }
            Role::Meshes => {
                "the meshes' policy resources, as which meshbench applies a policy to a mesh \
                 the cluster runs"
            }
        }
    }
}

/// Verbs on resources of one API group, and why meshbench needs them.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    pub role: Role,
    /// The API group (`""`: the core group).
    pub group: &'static str,
    /// Resources, a subresource as `pods/exec`.
    pub resources: &'static [&'static str],
    pub verbs: &'static [&'static str],
    pub why: &'static str,
}

const READ: &[&str] = &["get", "list"];
const WRITE: &[&str] = &["get", "list", "watch", "create", "patch", "delete"];
const WRITE_COLLECTION: &[&str] = &[
    "get",
    "list",
    "watch",
    "create",
    "patch",
    "delete",
    "deletecollection",
];

/// Every permission meshbench needs, and nothing more.
pub const RULES: &[Rule] = &[
    Rule {
        role: Role::Read,
        group: "",
        resources: &["nodes"],
        verbs: READ,
        why: "placements, and each node's machine (capacity, CPU) around a cell",
    },
    Rule {
        role: Role::Read,
        group: "",
        resources: &["nodes/proxy"],
        verbs: &["get"],
        why: "every container's CPU and memory, from each kubelet's stats summary through the API \
              server",
    },
    Rule {
        role: Role::Read,
        group: "apiextensions.k8s.io",
        resources: &["customresourcedefinitions"],
        verbs: READ,
        why: "which meshes' CRDs the cluster serves (mesh detect)",
    },
    Rule {
        role: Role::Read,
        group: "admissionregistration.k8s.io",
        resources: &["mutatingwebhookconfigurations"],
        verbs: READ,
        why: "the meshes' sidecar injectors (mesh detect)",
    },
    Rule {
        role: Role::Run,
        group: "",
        resources: &["namespaces"],
        verbs: WRITE,
        why: "each run's namespaces, created labelled as meshbench's and deleted after it",
    },
    Rule {
        role: Role::Run,
        group: "",
        resources: &["pods", "configmaps", "secrets"],
        verbs: WRITE_COLLECTION,
        why: "each cell's pods and their configuration and identities; the meshes' control-plane \
              pods and configuration are read (mesh detect)",
    },
    Rule {
        role: Role::Run,
        group: "",
        resources: &["services", "serviceaccounts"],
        verbs: WRITE,
        why: "each workload's service and service account",
    },
    Rule {
        role: Role::Run,
        group: "",
        resources: &["pods/log"],
        verbs: &["get"],
        why: "the load generator's result, and a pod's last lines when it cannot start",
    },
    Rule {
        role: Role::Run,
        group: "",
        resources: &["pods/exec"],
        verbs: &["get", "create"],
        why: "verify's probes and captures from inside the pods",
    },
    Rule {
        role: Role::Run,
        group: "",
        resources: &["serviceaccounts/token"],
        verbs: &["create"],
        why: "a workload's token, with which verify asks a mesh's CA for its certificate",
    },
    Rule {
        role: Role::Meshes,
        group: "security.istio.io",
        resources: &["authorizationpolicies", "peerauthentications"],
        verbs: WRITE,
        why: "Istio's and Istio ambient's policy",
    },
    Rule {
        role: Role::Meshes,
        group: "gateway.networking.k8s.io",
        resources: &["gateways"],
        verbs: WRITE,
        why: "Istio ambient's waypoints, for L7 rules",
    },
    Rule {
        role: Role::Meshes,
        group: "policy.linkerd.io",
        resources: &[
            "servers",
            "authorizationpolicies",
            "meshtlsauthentications",
            "networkauthentications",
            "httproutes",
        ],
        verbs: WRITE,
        why: "Linkerd's policy",
    },
    Rule {
        role: Role::Meshes,
        group: "cilium.io",
        resources: &["ciliumnetworkpolicies"],
        verbs: WRITE,
        why: "Cilium's policy",
    },
    Rule {
        role: Role::Meshes,
        group: "consul.hashicorp.com",
        resources: &[
            "serviceintentions",
            "servicedefaults",
            "proxydefaults",
            "meshes",
        ],
        verbs: WRITE,
        why: "Consul's intentions and the defaults they need",
    },
];

/// One verb on one resource that the caller lacks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing {
    pub role: Role,
    pub group: &'static str,
    pub resource: &'static str,
    pub verb: &'static str,
    pub why: &'static str,
}

impl std::fmt::Display for Missing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let group = if self.group.is_empty() {
            String::new()
        } else {
            format!(".{}", self.group)
        };
        write!(
            f,
            "{} {}{group} (ClusterRole {}: {})",
            self.verb,
            self.resource,
            self.role.name(),
            self.why
        )
    }
}

/// Which permissions of the rules `wanted` keeps the caller lacks, cluster-wide: one
/// SelfSubjectAccessReview per verb and resource (which any authenticated user may create).
pub async fn missing(
    client: &Client,
    wanted: impl Fn(&Rule) -> bool,
) -> Result<Vec<Missing>, Error> {
    let api = Api::<SelfSubjectAccessReview>::all(client.clone());
    let mut missing = vec![];
    for rule in RULES.iter().filter(|r| wanted(r)) {
        for resource in rule.resources {
            let (name, subresource) = match resource.split_once('/') {
                Some((name, sub)) => (name, Some(sub.to_owned())),
                None => (*resource, None),
            };
            for verb in rule.verbs {
                let review = SelfSubjectAccessReview {
                    spec: SelfSubjectAccessReviewSpec {
                        resource_attributes: Some(ResourceAttributes {
                            group: Some(rule.group.to_owned()),
                            resource: Some(name.to_owned()),
                            subresource: subresource.clone(),
                            verb: Some((*verb).to_owned()),
                            ..ResourceAttributes::default()
                        }),
                        ..SelfSubjectAccessReviewSpec::default()
                    },
                    ..SelfSubjectAccessReview::default()
                };
                let answer =
                    api.create(&PostParams::default(), &review)
                        .await
                        .map_err(Error::api(format!(
                            "asking whether it may {verb} {resource}"
                        )))?;
                if !answer.status.is_some_and(|s| s.allowed) {
                    missing.push(Missing {
                        role: rule.role,
                        group: rule.group,
                        resource,
                        verb,
                        why: rule.why,
                    });
                }
            }
        }
    }
    Ok(missing)
}

/// Fails with every permission of the rules `wanted` keeps that the caller lacks, as bad
/// input (exit code 2): what the cluster's administrator must grant, not a run's fault.
pub async fn require(client: &Client, wanted: impl Fn(&Rule) -> bool) -> Result<(), Error> {
    let missing = missing(client, wanted).await?;
    if missing.is_empty() {
        return Ok(());
    }
    Err(Error::Forbidden {
        missing: missing.iter().map(Missing::to_string).collect(),
    })
}

/// `docs/rbac.yaml`: a namespace and service account for meshbench, its three ClusterRoles
/// and their bindings to that account (bind them to your own subject instead if you like).
pub fn rbac_yaml() -> String {
    let mut yaml = String::from(
        "# What meshbench needs on a cluster, and nothing more: generated from\n\
         # crates/meshbench-kube/src/access.rs (a test keeps this file equal to it). `meshbench\n\
         # doctor --kubeconfig K` checks each permission, and `run` and `verify --backend\n\
         # kubernetes` check them before they start, naming any that is missing (exit code 2).\n\
         #\n\
         # meshbench creates each run's namespaces (meshbench-<run>, and a study's own, E3's app\n\
         # and external), so its rights on the objects in them are cluster-wide: RBAC grants a\n\
         # Role only in a namespace that exists. Leave out meshbench-meshes, or the rules of the\n\
         # meshes you do not run, if meshbench is not to apply policies to them (runs check it\n\
         # for every mesh the cluster runs).\n\
         #\n\
         #   kubectl apply -f docs/rbac.yaml\n\
         #   kubectl -n meshbench create token meshbench   # a token for a kubeconfig of its own\n\
         apiVersion: v1\n\
         kind: Namespace\n\
         metadata:\n  name: meshbench\n\
         ---\n\
         apiVersion: v1\n\
         kind: ServiceAccount\n\
         metadata:\n  name: meshbench\n  namespace: meshbench\n",
    );
    for role in Role::ALL {
        yaml.push_str(&format!(
            "---\n# {}\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\n\
             metadata:\n  name: {}\nrules:\n",
            role.description(),
            role.name()
        ));
        for rule in RULES.iter().filter(|r| r.role == role) {
            yaml.push_str(&format!(
                "  # {}\n  - apiGroups: [\"{}\"]\n    resources: [{}]\n    verbs: [{}]\n",
                rule.why,
                rule.group,
                rule.resources.join(", "),
                rule.verbs.join(", ")
            ));
        }
        yaml.push_str(&format!(
            "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\n\
             metadata:\n  name: {name}\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  \
             kind: ClusterRole\n  name: {name}\nsubjects:\n  - kind: ServiceAccount\n    \
             name: meshbench\n    namespace: meshbench\n",
            name = role.name()
        ));
    }
    yaml
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docs_rbac_yaml_is_the_table_rendered() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/rbac.yaml");
        let rendered = rbac_yaml();
        if std::env::var_os("MESHBENCH_UPDATE_RBAC").is_some() {
            std::fs::write(&path, &rendered).unwrap();
        }
        let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            on_disk == rendered,
            "docs/rbac.yaml differs from access::RULES: regenerate it with \
             MESHBENCH_UPDATE_RBAC=1 cargo test -p meshbench-kube --lib docs_rbac_yaml"
        );
    }

    /// Kubernetes' plural of a kind, as the meshes' CRDs name them.
    fn plural(kind: &str) -> String {
        let lower = kind.to_lowercase();
        if lower.ends_with('s') {
            lower
        } else if lower.ends_with("sh") {
            format!("{lower}es")
        } else if let Some(stem) = lower
            .strip_suffix('y')
            .filter(|stem| !stem.ends_with(['a', 'e', 'o', 'u']))
        {
            format!("{stem}ies")
        } else {
            format!("{lower}s")
        }
    }

    #[test]
    fn every_kind_meshbench_applies_for_a_mesh_is_granted() {
        let golden = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../meshbench-meshes/tests/golden");
        let mut kinds = std::collections::BTreeSet::new();
        for file in std::fs::read_dir(&golden).unwrap() {
            let text = std::fs::read_to_string(file.unwrap().path()).unwrap();
            let mut api_version = "";
            for line in text.lines() {
                if let Some(v) = line.strip_prefix("apiVersion: ") {
                    api_version = v;
                } else if let Some(kind) = line.strip_prefix("kind: ") {
                    kinds.insert((api_version.to_owned(), kind.to_owned()));
                }
            }
        }
        let mesh_kinds: Vec<_> = kinds
            .iter()
            .filter(|(api_version, _)| api_version.contains('/'))
            .collect();
        assert!(mesh_kinds.len() >= 10, "{kinds:?}");
        for (api_version, kind) in mesh_kinds {
            let group = api_version.split('/').next().unwrap();
            let resource = plural(kind);
            assert!(
                RULES.iter().any(|r| r.role == Role::Meshes
                    && r.group == group
                    && r.resources.contains(&resource.as_str())
                    && ["create", "patch", "delete"]
                        .iter()
                        .all(|v| r.verbs.contains(v))),
                "{group}/{resource} ({kind}) is applied but not granted"
            );
        }
        assert_eq!(plural("AuthorizationPolicy"), "authorizationpolicies");
        assert_eq!(plural("Gateway"), "gateways");
        assert_eq!(plural("Mesh"), "meshes");
    }

    #[test]
    fn every_resource_is_named_once_per_role_and_every_verb_is_one_rbac_knows() {
        let known = [
            "get",
            "list",
            "watch",
            "create",
            "update",
            "patch",
            "delete",
            "deletecollection",
        ];
        let mut seen = std::collections::BTreeSet::new();
        for rule in RULES {
            assert!(rule.verbs.iter().all(|v| known.contains(v)), "{rule:?}");
            for resource in rule.resources {
                assert!(
                    seen.insert((rule.group, *resource)),
                    "{}/{resource} twice",
                    rule.group
                );
            }
        }
    }
}
