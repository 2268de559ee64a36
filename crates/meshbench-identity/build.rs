//! Compiles Istio's certificate API with protox (pure Rust), so building meshbench needs no
//! protoc on the machine.

fn main() {
    println!("cargo:rerun-if-changed=proto/istio_ca.proto");
    let descriptors = protox::compile(["proto/istio_ca.proto"], ["proto"])
        .expect("proto/istio_ca.proto is a valid protobuf definition");
    tonic_prost_build::configure()
        .compile_fds(descriptors)
        .expect("generating Istio's certificate API");
}
