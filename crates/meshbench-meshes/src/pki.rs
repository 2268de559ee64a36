//! The lab's identities: a CA, one SVID per workload of the topology (SPIFFE ID, plus the DNS
//! name `<sa>.<ns>.svc` for proxies that can only match DNS SANs, plus a combined PEM for
//! HAProxy), and the zero-trust policy of the experiment. They live in the run's proxy area,
//! readable by the proxy user, which every sidecar and agent runs as; the CA's key stays
//! root's.

use std::path::{Path, PathBuf};
use std::time::Duration;

use meshbench_identity::{CertificateAuthority, IssueOptions, SpiffeId};
use meshbench_topology::{Pod, Topology};

use crate::{Error, ProxyArea};

pub const TRUST_DOMAIN: &str = "cluster.local";

#[derive(Debug, Clone)]
pub struct MeshPki {
    pub dir: PathBuf,
    pub ca: PathBuf,
    pub policy: PathBuf,
    /// Lifetime of every SVID, the first ones and the CA service's renewals (`None`: the
    /// CA's default of 24 h). Short lifetimes make proxies rotate while traffic flows.
    pub svid_ttl: Option<Duration>,
}

/// One workload's credentials.
#[derive(Debug, Clone)]
pub struct WorkloadSvid {
    pub id: String,
    pub dns_name: String,
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Certificate and key in one file (HAProxy).
    pub combined: PathBuf,
}

impl MeshPki {
    /// Creates the CA and SVIDs in `area`'s `pki` directory. `policy_yaml` is written as
    /// `policy.yaml`.
    pub fn create(area: &ProxyArea, topology: &Topology, policy_yaml: &str) -> Result<Self, Error> {
        Self::create_with_ttl(area, topology, policy_yaml, None)
    }

    /// A run's identities under `policy`, in a proxy area of their own made for `results`
    /// (where the proxy user can reach them whatever the results directory's permissions;
    /// removed when the area is dropped).
    pub fn for_run(
        results: &Path,
        topology: &Topology,
        policy: &meshbench_policy::Policy,
    ) -> Result<(ProxyArea, Self), Error> {
        let area = ProxyArea::create(results)?;
        let pki = MeshPki::create(&area, topology, &policy.to_yaml()?)?;
        Ok((area, pki))
    }

    /// As [`MeshPki::create`], with SVIDs that live `svid_ttl`.
    pub fn create_with_ttl(
        area: &ProxyArea,
        topology: &Topology,
        policy_yaml: &str,
        svid_ttl: Option<Duration>,
    ) -> Result<Self, Error> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| Error::Io { path, source }
        };
        let dir = &area.private_dir("pki")?;
        let ca = CertificateAuthority::init(dir, TRUST_DOMAIN)?;
        for w in &topology.workloads {
            let dns_name = dns_name(&w.namespace, &w.service_account);
            let svid = ca.issue(
                &w.namespace,
                &w.service_account,
                &IssueOptions {
                    dns_names: vec![dns_name],
                    ttl: svid_ttl,
                    ..IssueOptions::default()
                },
            )?;
            let stem = svid_file_stem(&w.namespace, &w.service_account);
            svid.write(dir, &stem)?;
            let combined = dir.join(format!("{stem}.combined.pem"));
            meshbench_identity::write_secret(
                &combined,
                format!("{}{}", svid.cert_pem, svid.key_pem).as_bytes(),
            )?;
        }
        let policy = dir.join("policy.yaml");
        std::fs::write(&policy, policy_yaml).map_err(io(&policy))?;
        // The proxies run as the proxy user and must read their keys.
        for entry in std::fs::read_dir(dir).map_err(io(dir))?.flatten() {
            let path = entry.path();
            let is_ca_key = path.file_name().is_some_and(|n| n == "ca.key");
            if !is_ca_key {
                area.give(&path)?;
            }
        }
        Ok(MeshPki {
            dir: dir.to_path_buf(),
            ca: dir.join("ca.pem"),
            policy,
            svid_ttl,
        })
    }

    /// A new SVID for a workload, living `ttl`, from the run's CA: for platforms that hand
    /// each pod its credentials when it is created rather than when the run starts.
    pub fn issue_now(
        &self,
        namespace: &str,
        service_account: &str,
        ttl: Duration,
    ) -> Result<meshbench_identity::IssuedSvid, Error> {
        let ca = CertificateAuthority::load(&self.dir)?;
        Ok(ca.issue(
            namespace,
            service_account,
            &IssueOptions {
                dns_names: vec![dns_name(namespace, service_account)],
                ttl: Some(ttl),
                ..IssueOptions::default()
            },
        )?)
    }

    pub fn svid(&self, namespace: &str, service_account: &str) -> WorkloadSvid {
        let stem = svid_file_stem(namespace, service_account);
        WorkloadSvid {
            id: spiffe_id(namespace, service_account),
            dns_name: dns_name(namespace, service_account),
            cert: self.dir.join(format!("{stem}.pem")),
            key: self.dir.join(format!("{stem}.key")),
            combined: self.dir.join(format!("{stem}.combined.pem")),
        }
    }
}

pub fn spiffe_id(namespace: &str, service_account: &str) -> String {
    SpiffeId::for_workload(TRUST_DOMAIN, namespace, service_account)
        .map(|id| id.to_string())
        .unwrap_or_else(|_| format!("spiffe://{TRUST_DOMAIN}/ns/{namespace}/sa/{service_account}"))
}

fn dns_name(namespace: &str, service_account: &str) -> String {
    format!("{service_account}.{namespace}.svc")
}

/// The name of a workload's SVID files in the identity directory, before `.pem`, `.key`
/// or `.combined.pem`.
pub fn svid_file_stem(namespace: &str, service_account: &str) -> String {
    format!("{namespace}.{service_account}")
}

/// Where the run's credentials are, as our proxies read them (the run's area on the local
/// lab, the pod's `pki/` directory on a cluster): what the plans of our data plane take, so
/// that one plan serves both platforms.
pub(crate) struct PkiLayout<'a> {
    pub ca: PathBuf,
    pub policy: PathBuf,
    /// A pod's SVID: certificate and key.
    pub svid: &'a dyn Fn(&Pod) -> (PathBuf, PathBuf),
}
