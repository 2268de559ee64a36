//! Running a piece of meshbench itself inside a lab namespace: a dedicated thread joins the
//! namespace (only that thread; the process stays where it is) and runs the closure there,
//! so a verifier can dial a pod's loopback or a pod IP exactly as a process in it would.

use std::os::fd::AsFd;

use crate::Error;

/// Runs `f` on a new thread inside network namespace `netns` (a name under `/run/netns`)
/// and returns its result.
pub fn run_in_netns<T: Send + 'static>(
    netns: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Error> {
    let path = std::path::PathBuf::from(format!("/run/netns/{netns}"));
    let file = std::fs::File::open(&path).map_err(|source| Error::Io {
        path: path.clone(),
        source,
    })?;
    let joined = std::thread::spawn(move || {
        rustix::thread::move_into_link_name_space(
            file.as_fd(),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .map(|()| f())
    })
    .join()
    .expect("the closure run in a namespace panicked");
    joined.map_err(|e| Error::Io {
        path,
        source: e.into(),
    })
}
