//! Linkerd's identity API as generated from `proto/linkerd_identity.proto` (client only).

pub mod proto {
    tonic::include_proto!("io.linkerd.proxy.identity");
}
