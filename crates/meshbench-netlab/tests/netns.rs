//! The netns backend end to end: two nodes, a pod on each, a service in front of one. A
//! socket opened inside a pod's namespace (by a thread that entered it) stands in for each
//! app, so the test needs no binaries beyond `ip`, `iptables` and `tcpdump`.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::time::Duration;

use meshbench_netlab::{clean_all, new_lab_id, Backend, LabNetwork, SidecarCapture, WireCapture};
use meshbench_topology::Topology;

fn topology() -> Topology {
    Topology::client_server("default", ("client", "server"), "node-2", "echo", 8080)
}

/// Runs `f` on a thread that has entered network namespace `netns`; sockets it opens stay
/// in that namespace wherever they are used later.
fn in_netns<T: Send + 'static>(netns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/run/netns/{netns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).unwrap();
        rustix::thread::move_into_link_name_space(
            file.as_fd(),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .unwrap();
        f()
    })
    .join()
    .unwrap()
}

fn netns_names() -> String {
    String::from_utf8(
        std::process::Command::new("ip")
            .args(["netns", "list"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
}

#[test]
fn a_service_on_another_node_is_reached_through_the_link_and_teardown_removes_everything() {
    if !meshbench_testkit::require_netns() || meshbench_testkit::require_tool("tcpdump").is_none() {
        return;
    }
    let id = new_lab_id();
    let mut lab = LabNetwork::create(Backend::Netns, &id, &topology()).unwrap();
    let LabNetwork::Netns(netns) = &lab else {
        unreachable!()
    };
    let (server_ns, client_ns) = (netns.pod_netns("server-1"), netns.pod_netns("client-1"));
    let listener = in_netns(&server_ns, || TcpListener::bind("0.0.0.0:8080").unwrap());
    let (uplink_ns, uplink) = lab.uplink_of("node-1").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("uplink.pcap");
    let capture = WireCapture::start(&uplink_ns, uplink, &pcap).unwrap();

    let service = lab.service_addr("echo").unwrap();
    let server = std::thread::spawn(move || {
        let (mut conn, peer) = listener.accept().unwrap();
        let mut buf = [0u8; 64];
        let n = conn.read(&mut buf).unwrap();
        conn.write_all(&buf[..n]).unwrap();
        peer
    });
    let mut client = in_netns(&client_ns, move || {
        TcpStream::connect_timeout(&service, Duration::from_secs(5)).unwrap()
    });
    client.write_all(b"marker-4711 plaintext").unwrap();
    let mut echoed = [0u8; 21];
    client.read_exact(&mut echoed).unwrap();
    assert_eq!(&echoed, b"marker-4711 plaintext");
    // No SNAT anywhere: the server sees the client pod's own address.
    let peer = server.join().unwrap();
    assert_eq!(peer.ip(), lab.pod_ip("client-1").unwrap());
    drop(client);

    let report = capture.finish(b"marker-4711").unwrap();
    // Plain TCP between pods crosses the link in the clear, and the analysis says so.
    assert!(report.marker_seen(), "{report:?}");
    assert!(!report.all_tls(), "{report:?}");

    // Service names resolve inside pods.
    let hosts = std::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            &client_ns,
            "getent",
            "hosts",
            "echo.default.svc",
        ])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&hosts.stdout).starts_with("10.96.0.10"));

    lab.teardown().unwrap();
    assert!(!netns_names().contains(&id), "{}", netns_names());
    assert!(!std::path::Path::new(&format!("/etc/netns/mb-{id}-client-1")).exists());
}

#[test]
fn sidecar_capture_redirects_the_apps_outbound_connections() {
    if !meshbench_testkit::require_netns() {
        return;
    }
    let id = new_lab_id();
    let lab = LabNetwork::create(Backend::Netns, &id, &topology()).unwrap();
    let LabNetwork::Netns(netns) = &lab else {
        unreachable!()
    };
    let client_ns = netns.pod_netns("client-1");
    lab.capture_sidecar(
        "client-1",
        &SidecarCapture {
            outbound_port: 15001,
            inbound_port: 15006,
            outbound_only: None,
            inbound_only: None,
            inbound_ports_excluded: vec![],
        },
    )
    .unwrap();
    // The "sidecar" listens on 15001; the app dials the service and lands there instead.
    let sidecar = in_netns(&client_ns, || TcpListener::bind("127.0.0.1:15001").unwrap());
    let service = lab.service_addr("echo").unwrap();
    let _app = in_netns(&client_ns, move || {
        TcpStream::connect_timeout(&service, Duration::from_secs(5)).unwrap()
    });
    let (captured, _) = sidecar.accept().unwrap();
    assert_eq!(
        socket2::SockRef::from(&captured)
            .original_dst_v4()
            .unwrap()
            .as_socket()
            .unwrap(),
        service
    );
    drop(lab);
    let report = clean_all(Some(&id)).unwrap();
    assert!(
        report.namespaces.is_empty(),
        "drop tore the lab down: {report:?}"
    );
}
