//! Receiving with the kernel's arrival time. With `SO_TIMESTAMPNS` on a socket, every read
//! carries the time the last segment it returned reached the network stack, so a response's
//! end is known to within the kernel's own latency however late the generator gets to it.
//! That lets the open loop sleep through responses and read them at its next send (one
//! wake-up per request instead of two) without adding its sleep to any latency.

use std::io::{self, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd};

use nix::sys::socket::{recvmsg, setsockopt, sockopt, ControlMessageOwned, MsgFlags};
use nix::sys::time::TimeSpec;

/// Room for one timestamp control message.
pub(crate) fn control_buffer() -> Vec<u8> {
    nix::cmsg_space!(TimeSpec)
}

/// Asks the kernel to timestamp what `socket` receives.
pub(crate) fn enable_timestamps(socket: &impl AsFd) -> io::Result<()> {
    setsockopt(socket, sockopt::ReceiveTimestampns, &true).map_err(io::Error::from)
}

/// Reads into `buf`; returns the byte count and, when the socket timestamps, the arrival
/// time of the last byte read (CLOCK_REALTIME ns).
pub(crate) fn receive(
    socket: &impl AsRawFd,
    buf: &mut [u8],
    control: &mut [u8],
) -> io::Result<(usize, Option<i64>)> {
    let mut iov = [IoSliceMut::new(buf)];
    let msg = recvmsg::<()>(
        socket.as_raw_fd(),
        &mut iov,
        Some(control),
        MsgFlags::empty(),
    )
    .map_err(io::Error::from)?;
    let mut arrival = None;
    for cmsg in msg.cmsgs().map_err(io::Error::from)? {
        if let ControlMessageOwned::ScmTimestampns(ts) = cmsg {
            arrival = Some(ts.tv_sec() * 1_000_000_000 + ts.tv_nsec());
        }
    }
    Ok((msg.bytes, arrival))
}
