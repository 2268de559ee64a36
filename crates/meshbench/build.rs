//! Records the git commit and build profile, which every result carries: a debug build or an
//! unknown commit changes how a figure must be read. Also lays the binary out so that each of
//! its processes keeps less of it resident: relocations packed, the data plane's functions
//! together.

use std::process::Command;

fn main() {
    let commit = match (git(&["describe", "--always", "--abbrev=12"]), dirty()) {
        (Some(commit), true) => format!("{commit}-dirty"),
        (Some(commit), false) => commit,
        (None, _) => "unknown".to_owned(),
    };
    println!("cargo:rustc-env=MESHBENCH_GIT_COMMIT={commit}");
    println!(
        "cargo:rustc-env=MESHBENCH_BUILD_PROFILE={}",
        build_profile()
    );
    pack_relative_relocations();
    order_hot_text();
    for path in ["../../.git/HEAD", "../../.git/index", "../../.git/refs"] {
        println!("cargo:rerun-if-changed={path}");
    }
}

/// What `git args` prints, trimmed, when it succeeds and prints something.
fn git(args: &[&str]) -> Option<String> {
    Command::new("git")
        .env("GIT_OPTIONAL_LOCKS", "0")
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
}

/// Whether tracked files differ from the commit. Not `git describe --dirty`: it refreshes the
/// index and writes `.git/index` (a fresh clone's entries are racily clean) whatever
/// `GIT_OPTIONAL_LOCKS` says, and that file is watched, so a fresh clone's next cargo command
/// ran this script again and rebuilt the whole crate (about 100 s). `git status` with optional
/// locks off reads the index without writing it.
fn dirty() -> bool {
    git(&["status", "--porcelain", "--untracked-files=no"]).is_some()
}

/// The profile's own name (`release`, `release-lto`, `debug`): cargo's `PROFILE` says only
/// `release` or `debug`, the family a custom profile inherits from, so the name is read from
/// the output directory, `target/[<triple>/]<profile>/build/<crate>-<hash>/out`.
fn build_profile() -> String {
    let family = std::env::var("PROFILE").unwrap_or_else(|_| "unknown".to_owned());
    let out_dir = std::env::var("OUT_DIR").unwrap_or_default();
    std::path::Path::new(&out_dir)
        .ancestors()
        .nth(3)
        .and_then(|dir| dir.file_name())
        .and_then(|name| name.to_str())
        .map(str::to_owned)
        .unwrap_or(family)
}

/// Links the binary with packed relative relocations (`DT_RELR`) when the C library it will run
/// on loads them (glibc 2.36 and later).
///
/// A position-independent executable of this size carries about 32,000 relative relocations
/// (about 750 KiB of `.rela.dyn`), all read by the loader at every start, so every process of
/// it (each sidecar, each node agent) keeps them resident for its whole life. Packed, they take
/// a few KiB. Older C libraries refuse such binaries, hence the check; the build host is the
/// host the lab runs on.
fn pack_relative_relocations() {
    let target = std::env::var("TARGET").unwrap_or_default();
    if !target.ends_with("-linux-gnu") {
        return;
    }
    let version = Command::new("getconf")
        .arg("GNU_LIBC_VERSION")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .unwrap_or_default();
    let mut parts = version
        .trim()
        .trim_start_matches("glibc ")
        .split('.')
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    if (major, minor) >= (2, 36) {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    } else {
        println!(
            "cargo:warning=glibc {major}.{minor} cannot load packed relocations: linking without them"
        );
    }
}

/// Places the functions the data plane's roles run (`link/hot-text.order`, written by
/// `scripts/hot-text`) together at the start of `.text`, in release builds linked by lld.
///
/// A sidecar runs about 2.8 MiB of the binary's 26 MiB of code, spread over all of it; as the
/// kernel maps up to 64 KiB around each faulting page, an L4 sidecar kept 8 to 11 MiB of the
/// binary resident, depending on how a build happened to lay it out: more than everything else
/// it holds for a thousand connections. Clustered, it keeps about 3.5 MiB. The list's names are
/// mangled with crate hashes, so another toolchain or dependency version matches fewer of them;
/// a name the link does not find is skipped (costing memory, never correctness), and
/// `scripts/hot-text --check` counts them.
fn order_hot_text() {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
    let order = std::path::Path::new(&manifest).join("link/hot-text.order");
    println!("cargo:rerun-if-changed={}", order.display());
    println!("cargo:rerun-if-env-changed=CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER");
    if std::env::var("PROFILE").as_deref() != Ok("release") || !order.exists() {
        return;
    }
    if !links_with_lld() {
        println!(
            "cargo:warning=not linking with rust-lld: the data plane's functions are not clustered (proxies keep more of the binary resident)"
        );
        return;
    }
    println!(
        "cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={}",
        order.display()
    );
    // A stale name is expected after a toolchain or dependency update, not an error.
    println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
}

/// Whether rustc links this build with its own lld: its default on x86_64 Linux since 1.90,
/// unless a linker is configured.
fn links_with_lld() -> bool {
    if std::env::var("TARGET").as_deref() != Ok("x86_64-unknown-linux-gnu")
        || std::env::var_os("CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER").is_some()
    {
        return false;
    }
    let flags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    if flags.contains("linker") || flags.contains("link-self-contained") {
        return false;
    }
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let version = Command::new(rustc)
        .arg("-V")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .unwrap_or_default();
    // "rustc 1.95.0 (...)"
    let minor = version
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.split('.').nth(1))
        .and_then(|m| m.parse::<u32>().ok());
    minor.is_some_and(|m| m >= 90)
}
