//! The echo workload over real sockets: HTTP/1.1 and h2c, the configured response, and mTLS
//! that admits only clients with a certificate from the configured CA.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use meshbench_identity::{
    client_config, CertificateAuthority, ClientTlsFiles, IssueOptions, ServerTlsFiles, SpiffeId,
};
use meshbench_workload::{Echo, EchoConfig, RoleService};
use rustls_pki_types::ServerName;
use tokio::net::TcpStream;

mod common;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Starts an echo server on 127.0.0.1:0; it stops when the returned sender is dropped.
async fn start_echo(tls: Option<ServerTlsFiles>, delay: Duration) -> common::Running {
    let echo = RoleService::new(Echo::new(&EchoConfig::fixed(delay, 1024)));
    common::start_service(echo, tls, None).await
}

async fn http1_get(
    io: impl tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
) -> Result<(u16, usize), BoxError> {
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
    tokio::spawn(conn);
    let req = http::Request::get("/")
        .header("host", "localhost")
        .body(Empty::<Bytes>::new())?;
    let resp = sender.send_request(req).await?;
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await?.to_bytes();
    Ok((status, body.len()))
}

async fn tls_get(addr: SocketAddr, files: &ClientTlsFiles) -> Result<(u16, usize), BoxError> {
    let config = client_config(files, &[b"http/1.1"])?;
    let tcp = TcpStream::connect(addr).await?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost")?, tcp)
        .await?;
    http1_get(tls).await
}

struct Pki {
    _dir: tempfile::TempDir,
    server: ServerTlsFiles,
    client: ClientTlsFiles,
    foreign_client: ClientTlsFiles,
}

fn pki() -> Pki {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ca = CertificateAuthority::init(&d.join("ca"), "cluster.local").unwrap();
    let issue = |ca: &CertificateAuthority, sa: &str, out: &Path| {
        ca.issue(
            "default",
            sa,
            &IssueOptions {
                dns_names: vec!["localhost".into()],
                ip_addresses: vec![[127, 0, 0, 1].into()],
                ..IssueOptions::default()
            },
        )
        .unwrap()
        .write(out, sa)
        .unwrap()
    };
    let (server_cert, server_key) = issue(&ca, "server", d);
    let (client_cert, client_key) = issue(&ca, "client", d);
    // Same trust domain name, same service account, but another CA: must be refused.
    let other = CertificateAuthority::init(&d.join("other-ca"), "cluster.local").unwrap();
    let (foreign_cert, foreign_key) = issue(&other, "client", &d.join("other-ca"));
    let ca_pem = d.join("ca/ca.pem");
    Pki {
        server: ServerTlsFiles {
            cert: server_cert,
            key: server_key,
            client_ca: Some(ca_pem.clone()),
        },
        client: ClientTlsFiles {
            cert: Some(client_cert),
            key: Some(client_key),
            ca: ca_pem.clone(),
            expect_server_id: Some(
                SpiffeId::parse("spiffe://cluster.local/ns/default/sa/server").unwrap(),
            ),
        },
        foreign_client: ClientTlsFiles {
            cert: Some(foreign_cert),
            key: Some(foreign_key),
            ca: ca_pem,
            expect_server_id: None,
        },
        _dir: dir,
    }
}

#[tokio::test]
async fn serves_http1_and_h2c_with_the_configured_response_size() {
    let server = start_echo(None, Duration::ZERO).await;
    let addr = server.addr;
    let (status, len) = http1_get(TcpStream::connect(addr).await.unwrap())
        .await
        .unwrap();
    assert_eq!((status, len), (200, 1024));

    let io = TokioIo::new(TcpStream::connect(addr).await.unwrap());
    let (mut sender, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = http::Request::get("http://localhost/")
        .body(Empty::<Bytes>::new())
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    assert_eq!(resp.version(), http::Version::HTTP_2);
    assert_eq!(
        resp.into_body().collect().await.unwrap().to_bytes().len(),
        1024
    );
}

#[tokio::test]
async fn the_delay_is_kept_to_well_under_a_millisecond() {
    // Delay precision matters: E1's latency is mostly the server's sleep.
    let server = start_echo(None, Duration::from_millis(5)).await;
    let addr = server.addr;
    let mut tcp = Some(TcpStream::connect(addr).await.unwrap());
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(TokioIo::new(tcp.take().unwrap()))
            .await
            .unwrap();
    tokio::spawn(conn);
    let mut fastest = Duration::MAX;
    for _ in 0..20 {
        let start = std::time::Instant::now();
        let req = http::Request::get("/")
            .header("host", "x")
            .body(Empty::<Bytes>::new())
            .unwrap();
        let resp = sender.send_request(req).await.unwrap();
        resp.into_body().collect().await.unwrap();
        fastest = fastest.min(start.elapsed());
    }
    assert!(
        fastest >= Duration::from_millis(5),
        "answered before the delay: {fastest:?}"
    );
    // tokio's timer would round 5 ms up to 6 ms; the precise timer must not.
    assert!(
        fastest < Duration::from_micros(5_900),
        "delay overshoots: {fastest:?}"
    );
}

#[tokio::test]
async fn mtls_admits_a_client_certificate_from_the_configured_ca() {
    let pki = pki();
    let server = start_echo(Some(pki.server.clone()), Duration::ZERO).await;
    let addr = server.addr;
    let (status, len) = tls_get(addr, &pki.client).await.unwrap();
    assert_eq!((status, len), (200, 1024));
}

#[tokio::test]
async fn mtls_rejects_a_client_without_a_certificate() {
    let pki = pki();
    let server = start_echo(Some(pki.server.clone()), Duration::ZERO).await;
    let addr = server.addr;
    let anonymous = ClientTlsFiles {
        cert: None,
        key: None,
        ..pki.client.clone()
    };
    let err = tls_get(addr, &anonymous).await.unwrap_err();
    let outcome = outcome_of(&*err);
    assert!(outcome == "tls_alert_certificate_required", "{outcome}");
}

#[tokio::test]
async fn mtls_rejects_a_client_certificate_from_another_ca() {
    let pki = pki();
    let server = start_echo(Some(pki.server.clone()), Duration::ZERO).await;
    let addr = server.addr;
    let err = tls_get(addr, &pki.foreign_client).await.unwrap_err();
    let outcome = outcome_of(&*err);
    // Both CAs carry the same subject name (same trust domain), so the server finds "its" CA
    // as issuer and the signature check fails: decrypt_error. A CA with another name gives
    // unknown_ca. Either way the handshake is refused with an alert.
    assert!(
        [
            "tls_alert_unknown_ca",
            "tls_alert_bad_certificate",
            "tls_alert_decrypt_error"
        ]
        .contains(&outcome.as_str()),
        "{outcome}"
    );
}

#[tokio::test]
async fn the_client_refuses_a_server_with_another_spiffe_id() {
    let pki = pki();
    let server = start_echo(Some(pki.server.clone()), Duration::ZERO).await;
    let addr = server.addr;
    let wrong = ClientTlsFiles {
        expect_server_id: Some(SpiffeId::parse("spiffe://cluster.local/ns/default/sa/db").unwrap()),
        ..pki.client.clone()
    };
    let err = tls_get(addr, &wrong).await.unwrap_err();
    assert_eq!(
        outcome_of(&*err),
        "tls_invalid_certificate_not_valid_for_name"
    );
}

#[tokio::test]
async fn curl_talks_mtls_to_the_server_with_the_issued_pem_files() {
    let Some(curl) = meshbench_testkit::require_tool("curl") else {
        return;
    };
    let pki = pki();
    let server = start_echo(Some(pki.server.clone()), Duration::ZERO).await;
    let addr = server.addr;
    let url = format!("https://localhost:{}/", addr.port());
    let resolve = format!("localhost:{}:127.0.0.1", addr.port());
    let with_cert = tokio::process::Command::new(&curl)
        .args([
            "-sS",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--resolve",
            &resolve,
            "--cacert",
        ])
        .arg(&pki.client.ca)
        .arg("--cert")
        .arg(pki.client.cert.as_ref().unwrap())
        .arg("--key")
        .arg(pki.client.key.as_ref().unwrap())
        .arg(&url)
        .output()
        .await
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&with_cert.stdout),
        "200",
        "{}",
        String::from_utf8_lossy(&with_cert.stderr)
    );
    let without = tokio::process::Command::new(&curl)
        .args(["-sS", "-o", "/dev/null", "--resolve", &resolve, "--cacert"])
        .arg(&pki.client.ca)
        .arg(&url)
        .output()
        .await
        .unwrap();
    assert!(
        !without.status.success(),
        "curl without a client certificate got through"
    );
}

/// The load generator's outcome key for a failed exchange (`tls_alert_...`).
fn outcome_of(err: &(dyn std::error::Error + 'static)) -> String {
    meshbench_loadgen::Outcome::classify(err).to_string()
}

/// Calls `uri` on the echo over HTTP/1.1 with `headers`; returns status and body length.
async fn get_with(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> (u16, usize) {
    let io = TokioIo::new(TcpStream::connect(addr).await.unwrap());
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
    tokio::spawn(conn);
    let mut req = http::Request::get(path).header("host", "localhost");
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let resp = sender
        .send_request(req.body(Empty::<Bytes>::new()).unwrap())
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, body.len())
}

#[tokio::test]
async fn a_request_overrides_status_size_and_delay_as_fortio_echo_allows() {
    let server = start_echo(None, Duration::ZERO).await;
    let addr = server.addr;
    assert_eq!(get_with(addr, "/?status=418&size=10", &[]).await, (418, 10));
    assert_eq!(
        get_with(
            addr,
            "/",
            &[("x-echo-status", "503"), ("x-echo-size", "2KiB")]
        )
        .await,
        (503, 2048)
    );
    // The query wins over the header.
    assert_eq!(
        get_with(addr, "/?size=5", &[("x-echo-size", "7")]).await,
        (200, 5)
    );
    let started = std::time::Instant::now();
    assert_eq!(get_with(addr, "/?delay=30ms", &[]).await.0, 200);
    assert!(started.elapsed() >= Duration::from_millis(30));
}

#[tokio::test]
async fn a_status_mix_gives_each_status_its_share() {
    let server = start_echo(None, Duration::ZERO).await;
    let addr = server.addr;
    let mut failures = 0;
    for _ in 0..200 {
        let (status, _) = get_with(addr, "/?status=503:25", &[]).await;
        assert!(status == 200 || status == 503, "{status}");
        failures += usize::from(status == 503);
    }
    assert!(
        (45..=55).contains(&failures),
        "{failures} of 200 were 503, want about 50"
    );
}

#[tokio::test]
async fn a_bad_knob_is_a_400_naming_it() {
    let server = start_echo(None, Duration::ZERO).await;
    let addr = server.addr;
    assert_eq!(get_with(addr, "/?delay=soon", &[]).await.0, 400);
    assert_eq!(get_with(addr, "/?status=42", &[]).await.0, 400);
    assert_eq!(get_with(addr, "/healthz", &[]).await.0, 200);
}
