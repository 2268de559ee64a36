//! Capturing an interface's packets without tcpdump: an AF_PACKET socket writing a pcap
//! stream. It is what `meshbench wire capture` runs inside a pod on a cluster, where the
//! image has no tcpdump; the pcap it writes is analyzed exactly as tcpdump's
//! ([`crate::analyze_pcap`]). It is bounded: it stops at its stop signal, its byte budget or
//! its time budget, whichever comes first, and says which.

use std::io::Write;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant, SystemTime};

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::DataLink;

use crate::Error;

/// The budgets of one capture.
#[derive(Debug, Clone, Copy)]
pub struct CaptureLimits {
    /// Bytes of packets written, at most (default 256 MiB).
    pub max_bytes: u64,
    /// How long it captures, at most (default 120 s).
    pub max_duration: Duration,
}

impl Default for CaptureLimits {
    fn default() -> Self {
        CaptureLimits {
            max_bytes: 256 << 20,
            max_duration: Duration::from_secs(120),
        }
    }
}

/// Which frames a capture writes: every one, or only IP packets between given addresses (a
/// node's link also carries the node's own traffic, the capture's own output to the API
/// server among it, which would otherwise spend the byte budget).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FrameFilter {
    between: Vec<IpAddr>,
}

impl FrameFilter {
    /// Only IP packets whose source and destination are both among `addresses` (every frame
    /// when there are none).
    pub fn between(addresses: Vec<IpAddr>) -> Self {
        FrameFilter { between: addresses }
    }

    /// Whether the Ethernet frame `frame` is kept; frames that are not IP are not, when the
    /// filter names addresses.
    pub fn keeps(&self, frame: &[u8]) -> bool {
        if self.between.is_empty() {
            return true;
        }
        let Ok(sliced) = etherparse::SlicedPacket::from_ethernet(frame) else {
            return false;
        };
        let (source, destination): (IpAddr, IpAddr) = match &sliced.net {
            Some(etherparse::NetSlice::Ipv4(ip)) => (
                ip.header().source_addr().into(),
                ip.header().destination_addr().into(),
            ),
            Some(etherparse::NetSlice::Ipv6(ip)) => (
                ip.header().source_addr().into(),
                ip.header().destination_addr().into(),
            ),
            _ => return false,
        };
        self.between.contains(&source) && self.between.contains(&destination)
    }
}

/// What a capture saw, and why it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureSummary {
    pub packets: u64,
    pub bytes: u64,
    /// The budget that ended it (`bytes`, `duration`), or `None` when it was stopped.
    pub cut_short_by: Option<&'static str>,
}

/// The longest frame kept whole. Offloads hand a capture frames far above the MTU (64 KiB
/// segments, more with BIG TCP); longer ones are cut and keep their length on the wire.
const SNAPLEN: usize = 256 << 10;
/// How often the stop signal is looked at while the link is quiet.
const POLL: Duration = Duration::from_millis(20);
/// How long a stopped capture goes on reading what is queued, at most (a busy link is
/// never quiet).
const DRAIN: Duration = Duration::from_millis(500);
/// Kernel buffer for the socket: a burst while the writer is busy is not dropped.
const SOCKET_BUFFER: usize = 16 << 20;

/// Captures the frames of `interface` (both directions) that `filter` keeps into `out` as a
/// pcap stream until `stop` says so or a budget runs out. `listening` is called once the socket is bound, so
/// a caller knows that what it sends from then on is seen.
pub fn capture(
    interface: &str,
    out: impl Write,
    mut stop: impl FnMut() -> bool,
    limits: CaptureLimits,
    filter: &FrameFilter,
    listening: impl FnOnce(),
) -> Result<CaptureSummary, Error> {
    let fail = |cause: std::io::Error| Error::Capture {
        interface: interface.to_owned(),
        cause,
    };
    let socket = PacketSocket::open(interface).map_err(fail)?;
    let header = PcapHeader {
        snaplen: SNAPLEN as u32,
        datalink: DataLink::ETHERNET,
        ..PcapHeader::default()
    };
    let pcap_err =
        |e: pcap_file::PcapError| fail(std::io::Error::other(format!("writing the pcap: {e}")));
    let mut writer = PcapWriter::with_header(out, header).map_err(pcap_err)?;
    listening();
    let started = Instant::now();
    let mut buffer = vec![0u8; SNAPLEN];
    let mut summary = CaptureSummary {
        packets: 0,
        bytes: 0,
        cut_short_by: None,
    };
    // Once stopped, what the socket already queued is still read: the frames of what the
    // caller did just before stopping are there, not yet written.
    let mut draining_until: Option<Instant> = None;
    loop {
        if draining_until.is_none() && stop() {
            draining_until = Some(Instant::now() + DRAIN);
        }
        if draining_until.is_some_and(|until| Instant::now() >= until) {
            break;
        }
        if started.elapsed() >= limits.max_duration {
            summary.cut_short_by = Some("duration");
            break;
        }
        let Some(frame) = socket.receive(&mut buffer).map_err(fail)? else {
            if draining_until.is_some() {
                break;
            }
            continue;
        };
        if !filter.keeps(&buffer[..frame.captured]) {
            continue;
        }
        if summary.bytes + frame.captured as u64 > limits.max_bytes {
            summary.cut_short_by = Some("bytes");
            break;
        }
        let timestamp = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        writer
            .write_packet(&PcapPacket::new(
                timestamp,
                frame.on_wire as u32,
                &buffer[..frame.captured],
            ))
            .map_err(pcap_err)?;
        summary.packets += 1;
        summary.bytes += frame.captured as u64;
    }
    writer.into_writer().flush().map_err(fail)?;
    Ok(summary)
}

/// The interface this machine (or network namespace) sends packets for `ip` through: `lo`
/// for one of its own addresses, otherwise the most specific route's (IPv4 routes only,
/// from `/proc/net/route`).
pub fn interface_toward(ip: std::net::IpAddr) -> Result<String, Error> {
    let fail = |message: String| Error::Capture {
        interface: format!("toward {ip}"),
        cause: std::io::Error::other(message),
    };
    if std::net::UdpSocket::bind((ip, 0)).is_ok() {
        return Ok("lo".into());
    }
    let std::net::IpAddr::V4(ip) = ip else {
        return Err(fail("only IPv4 routes are read".into()));
    };
    let table = std::fs::read_to_string("/proc/net/route")
        .map_err(|e| fail(format!("/proc/net/route: {e}")))?;
    route_for(&table, ip).ok_or_else(|| fail("no route to it".into()))
}

/// The interface of the most specific route in `table` (`/proc/net/route`'s text) that
/// matches `ip`.
fn route_for(table: &str, ip: std::net::Ipv4Addr) -> Option<String> {
    // Addresses and masks are the network-order bytes printed as a native-endian number.
    let parse = |hex: &str| {
        u32::from_str_radix(hex, 16)
            .ok()
            .map(|v| u32::from_be_bytes(v.to_ne_bytes()))
    };
    let target = u32::from(ip);
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (interface, destination, mask) = (fields.first()?, fields.get(1)?, fields.get(7)?);
            let (destination, mask) = (parse(destination)?, parse(mask)?);
            (target & mask == destination).then(|| (mask.count_ones(), (*interface).to_owned()))
        })
        .max_by_key(|(prefix, _)| *prefix)
        .map(|(_, interface)| interface)
}

/// A frame received: how much of it is in the buffer, and its length on the wire.
struct Frame {
    captured: usize,
    on_wire: usize,
}

/// A raw packet socket bound to one interface.
struct PacketSocket {
    fd: OwnedFd,
    /// On loopback every frame is seen leaving and arriving; only the arrival is kept, as
    /// tcpdump does.
    loopback: bool,
}

impl PacketSocket {
    fn open(interface: &str) -> std::io::Result<Self> {
        use rustix::net::{sockopt, AddressFamily, SocketFlags, SocketType};
        let name = std::ffi::CString::new(interface)
            .map_err(|_| std::io::Error::other("an interface name has no NUL byte"))?;
        let fd = rustix::net::socket_with(
            AddressFamily::PACKET,
            SocketType::RAW,
            SocketFlags::CLOEXEC,
            Some(rustix::net::eth::ALL),
        )?;
        if sockopt::set_socket_recv_buffer_size_force(&fd, SOCKET_BUFFER).is_err() {
            sockopt::set_socket_recv_buffer_size(&fd, SOCKET_BUFFER)?;
        }
        sockopt::set_socket_timeout(&fd, sockopt::Timeout::Recv, Some(POLL))?;
        bind_to_interface(&fd, &name)?;
        Ok(PacketSocket {
            fd,
            loopback: interface == "lo",
        })
    }

    /// The next frame, or `None` when none came within the poll interval.
    fn receive(&self, buffer: &mut [u8]) -> std::io::Result<Option<Frame>> {
        loop {
            let (on_wire, kind) = match receive_from(&self.fd, buffer) {
                Ok(received) => received,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return Ok(None)
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if self.loopback && kind == libc::PACKET_OUTGOING {
                continue;
            }
            return Ok(Some(Frame {
                captured: on_wire.min(buffer.len()),
                on_wire,
            }));
        }
    }
}

fn bind_to_interface(fd: &OwnedFd, name: &std::ffi::CStr) -> std::io::Result<()> {
    // SAFETY: `name` is a NUL-terminated string that outlives the call.
    #[allow(unsafe_code)]
    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if index == 0 {
        return Err(std::io::Error::last_os_error());
    }
    let address = libc::sockaddr_ll {
        sll_family: libc::AF_PACKET as u16,
        sll_protocol: (libc::ETH_P_ALL as u16).to_be(),
        sll_ifindex: index as i32,
        sll_hatype: 0,
        sll_pkttype: 0,
        sll_halen: 0,
        sll_addr: [0; 8],
    };
    // SAFETY: `address` is a valid sockaddr_ll and the length passed is its size; the kernel
    // only reads it during the call.
    #[allow(unsafe_code)]
    let bound = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            std::ptr::addr_of!(address).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as u32,
        )
    };
    if bound != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Receives one frame into `buffer`: its length on the wire (MSG_TRUNC) and its packet type
/// (incoming, outgoing, ...).
fn receive_from(fd: &OwnedFd, buffer: &mut [u8]) -> std::io::Result<(usize, u8)> {
    // SAFETY: sockaddr_ll is plain data; all zeroes is a valid value of it.
    #[allow(unsafe_code)]
    let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    let mut from_len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
    // SAFETY: the buffer and the address are valid for writes of the lengths passed, and
    // neither is used by the kernel after the call returns.
    #[allow(unsafe_code)]
    let received = unsafe {
        libc::recvfrom(
            fd.as_raw_fd(),
            buffer.as_mut_ptr().cast(),
            buffer.len(),
            libc::MSG_TRUNC,
            std::ptr::addr_of_mut!(from).cast(),
            &mut from_len,
        )
    };
    if received < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((received as usize, from.sll_pkttype))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::net::{TcpListener, TcpStream};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{mpsc, Arc};

    #[test]
    fn a_capture_of_loopback_holds_a_connection_and_its_marker_once() {
        if !meshbench_testkit::require_root("opening a packet socket") {
            return;
        }
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let server = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let (listening_tx, listening) = mpsc::channel();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lo.pcap");
        let capturing = {
            let stop = stop.clone();
            let file = std::fs::File::create(&path).unwrap();
            std::thread::spawn(move || {
                capture(
                    "lo",
                    file,
                    || stop.load(Ordering::Relaxed),
                    CaptureLimits::default(),
                    &FrameFilter::default(),
                    move || listening_tx.send(()).unwrap(),
                )
                .unwrap()
            })
        };
        listening.recv_timeout(Duration::from_secs(10)).unwrap();
        let marker = format!("mb-packet-test-{}", server.port());
        let mut client = TcpStream::connect(server).unwrap();
        let (mut accepted, _) = listener.accept().unwrap();
        client.write_all(marker.as_bytes()).unwrap();
        let mut got = vec![0; marker.len()];
        accepted.read_exact(&mut got).unwrap();
        drop((client, accepted));
        stop.store(true, Ordering::Relaxed);
        let summary = capturing.join().unwrap();
        assert_eq!(summary.cut_short_by, None);
        let report = crate::analyze_pcap(&path, marker.as_bytes()).unwrap();
        let flows: Vec<_> = report.flows.iter().filter(|f| f.server == server).collect();
        assert_eq!(flows.len(), 1, "{report:?}");
        assert!(flows[0].marker_seen && !flows[0].tls);
        // Seen once, not once leaving and once arriving.
        assert_eq!(flows[0].bytes_to_server, marker.len() as u64);
    }

    /// An Ethernet frame holding a TCP segment from `source` to `destination`.
    fn tcp_frame(source: [u8; 4], destination: [u8; 4]) -> Vec<u8> {
        let builder = etherparse::PacketBuilder::ethernet2([0; 6], [0; 6])
            .ipv4(source, destination, 64)
            .tcp(40000, 15008, 1, 1024);
        let mut frame = Vec::new();
        builder.write(&mut frame, b"payload").unwrap();
        frame
    }

    #[test]
    fn a_filter_keeps_only_packets_between_its_addresses() {
        let (a, b, api) = ([10, 77, 0, 11], [10, 77, 0, 12], [10, 77, 0, 1]);
        let filter = FrameFilter::between(vec![a.into(), b.into()]);
        assert!(filter.keeps(&tcp_frame(a, b)));
        assert!(filter.keeps(&tcp_frame(b, a)));
        assert!(!filter.keeps(&tcp_frame(a, api)));
        assert!(!filter.keeps(&[0u8; 14]), "not IP");
        assert!(!filter.keeps(&[]));
        assert!(FrameFilter::default().keeps(&tcp_frame(a, api)));
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_are_judged_without_a_panic(frame in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..128)) {
            let filter = FrameFilter::between(vec!["10.0.0.1".parse().unwrap()]);
            let _ = filter.keeps(&frame);
        }
    }

    #[test]
    fn the_most_specific_route_names_the_interface() {
        let table =
            "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
            eth0\t00000000\t01004D0A\t0003\t0\t0\t0\t00000000\t0\t0\t0\n\
            eth0\t00004D0A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n\
            cni0\t0001F40A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n";
        let route = |ip: &str| route_for(table, ip.parse().unwrap());
        assert_eq!(route("10.244.1.7").as_deref(), Some("cni0"));
        assert_eq!(route("10.77.0.12").as_deref(), Some("eth0"));
        assert_eq!(route("192.0.2.1").as_deref(), Some("eth0"));
        assert_eq!(route_for("Iface\n", "192.0.2.1".parse().unwrap()), None);
    }

    #[test]
    fn a_capture_ends_at_its_time_budget_and_says_so() {
        if !meshbench_testkit::require_root("opening a packet socket") {
            return;
        }
        let limits = CaptureLimits {
            max_duration: Duration::from_millis(100),
            ..CaptureLimits::default()
        };
        let all = FrameFilter::default();
        let summary = capture("lo", std::io::sink(), || false, limits, &all, || {}).unwrap();
        assert_eq!(summary.cut_short_by, Some("duration"));
    }

    #[test]
    fn an_unknown_interface_is_named_in_the_error() {
        if !meshbench_testkit::require_root("opening a packet socket") {
            return;
        }
        let err = capture(
            "mb-no-such-if",
            std::io::sink(),
            || true,
            CaptureLimits::default(),
            &FrameFilter::default(),
            || {},
        )
        .unwrap_err();
        assert!(err.to_string().contains("mb-no-such-if"), "{err}");
    }
}
