//! Linkerd's identity API as generated from `proto/linkerd_identity.proto` (client only),
//! checked in under `generated/` (see `meshbench_testkit::protobuf`).

pub mod proto {
    include!("generated/io.linkerd.proxy.identity.rs");
}
