//! TLS 1.3 cipher suites and key exchange are what was asked for, on a real handshake.

use std::sync::Arc;

use meshbench_fixtures::TestPki;
use meshbench_identity::{
    client_config_with, server_config_with, CipherSuite, ClientTlsFiles, KeyExchange,
    ServerTlsFiles, TlsOptions,
};
use rustls::{CipherSuite as Suite, NamedGroup, ProtocolVersion};
use rustls_pki_types::ServerName;
use tokio::net::{TcpListener, TcpStream};

struct Files {
    _pki: TestPki,
    server: ServerTlsFiles,
    client: ClientTlsFiles,
}

fn files() -> Files {
    let pki = TestPki::new("default", &["server", "client"]);
    Files {
        server: pki.server_files("server"),
        client: pki.client_files(Some("client")),
        _pki: pki,
    }
}

/// Handshakes over loopback; returns what the client negotiated.
async fn handshake(
    f: &Files,
    server: &TlsOptions,
    client: &TlsOptions,
) -> std::io::Result<(Suite, NamedGroup, ProtocolVersion)> {
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(
        server_config_with(&f.server, &[], server).unwrap(),
    ));
    let connector = tokio_rustls::TlsConnector::from(Arc::new(
        client_config_with(&f.client, &[], client).unwrap(),
    ));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server_side = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let _ = acceptor.accept(tcp).await;
    });
    let tcp = TcpStream::connect(addr).await?;
    let tls = connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await?;
    let conn = tls.get_ref().1;
    let negotiated = (
        conn.negotiated_cipher_suite().unwrap().suite(),
        conn.negotiated_key_exchange_group().unwrap().name(),
        conn.protocol_version().unwrap(),
    );
    drop(tls);
    server_side.await.unwrap();
    Ok(negotiated)
}

#[tokio::test]
async fn the_requested_suite_and_group_are_negotiated_over_tls13() {
    let f = files();
    let defaults = TlsOptions::default();
    let (suite, group, version) = handshake(&f, &defaults, &defaults).await.unwrap();
    assert_eq!(version, ProtocolVersion::TLSv1_3);
    assert_eq!(suite, Suite::TLS13_AES_256_GCM_SHA384);
    assert_eq!(group, NamedGroup::X25519);

    let chacha_pq = TlsOptions {
        cipher_suites: vec![CipherSuite::Chacha20Poly1305],
        key_exchange: vec![KeyExchange::X25519Mlkem768],
    };
    let both = TlsOptions {
        key_exchange: vec![KeyExchange::X25519Mlkem768, KeyExchange::X25519],
        ..TlsOptions::default()
    };
    let (suite, group, _) = handshake(&f, &both, &chacha_pq).await.unwrap();
    assert_eq!(suite, Suite::TLS13_CHACHA20_POLY1305_SHA256);
    assert_eq!(group, NamedGroup::X25519MLKEM768);
}

#[tokio::test]
async fn endpoints_without_a_common_suite_do_not_connect() {
    let f = files();
    let aes128 = TlsOptions {
        cipher_suites: vec![CipherSuite::Aes128Gcm],
        ..TlsOptions::default()
    };
    let chacha = TlsOptions {
        cipher_suites: vec![CipherSuite::Chacha20Poly1305],
        ..TlsOptions::default()
    };
    assert!(handshake(&f, &chacha, &aes128).await.is_err());
}

#[test]
fn names_parse_as_users_write_them() {
    assert_eq!(
        "AES-128-GCM".parse::<CipherSuite>().unwrap(),
        CipherSuite::Aes128Gcm
    );
    assert_eq!(
        "TLS13_CHACHA20_POLY1305_SHA256"
            .parse::<CipherSuite>()
            .unwrap(),
        CipherSuite::Chacha20Poly1305
    );
    assert_eq!(
        "X25519MLKEM768".parse::<KeyExchange>().unwrap(),
        KeyExchange::X25519Mlkem768
    );
    let err = "rc4".parse::<CipherSuite>().unwrap_err().to_string();
    assert!(err.contains("rc4"), "{err}");
}
