//! Proof on the wire: a `tcpdump` capture on a lab interface, and its analysis per TCP
//! connection: did every byte travel in TLS records, which TLS version and cipher suite the
//! server chose (both visible in the ServerHello), and did a known plaintext marker appear
//! anywhere. In TLS 1.3 certificates are encrypted, so identities are not visible on the wire;
//! the analysis does not pretend otherwise.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use etherparse::{NetSlice, SlicedPacket, TransportSlice};
use meshbench_results::WireObservation;

use crate::command::has_tool;
use crate::Error;

/// A running `tcpdump` writing a pcap file.
pub struct WireCapture {
    child: Child,
    path: PathBuf,
    /// `None`: the host's own namespace.
    netns: Option<String>,
    interface: String,
    link_packets_at_start: Option<u64>,
}

impl WireCapture {
    /// Captures TCP on `interface` of namespace `netns` into `path`; returns once tcpdump
    /// is listening.
    pub fn start(netns: &str, interface: &str, path: &Path) -> Result<Self, Error> {
        Self::start_in(Some(netns), interface, path)
    }

    /// Captures TCP on `interface` of the host's own namespace (e.g. `lo`, where benchmarks
    /// run their tools) into `path`.
    pub fn start_host(interface: &str, path: &Path) -> Result<Self, Error> {
        Self::start_in(None, interface, path)
    }

    fn start_in(netns: Option<&str>, interface: &str, path: &Path) -> Result<Self, Error> {
        if !has_tool("tcpdump") {
            return Err(Error::MissingTool {
                tool: "tcpdump".into(),
                install: "apt-get install -y tcpdump".into(),
            });
        }
        let (program, prefix) = match netns {
            Some(netns) => ("ip", vec!["netns", "exec", netns, "tcpdump"]),
            None => ("tcpdump", vec![]),
        };
        let command = format!(
            "{program} {}-i {interface} -U -n -w {}",
            prefix
                .iter()
                .map(|word| format!("{word} "))
                .collect::<String>(),
            path.display()
        );
        let mut child = Command::new(program)
            .args(prefix)
            .args([
                "-Z",
                "root",
                "--immediate-mode",
                "-i",
                interface,
                "-U",
                "-n",
                "-s",
                "0",
                // 64 MiB of kernel buffer (default 2): with both CPUs busy carrying the load,
                // tcpdump falls behind for moments and the default buffer dropped 2-3% of a
                // 5k rps run's packets.
                "-B",
                "65536",
                "-w",
            ])
            // No capture filter: the analysis picks TCP itself, and classic BPF filters proved
            // unreliable on some kernels (packets counted by the filter, none written).
            .arg(path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| Error::Spawn {
                command: command.clone(),
                source,
            })?;
        let stderr = child.stderr.take().expect("piped");
        // tcpdump says "listening on <if>" once its socket is open.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut said = Vec::new();
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("listening on") {
                    let _ = tx.send(Ok(()));
                    // Keep draining so tcpdump never blocks on a full pipe.
                    continue;
                }
                said.push(line);
            }
            let _ = tx.send(Err(said.join("; ")));
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(Ok(())) => Ok(WireCapture {
                link_packets_at_start: link_packets(netns, interface),
                netns: netns.map(str::to_owned),
                interface: interface.to_owned(),
                child,
                path: path.to_path_buf(),
            }),
            Ok(Err(stderr)) => {
                let _ = child.wait();
                Err(Error::Command {
                    command,
                    status: "exited".into(),
                    stderr,
                })
            }
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(Error::Command {
                    command,
                    status: "not listening after 10 s".into(),
                    stderr: String::new(),
                })
            }
        }
    }

    /// Stops the capture (flushing the file) and analyzes it.
    pub fn finish(self, marker: &[u8]) -> Result<WireReport, Error> {
        analyze_pcap(&self.stop(), marker)
    }

    /// Stops the capture once the file holds what the interface counted; returns the file.
    pub fn stop(mut self) -> PathBuf {
        self.wait_until_caught_up();
        if let Some(pid) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::INT);
        }
        let _ = self.child.wait();
        self.path.clone()
    }
}

impl WireCapture {
    /// tcpdump reads the kernel's capture buffer asynchronously and drops what is still in it
    /// when interrupted, so on a busy machine the last packets (a whole short exchange) could
    /// be missing. Wait until the file holds as many packets as the interface has counted
    /// since the capture began; give up after a deadline (the kernel may have dropped some,
    /// and the analysis then reports what was captured).
    fn wait_until_caught_up(&self) {
        let (Some(start), Some(now)) = (
            self.link_packets_at_start,
            link_packets(self.netns.as_deref(), &self.interface),
        ) else {
            return;
        };
        let expected = now.saturating_sub(start);
        let deadline = Instant::now() + Duration::from_secs(5);
        while count_packets(&self.path) < expected && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Packets received plus sent on `interface`, as the kernel counts them. Loopback counts each
/// packet twice (sent, then received) and a capture sees it once: sent only.
fn link_packets(netns: Option<&str>, interface: &str) -> Option<u64> {
    let stats = format!("/sys/class/net/{interface}/statistics");
    let mut files = vec![format!("{stats}/tx_packets")];
    if interface != "lo" {
        files.push(format!("{stats}/rx_packets"));
    }
    let text = match netns {
        // sysfs shows the namespace of the process that mounted it, hence `ip netns exec`.
        Some(netns) => {
            let files: Vec<&str> = files.iter().map(String::as_str).collect();
            crate::command::run_in(netns, "cat", &files).ok()?
        }
        None => files
            .iter()
            .map(std::fs::read_to_string)
            .collect::<Result<Vec<_>, _>>()
            .ok()?
            .join(" "),
    };
    text.split_whitespace()
        .map(|n| n.parse::<u64>().ok())
        .sum::<Option<u64>>()
}

/// Complete packet records in a pcap file that may still be growing.
fn count_packets(path: &Path) -> u64 {
    let Ok(file) = std::fs::File::open(path) else {
        return 0;
    };
    let Ok(mut reader) = pcap_file::pcap::PcapReader::new(file) else {
        return 0;
    };
    let mut count = 0;
    while let Some(Ok(_)) = reader.next_packet() {
        count += 1;
    }
    count
}

impl Drop for WireCapture {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What one TCP connection looked like on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowVerdict {
    pub client: SocketAddr,
    pub server: SocketAddr,
    pub bytes_to_server: u64,
    pub bytes_to_client: u64,
    /// Every payload byte in both directions parsed as a sequence of TLS records.
    pub tls: bool,
    /// From the ServerHello (`supported_versions` for TLS 1.3).
    pub tls_version: Option<String>,
    pub cipher_suite: Option<String>,
    /// The plaintext marker appeared in this connection's payload.
    pub marker_seen: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WireReport {
    pub packets: u64,
    /// Connections that carried payload.
    pub flows: Vec<FlowVerdict>,
}

impl WireReport {
    pub fn marker_seen(&self) -> bool {
        self.flows.iter().any(|f| f.marker_seen)
    }

    pub fn all_tls(&self) -> bool {
        !self.flows.is_empty() && self.flows.iter().all(|f| f.tls)
    }

    pub fn tls_connections(&self) -> u32 {
        self.flows.iter().filter(|f| f.tls).count() as u32
    }

    /// The TLS versions the connections negotiated, each once, sorted.
    pub fn tls_versions(&self) -> Vec<String> {
        distinct(self.flows.iter().filter_map(|f| f.tls_version.clone()))
    }

    /// The cipher suites the connections negotiated, each once, sorted.
    pub fn cipher_suites(&self) -> Vec<String> {
        distinct(self.flows.iter().filter_map(|f| f.cipher_suite.clone()))
    }

    /// The report as results keep it: recorded at `link` into `pcap` (relative to the result
    /// directory, empty where nothing was written), judged for `marker`.
    pub fn observation(&self, link: String, pcap: String, marker: &str) -> WireObservation {
        WireObservation {
            link,
            pcap,
            packets: self.packets,
            connections: self.flows.len() as u32,
            tls_connections: self.tls_connections(),
            marker: marker.to_owned(),
            marker_seen: self.marker_seen(),
            tls_versions: self.tls_versions(),
            cipher_suites: self.cipher_suites(),
        }
    }

    /// The same report without connections to or from `port` (e.g. the control plane's).
    pub fn without_port(&self, port: u16) -> WireReport {
        WireReport {
            packets: self.packets,
            flows: self
                .flows
                .iter()
                .filter(|f| f.client.port() != port && f.server.port() != port)
                .cloned()
                .collect(),
        }
    }
}

fn distinct(values: impl Iterator<Item = String>) -> Vec<String> {
    let mut values: Vec<String> = values.collect();
    values.sort();
    values.dedup();
    values
}

#[derive(Default)]
struct Direction {
    /// (sequence number, payload); reassembled in sequence order.
    segments: Vec<(u32, Vec<u8>)>,
}

impl Direction {
    fn stream(&self) -> Vec<u8> {
        let mut segments = self.segments.clone();
        let Some(base) = segments.first().map(|s| s.0) else {
            return Vec::new();
        };
        segments.sort_by_key(|(seq, _)| seq.wrapping_sub(base));
        segments.dedup_by_key(|(seq, _)| *seq);
        segments.into_iter().flat_map(|(_, p)| p).collect()
    }
}

#[derive(Default)]
struct Flow {
    /// The endpoint that sent the SYN, if the capture saw it.
    client: Option<SocketAddr>,
    directions: BTreeMap<(SocketAddr, SocketAddr), Direction>,
}

/// A TCP segment's source, destination and header with payload.
fn tcp_segment<'a>(
    sliced: &'a SlicedPacket<'a>,
) -> Option<(SocketAddr, SocketAddr, &'a etherparse::TcpSlice<'a>)> {
    let (src_ip, dst_ip): (IpAddr, IpAddr) = match &sliced.net {
        Some(NetSlice::Ipv4(v4)) => (
            v4.header().source_addr().into(),
            v4.header().destination_addr().into(),
        ),
        Some(NetSlice::Ipv6(v6)) => (
            v6.header().source_addr().into(),
            v6.header().destination_addr().into(),
        ),
        _ => return None,
    };
    let Some(TransportSlice::Tcp(tcp)) = &sliced.transport else {
        return None;
    };
    Some((
        SocketAddr::new(src_ip, tcp.source_port()),
        SocketAddr::new(dst_ip, tcp.destination_port()),
        tcp,
    ))
}

fn open_pcap(path: &Path) -> Result<pcap_file::pcap::PcapReader<std::fs::File>, Error> {
    let file = std::fs::File::open(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    pcap_file::pcap::PcapReader::new(file).map_err(|e| Error::Pcap {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

/// When each segment carrying data towards `server_port` was captured, in capture order:
/// for request-response traffic with one segment per request (small requests, no Nagle),
/// the send times of the requests as the kernel saw them, independent of what any client
/// reports about itself.
pub fn send_times_to_port(path: &Path, server_port: u16) -> Result<Vec<Duration>, Error> {
    let mut reader = open_pcap(path)?;
    let mut times = Vec::new();
    while let Some(packet) = reader.next_packet() {
        let packet = packet.map_err(|e| Error::Pcap {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        let Ok(sliced) = SlicedPacket::from_ethernet(&packet.data) else {
            continue;
        };
        if let Some((_, dst, tcp)) = tcp_segment(&sliced) {
            if dst.port() == server_port && !tcp.payload().is_empty() {
                times.push(packet.timestamp);
            }
        }
    }
    Ok(times)
}

pub fn analyze_pcap(path: &Path, marker: &[u8]) -> Result<WireReport, Error> {
    let pcap_err = |message: String| Error::Pcap {
        path: path.to_path_buf(),
        message,
    };
    let mut reader = open_pcap(path)?;
    let mut flows: BTreeMap<(SocketAddr, SocketAddr), Flow> = BTreeMap::new();
    let mut packets = 0;
    while let Some(packet) = reader.next_packet() {
        let packet = packet.map_err(|e| pcap_err(e.to_string()))?;
        packets += 1;
        let Ok(sliced) = SlicedPacket::from_ethernet(&packet.data) else {
            continue;
        };
        let Some((src, dst, tcp)) = tcp_segment(&sliced) else {
            continue;
        };
        let key = if src < dst { (src, dst) } else { (dst, src) };
        let flow = flows.entry(key).or_default();
        if tcp.syn() && !tcp.ack() {
            flow.client = Some(src);
        }
        let payload = tcp.payload();
        if !payload.is_empty() {
            flow.directions
                .entry((src, dst))
                .or_default()
                .segments
                .push((tcp.sequence_number(), payload.to_vec()));
        }
    }
    let mut verdicts = Vec::new();
    for ((a, b), flow) in flows {
        if flow.directions.is_empty() {
            continue;
        }
        let client = flow.client.unwrap_or(a);
        let server = if client == a { b } else { a };
        let to_server = flow
            .directions
            .get(&(client, server))
            .map(Direction::stream)
            .unwrap_or_default();
        let to_client = flow
            .directions
            .get(&(server, client))
            .map(Direction::stream)
            .unwrap_or_default();
        verdicts.push(judge_flow(client, server, &to_server, &to_client, marker));
    }
    Ok(WireReport {
        packets,
        flows: verdicts,
    })
}

/// One connection's verdict from the bytes each side sent, however they were recorded.
pub(crate) fn judge_flow(
    client: SocketAddr,
    server: SocketAddr,
    to_server: &[u8],
    to_client: &[u8],
    marker: &[u8],
) -> FlowVerdict {
    let hello = server_hello(to_client);
    let contains = |s: &[u8]| !marker.is_empty() && s.windows(marker.len()).any(|w| w == marker);
    FlowVerdict {
        client,
        server,
        bytes_to_server: to_server.len() as u64,
        bytes_to_client: to_client.len() as u64,
        tls: is_tls_stream(to_server) && is_tls_stream(to_client),
        tls_version: hello.map(|h| version_name(h.version)),
        cipher_suite: hello.map(|h| suite_name(h.cipher_suite)),
        marker_seen: contains(to_server) || contains(to_client),
    }
}

/// Whether `bytes` is a sequence of TLS records (the last one may be cut by the capture's
/// end). An empty direction counts as TLS: nothing was revealed.
fn is_tls_stream(bytes: &[u8]) -> bool {
    let mut rest = bytes;
    while !rest.is_empty() {
        if rest.len() < 5 {
            return true;
        }
        let content_type = rest[0];
        let major = rest[1];
        let length = u16::from_be_bytes([rest[3], rest[4]]) as usize;
        // change_cipher_spec, alert, handshake, application_data; version 3.x; the largest
        // record TLS allows.
        if !(20..=23).contains(&content_type) || major != 3 || length > (1 << 14) + 2048 {
            return false;
        }
        rest = &rest[(5 + length).min(rest.len())..];
    }
    true
}

#[derive(Debug, Clone, Copy)]
struct ServerHello {
    version: u16,
    cipher_suite: u16,
}

/// Reads the ServerHello at the start of the server's stream.
fn server_hello(stream: &[u8]) -> Option<ServerHello> {
    // Record header (5), handshake header (4).
    if stream.len() < 9 || stream[0] != 22 || stream[5] != 2 {
        return None;
    }
    let record_len = u16::from_be_bytes([stream[3], stream[4]]) as usize;
    let body = stream.get(9..(5 + record_len).min(stream.len()))?;
    let legacy_version = u16::from_be_bytes([body[0], body[1]]);
    let mut at = 2 + 32;
    let session_id_len = *body.get(at)? as usize;
    at += 1 + session_id_len;
    let cipher_suite = u16::from_be_bytes([*body.get(at)?, *body.get(at + 1)?]);
    at += 3;
    let mut version = legacy_version;
    if let Some(ext_len) = body
        .get(at..at + 2)
        .map(|b| u16::from_be_bytes([b[0], b[1]]) as usize)
    {
        let mut ext = body.get(at + 2..(at + 2 + ext_len).min(body.len()))?;
        while ext.len() >= 4 {
            let kind = u16::from_be_bytes([ext[0], ext[1]]);
            let len = u16::from_be_bytes([ext[2], ext[3]]) as usize;
            // supported_versions: the version the server selected.
            if kind == 43 && len == 2 && ext.len() >= 6 {
                version = u16::from_be_bytes([ext[4], ext[5]]);
            }
            ext = &ext[(4 + len).min(ext.len())..];
        }
    }
    Some(ServerHello {
        version,
        cipher_suite,
    })
}

fn version_name(v: u16) -> String {
    match v {
        0x0304 => "TLSv1.3".into(),
        0x0303 => "TLSv1.2".into(),
        0x0302 => "TLSv1.1".into(),
        0x0301 => "TLSv1.0".into(),
        other => format!("0x{other:04x}"),
    }
}

fn suite_name(s: u16) -> String {
    match s {
        0x1301 => "TLS_AES_128_GCM_SHA256".into(),
        0x1302 => "TLS_AES_256_GCM_SHA384".into(),
        0x1303 => "TLS_CHACHA20_POLY1305_SHA256".into(),
        other => format!("0x{other:04x}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_records_are_told_from_http() {
        let record = |t: u8, len: usize| {
            let mut r = vec![t, 3, 3, (len >> 8) as u8, len as u8];
            r.extend(std::iter::repeat_n(0xAB, len));
            r
        };
        let mut stream = record(22, 100);
        stream.extend(record(23, 300));
        stream.extend(&record(23, 50)[..20]);
        assert!(is_tls_stream(&stream));
        assert!(!is_tls_stream(b"GET / HTTP/1.1\r\nHost: echo\r\n\r\n"));
    }
}
