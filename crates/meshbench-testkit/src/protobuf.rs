//! Keeps the checked-in protobuf code true to its `.proto` files. The generated Rust lives in
//! the crate's `src/generated/`, so that building meshbench compiles no protobuf compiler and
//! no code generator (they were about 50 CPU-seconds of a fresh build, every user's first
//! wait); the tests regenerate it with the same generator and fail when it differs.

use std::path::{Path, PathBuf};

/// The environment variable that makes [`check_generated_code`] rewrite the checked-in files
/// instead of comparing them.
pub const REGENERATE: &str = "MESHBENCH_REGENERATE_PROTOBUF";

/// One `.proto` file of a crate, relative to its `proto/` directory, and whether its server
/// side is generated as well as its client.
pub struct Proto {
    pub file: &'static str,
    pub server: bool,
}

/// Regenerates the code of `protos` (under `crate_dir/proto/`) and asserts that each file equals
/// the one checked in under `crate_dir/src/generated/`; with [`REGENERATE`] set, writes them.
pub fn check_generated_code(crate_dir: &Path, protos: &[Proto]) {
    let include = crate_dir.join("proto");
    let checked_in = crate_dir.join("src/generated");
    let fresh = tempfile::tempdir().expect("a temporary directory");
    for proto in protos {
        let descriptors = protox::compile([include.join(proto.file)], [&include])
            .unwrap_or_else(|e| panic!("{} is not a valid protobuf definition: {e}", proto.file));
        tonic_prost_build::configure()
            .build_server(proto.server)
            .out_dir(fresh.path())
            .compile_fds(descriptors)
            .unwrap_or_else(|e| panic!("generating code for {}: {e}", proto.file));
    }
    let regenerate = std::env::var_os(REGENERATE).is_some();
    let mut generated: Vec<PathBuf> = std::fs::read_dir(fresh.path())
        .expect("the generator's output")
        .map(|entry| entry.expect("an output file").path())
        .collect();
    generated.sort();
    assert!(!generated.is_empty(), "the generator wrote nothing");
    for path in generated {
        let name = path.file_name().expect("a file name");
        let target = checked_in.join(name);
        let want = std::fs::read_to_string(&path).expect("the generated code");
        if regenerate {
            std::fs::create_dir_all(&checked_in).expect("src/generated");
            std::fs::write(&target, &want).expect("writing the generated code");
            continue;
        }
        let have = std::fs::read_to_string(&target).unwrap_or_default();
        assert!(
            have == want,
            "{} is not what its .proto generates; regenerate it: \
             {REGENERATE}=1 cargo test --workspace -- {}",
            target.display(),
            std::thread::current()
                .name()
                .unwrap_or("the_checked_in_protobuf_code_is_current")
        );
    }
}
