//! Errors of the Kubernetes backend.

use meshbench_role::InputFault;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubeconfig: {0}")]
    Config(String),
    #[error("the Kubernetes API ({what}): {source}")]
    Api { what: String, source: kube::Error },
    /// A pod that cannot start ends its cell with the cluster's reason.
    #[error("pod {namespace}/{pod} cannot start: {reason}: {message}{}", logs_suffix(.logs))]
    PodFailed {
        namespace: String,
        pod: String,
        /// `ImagePullBackOff`, `CrashLoopBackOff`, `Unschedulable`, ...
        reason: String,
        message: String,
        /// The last lines the container wrote, when it ran.
        logs: Option<String>,
    },
    #[error("pod {namespace}/{pod} was not {what} after {seconds} s")]
    Timeout {
        namespace: String,
        pod: String,
        what: &'static str,
        seconds: u64,
    },
    #[error("the cluster has {have} schedulable node(s) ({names}); this cell needs {need}")]
    TooFewNodes {
        have: usize,
        need: usize,
        names: String,
    },
    #[error("the load generator's result in pod {pod}'s log is missing or invalid: {problem}")]
    Result { pod: String, problem: String },
    #[error("`{command}` in pod {pod}: {problem}")]
    Exec {
        pod: String,
        command: String,
        problem: String,
    },
    #[error(transparent)]
    Mesh(#[from] meshbench_meshes::Error),
    #[error("the cell's wire capture: {0}")]
    Wire(#[from] meshbench_netlab::Error),
    #[error("{path}: {source}")]
    Io {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("the {what} is not supported on Kubernetes yet: {why}")]
    Unsupported { what: String, why: String },
    /// The caller lacks permissions meshbench needs (see `access`), each named.
    #[error(
        "the cluster does not let this user {}; grant docs/rbac.yaml's ClusterRoles (or the \
         rules named) to it",
        missing.join("; ")
    )]
    Forbidden { missing: Vec<String> },
    /// A part of the cluster the cell needs stopped answering for longer than the cell can
    /// wait: its figures could not be trusted, or had no way back.
    #[error(
        "{component} has not answered for {seconds} s ({reason}); the cell is given up (its \
         pods are deleted once the cluster lets them go; `meshbench run --resume` runs it again)"
    )]
    Lost {
        component: String,
        seconds: u64,
        reason: String,
    },
    /// Deleted pods that cannot go before their node's kubelet answers again.
    #[error(
        "pods on {} stay until the node's kubelet answers again; run `meshbench lab clean \
         --backend kubernetes` once it does",
        nodes.join(", ")
    )]
    HeldByLostNodes { nodes: Vec<String> },
    /// The cluster refused what meshbench applied for a mesh it runs.
    #[error("the cluster refused {what}: {why}")]
    Refused { what: String, why: String },
}

fn logs_suffix(logs: &Option<String>) -> String {
    logs.as_ref()
        .map(|l| format!("; its last log lines:\n{l}"))
        .unwrap_or_default()
}

impl Error {
    pub(crate) fn api(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
        let what = what.into();
        move |source| Error::Api { what, source }
    }
}

impl From<Error> for meshbench_meshes::Error {
    fn from(e: Error) -> Self {
        meshbench_meshes::Error::Platform(Box::new(e))
    }
}

impl InputFault for Error {
    fn is_bad_input(&self) -> bool {
        matches!(
            self,
            Error::Config(_)
                | Error::TooFewNodes { .. }
                | Error::Unsupported { .. }
                | Error::Forbidden { .. }
        )
    }
}
