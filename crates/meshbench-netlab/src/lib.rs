//! The local lab's network. A [`Topology`](meshbench_topology::Topology) becomes either
//!
//! - `netns` (root): every node a network namespace with a bridge, every pod a namespace
//!   attached to its node's bridge by a veth pair, nodes joined through a fabric bridge so
//!   inter-node traffic crosses a real link (each node's `uplink`). Services get ClusterIPs
//!   that every node DNATs to the service's pod, and names in each pod's hosts file. Meshes
//!   capture traffic with iptables REDIRECT in the pod (sidecars) or on the node (agents);
//! - `loopback` (no privileges): every pod its own 127.x address, explicit proxy ports.
//!
//! Everything a lab creates is named `mb-<lab id>-...` so teardown (always, also on error and
//! Ctrl-C) and `meshbench lab clean` (after a crash) find it.

mod capture;
mod clean;
mod command;
mod enter;
mod loopback;
mod netns;
mod network;
mod packet;
mod plan;
mod relay;
mod scratch;
mod wire;

use meshbench_role::InputFault;

pub use capture::{NodeCapture, NodeCaptureFile, NodeRedirect, SidecarCapture, PROXY_UID};
pub use clean::{clean_all, CleanReport};
pub use command::which;
pub use enter::run_in_netns;
pub use loopback::LoopbackLab;
pub use netns::NetnsLab;
pub use network::{new_lab_id, Backend, LabNetwork, NetPlace};
pub use packet::{capture, interface_toward, CaptureLimits, CaptureSummary, FrameFilter};
pub use plan::AddressPlan;
pub use relay::WireTap;
pub use scratch::ScratchNetns;
pub use wire::{analyze_pcap, send_times_to_port, FlowVerdict, WireCapture, WireReport};

/// Prefix of every namespace, interface file and cgroup a lab creates.
pub const LAB_PREFIX: &str = "mb-";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("`{command}` failed ({status}): {stderr}")]
    Command {
        command: String,
        status: String,
        stderr: String,
    },
    #[error("cannot run `{command}`: {source}")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
    #[error("the netns backend needs root (network namespaces, veth, iptables); run as root or use --backend loopback")]
    NotPermitted,
    #[error(
        "the netns backend needs `{tool}`, which is not installed; install it with: {install}"
    )]
    MissingTool { tool: String, install: String },
    #[error(transparent)]
    Topology(#[from] meshbench_topology::Error),
    #[error(transparent)]
    Lab(#[from] meshbench_lab::Error),
    #[error("{path}: {source}")]
    Io {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("unknown {kind} {name:?} in this lab")]
    Unknown { kind: &'static str, name: String },
    #[error("capture {path}: {message}")]
    Pcap {
        path: std::path::PathBuf,
        message: String,
    },
    /// (Not `source`: the message already carries it, and a chain would print it twice.)
    #[error("capturing on interface {interface}: {cause}")]
    Capture {
        interface: String,
        cause: std::io::Error,
    },
    #[error("{what} is not possible on the {backend} backend")]
    Unsupported {
        what: &'static str,
        backend: &'static str,
    },
}

impl InputFault for Error {
    fn is_bad_input(&self) -> bool {
        match self {
            Error::Topology(_) => true,
            Error::Lab(e) => e.is_bad_input(),
            Error::NotPermitted | Error::MissingTool { .. } => true,
            // An interface that does not exist was named by the user.
            Error::Capture { cause, .. } => cause.raw_os_error() == Some(libc::ENODEV),
            _ => false,
        }
    }
}
