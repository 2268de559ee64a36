//! Compiles the meshes' certificate APIs with protox (pure Rust), so building meshbench needs
//! no protoc on the machine: Istio's (meshbench serves it and calls it) and Linkerd's
//! (meshbench only calls it).

fn main() {
    for (proto, server) in [
        ("proto/istio_ca.proto", true),
        ("proto/linkerd_identity.proto", false),
    ] {
        println!("cargo:rerun-if-changed={proto}");
        let descriptors = protox::compile([proto], ["proto"])
            .unwrap_or_else(|e| panic!("{proto} is not a valid protobuf definition: {e}"));
        tonic_prost_build::configure()
            .build_server(server)
            .compile_fds(descriptors)
            .unwrap_or_else(|e| panic!("generating code for {proto}: {e}"));
    }
}
