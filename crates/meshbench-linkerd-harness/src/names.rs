//! Linkerd's identities are DNS-like names, not SPIFFE IDs: a workload's is
//! `<sa>.<ns>.serviceaccount.identity.<control plane ns>.<trust domain>`, with the control
//! plane in `linkerd`, as the chart writes `LINKERD2_PROXY_IDENTITY_LOCAL_NAME`.

use meshbench_identity::SpiffeId;

/// The namespace Linkerd's control plane runs in, part of every identity it issues.
const CONTROL_PLANE_NAMESPACE: &str = "linkerd";

/// The Linkerd identity of a Kubernetes-style SPIFFE ID (`/ns/<ns>/sa/<sa>`); `None` for
/// any other path.
pub fn linkerd_name(id: &SpiffeId) -> Option<String> {
    let (ns, sa) = id.path().strip_prefix("/ns/")?.split_once("/sa/")?;
    if ns.is_empty() || sa.is_empty() || sa.contains('/') {
        return None;
    }
    Some(format!(
        "{sa}.{ns}.serviceaccount.identity.{CONTROL_PLANE_NAMESPACE}.{}",
        id.trust_domain()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_service_account_s_id_becomes_linkerd_s_name() {
        let id = SpiffeId::parse("spiffe://cluster.local/ns/bench/sa/client").unwrap();
        assert_eq!(
            linkerd_name(&id).as_deref(),
            Some("client.bench.serviceaccount.identity.linkerd.cluster.local")
        );
        let other = SpiffeId::parse("spiffe://cluster.local/workload/x").unwrap();
        assert_eq!(linkerd_name(&other), None);
    }
}
