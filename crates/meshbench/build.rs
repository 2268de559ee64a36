//! Records the git commit and build profile, which every result carries: a debug build or an
//! unknown commit changes how a figure must be read.

use std::process::Command;

fn main() {
    let commit = Command::new("git")
        .args(["describe", "--always", "--dirty", "--abbrev=12"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=MESHBENCH_GIT_COMMIT={commit}");
    let profile = std::env::var("PROFILE").unwrap_or_else(|_| "unknown".to_owned());
    println!("cargo:rustc-env=MESHBENCH_BUILD_PROFILE={profile}");
    for path in ["../../.git/HEAD", "../../.git/index", "../../.git/refs"] {
        println!("cargo:rerun-if-changed={path}");
    }
}
