//! Compiles the gRPC echo's protobuf definition with protox (pure Rust), so building
//! meshbench needs no protoc on the machine.

fn main() {
    println!("cargo:rerun-if-changed=proto/ping.proto");
    let descriptors = protox::compile(["proto/ping.proto"], ["proto"])
        .expect("proto/ping.proto is a valid protobuf definition");
    tonic_prost_build::configure()
        .compile_fds(descriptors)
        .expect("generating the gRPC echo's code");
}
