//! SVID rotation through the CA service: the identity stays, the key and certificate change,
//! connections established before the rotation keep working, and the CA only renews callers
//! it can authenticate.

use std::sync::Arc;
use std::time::Duration;

use meshbench_fixtures::TestPki;
use meshbench_identity::{
    bind_ca_server, client_config_with, rotate_forever, server_config_for, spiffe_ids_of, CaClient,
    CertificateAuthority, ClientTlsFiles, IssueOptions, SpiffeId, SvidStore,
};
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::client::TlsStream;
use tokio_rustls::{TlsAcceptor, TlsConnector};

const DEADLINE: Duration = Duration::from_secs(20);

async fn poll_until(what: &str, mut check: impl FnMut() -> bool) {
    let started = std::time::Instant::now();
    while !check() {
        assert!(started.elapsed() < DEADLINE, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn echo_server(acceptor: TlsAcceptor) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut buf = [0u8; 64];
                while let Ok(n @ 1..) = tls.read(&mut buf).await {
                    if tls.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

async fn round_trip(tls: &mut TlsStream<TcpStream>, message: &[u8]) {
    tls.write_all(message).await.unwrap();
    let mut answer = vec![0u8; message.len()];
    tls.read_exact(&mut answer).await.unwrap();
    assert_eq!(answer, message);
}

fn server_leaf(tls: &TlsStream<TcpStream>) -> CertificateDer<'static> {
    tls.get_ref().1.peer_certificates().unwrap()[0].clone()
}

#[tokio::test]
async fn rotation_renews_the_same_identity_without_breaking_established_connections() {
    let dir = tempfile::tempdir().unwrap();
    let ca = CertificateAuthority::init(dir.path(), "cluster.local").unwrap();
    let short = IssueOptions {
        ttl: Some(Duration::from_secs(2)),
        ..IssueOptions::default()
    };
    let (server_cert, server_key) = ca
        .issue("prod", "server", &short)
        .unwrap()
        .write(dir.path(), "server")
        .unwrap();
    let (client_cert, client_key) = ca
        .issue("prod", "client", &IssueOptions::default())
        .unwrap()
        .write(dir.path(), "client")
        .unwrap();
    let ca_pem = dir.path().join("ca.pem");

    let ca_service = bind_ca_server(
        CertificateAuthority::load(dir.path()).unwrap(),
        "127.0.0.1:0".parse().unwrap(),
        Duration::from_secs(2),
    )
    .await
    .unwrap();
    let ca_addr = ca_service.local_addr().unwrap();
    tokio::spawn(ca_service.serve(std::future::pending()));

    let store = Arc::new(SvidStore::from_files(&server_cert, &server_key).unwrap());
    let first_expiry = store.not_after_unix();
    let server_config =
        server_config_for(store.clone(), Some(&ca_pem), &[], &Default::default()).unwrap();
    let server = echo_server(TlsAcceptor::from(Arc::new(server_config))).await;

    let server_id = SpiffeId::for_workload("cluster.local", "prod", "server").unwrap();
    let mut client_config = client_config_with(
        &ClientTlsFiles {
            cert: Some(client_cert),
            key: Some(client_key),
            ca: ca_pem.clone(),
            expect_server_id: Some(server_id.clone()),
        },
        &[],
        &Default::default(),
    )
    .unwrap();
    // A resumed session would skip the certificate; every connection here shows the current one.
    client_config.resumption = rustls::client::Resumption::disabled();
    let connector = TlsConnector::from(Arc::new(client_config));
    let connect = || async {
        let tcp = TcpStream::connect(server).await.unwrap();
        connector
            .connect(ServerName::IpAddress(server.ip().into()), tcp)
            .await
            .unwrap()
    };

    let mut before = connect().await;
    round_trip(&mut before, b"before rotation").await;
    let old_leaf = server_leaf(&before);

    let client = CaClient::new(ca_addr, store.clone(), &ca_pem).unwrap();
    let (rotated_tx, mut rotated_rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(rotate_forever(store.clone(), client, 0.5, move |s| {
        let _ = rotated_tx.send(s.not_after_unix());
    }));
    poll_until("two rotations", || store.rotations() >= 2).await;
    assert!(rotated_rx.recv().await.is_some(), "on_rotate was called");

    // The connection made before the rotations still carries traffic.
    round_trip(&mut before, b"after rotation").await;

    let mut after = connect().await;
    round_trip(&mut after, b"new connection").await;
    let new_leaf = server_leaf(&after);
    assert_ne!(
        new_leaf, old_leaf,
        "new handshakes present the renewed SVID"
    );
    assert_eq!(spiffe_ids_of(&new_leaf), vec![server_id]);
    assert!(store.not_after_unix() >= first_expiry);
}

#[tokio::test]
async fn the_ca_service_refuses_callers_from_another_trust_root() {
    let dir = tempfile::tempdir().unwrap();
    let ca = CertificateAuthority::init(dir.path(), "cluster.local").unwrap();
    let ca_service = bind_ca_server(ca, "127.0.0.1:0".parse().unwrap(), Duration::from_secs(60))
        .await
        .unwrap();
    let ca_addr = ca_service.local_addr().unwrap();
    tokio::spawn(ca_service.serve(std::future::pending()));

    // Same trust domain name, different root: the CA must not renew it.
    let rogue = TestPki::new("prod", &["server"]);
    let (cert, key) = (rogue.cert("server"), rogue.key("server"));
    let store = SvidStore::from_files(&cert, &key).unwrap();
    // The rogue trusts the real CA's bundle, so only the CA's check of the caller can refuse.
    let client = CaClient::new(ca_addr, Arc::new(store), &dir.path().join("ca.pem")).unwrap();
    let stolen = SvidStore::from_files(&cert, &key).unwrap();
    let err = client.renew(&stolen).await.unwrap_err();
    assert!(
        err.to_string().contains("failed"),
        "renewal by an unknown root must fail: {err}"
    );
    assert_eq!(stolen.rotations(), 0);
}

/// A CA that accepts and then says nothing: the renewal gives up at its timeout (the paused
/// clock jumps there once everything waits), so the rotation loop retries instead of hanging
/// until the SVID expires.
#[tokio::test(start_paused = true)]
async fn a_renewal_against_a_silent_ca_fails_at_its_timeout() {
    let pki = TestPki::new("prod", &["server"]);
    let (cert, key) = (pki.cert("server"), pki.key("server"));
    let store = Arc::new(SvidStore::from_files(&cert, &key).unwrap());
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = silent.local_addr().unwrap();
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((stream, _)) = silent.accept().await {
            open.push(stream);
        }
    });
    let client = CaClient::new(addr, store.clone(), &pki.ca()).unwrap();
    let started = tokio::time::Instant::now();
    let error = client.renew(&store).await.unwrap_err();
    assert!(error.to_string().contains("no answer within"), "{error}");
    let waited = started.elapsed();
    let timeout = meshbench_identity::RENEW_TIMEOUT;
    assert!(waited >= timeout && waited < timeout * 2, "{waited:?}");
    assert_eq!(store.rotations(), 0);
    held.abort();
}
