//! Identity checks against an enrolled destination's proxy: the verifier handshakes with the
//! calculator's guard itself (its sidecar, or its node's agent over HBONE) (from a node, where no mesh captures its traffic) with a
//! valid SVID, none, one from another trust domain, an expired one, and a valid SVID of the
//! wrong workload carrying forged identity headers. Each must be refused except the first;
//! the handshake also reads the SPIFFE ID the proxy presents, which TLS 1.3 hides from a
//! wire capture.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use meshbench_identity::{
    client_config, CertificateAuthority, ClientTlsFiles, IssueOptions, SpiffeId,
};
use meshbench_loadgen::Outcome;
use meshbench_meshes::{spiffe_id, Enrollment, Mesh, MeshPki, Ports};
use meshbench_netlab::{run_in_netns, LabNetwork, NetPlace};
use meshbench_results::{IdentityCheck, Verdict};
use rustls_pki_types::ServerName;

use crate::e3::{APP, CALCULATOR, CHECKER, EXPERIMENTER};
use crate::Error;

struct Attempt {
    name: &'static str,
    description: &'static str,
    files: ClientTlsFiles,
    headers: Vec<(&'static str, String)>,
    expect_allowed: bool,
}

/// Runs the identity checks against the calculator's proxy. `dir` holds the certificates
/// made for the checks.
pub fn identity_checks(
    net: &LabNetwork,
    guard: Guard,
    pki: &MeshPki,
    dir: &Path,
) -> Result<Vec<IdentityCheck>, Error> {
    std::fs::create_dir_all(dir).map_err(|source| Error::Io {
        path: dir.to_owned(),
        source,
    })?;
    let calculator_id = SpiffeId::parse(&spiffe_id(APP, CALCULATOR))?;
    let files = |cert: Option<(std::path::PathBuf, std::path::PathBuf)>| ClientTlsFiles {
        cert: cert.as_ref().map(|c| c.0.clone()),
        key: cert.map(|c| c.1),
        ca: pki.ca.clone(),
        expect_server_id: Some(calculator_id.clone()),
    };
    let lab_ca = CertificateAuthority::load(&pki.dir)?;
    // Fresh SVIDs from the lab CA: the ones issued at start-up may be short-lived.
    let svid = |sa: &str| -> Result<_, Error> {
        let issued = lab_ca.issue(APP, sa, &IssueOptions::default())?;
        Ok(Some(issued.write(dir, &format!("fresh-{sa}"))?))
    };

    let foreign_ca = CertificateAuthority::init(&dir.join("other-trust-domain"), "evil.example")?;
    let foreign = foreign_ca
        .issue(APP, EXPERIMENTER, &IssueOptions::default())?
        .write(&dir.join("other-trust-domain"), "experimenter")?;

    let short = lab_ca.issue(
        APP,
        EXPERIMENTER,
        &IssueOptions {
            ttl: Some(Duration::from_secs(1)),
            ..IssueOptions::default()
        },
    )?;
    let expired_after = short.not_after;
    let expired = short.write(dir, "expired-experimenter")?;

    let forged_id = spiffe_id(APP, EXPERIMENTER);
    let attempts = vec![
        Attempt {
            name: "valid-identity",
            description: "the experimenter's SVID: the one caller the policy allows",
            files: files(svid(EXPERIMENTER)?),
            headers: vec![],
            expect_allowed: true,
        },
        Attempt {
            name: "no-client-certificate",
            description: "TLS without a client certificate",
            files: files(None),
            headers: vec![],
            expect_allowed: false,
        },
        Attempt {
            name: "other-trust-domain",
            description: "app/experimenter's name, issued by another trust domain's CA",
            files: files(Some(foreign)),
            headers: vec![],
            expect_allowed: false,
        },
        Attempt {
            name: "expired-certificate",
            description: "the experimenter's SVID from the lab CA, expired",
            files: files(Some(expired)),
            headers: vec![],
            expect_allowed: false,
        },
        Attempt {
            name: "forged-identity-header",
            description: "the security checker's valid SVID, claiming the experimenter's \
                          identity in x-forwarded-client-cert and x-meshbench-identity",
            files: files(svid(CHECKER)?),
            headers: vec![
                (
                    "x-forwarded-client-cert",
                    format!("By={};URI={forged_id}", spiffe_id(APP, CALCULATOR)),
                ),
                ("x-meshbench-identity", forged_id.clone()),
            ],
            expect_allowed: false,
        },
    ];

    // The short-lived SVID must have expired before it is tried. X.509 stores whole seconds
    // and a certificate is valid through its notAfter second, so wait past the next one.
    let expired_at = expired_after + Duration::from_secs(1);
    let deadline = Instant::now() + Duration::from_secs(10);
    while time::OffsetDateTime::now_utc() <= expired_at && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }

    let mut checks = vec![];
    for attempt in attempts {
        let Exchange {
            outcome, server_id, ..
        } = exchange_from_node(net, guard, &attempt.files, attempt.headers.clone())?;
        let allowed = outcome.starts_with("http_2");
        checks.push(IdentityCheck {
            name: attempt.name.into(),
            description: attempt.description.into(),
            expected: if attempt.expect_allowed {
                "allowed"
            } else {
                "refused"
            }
            .into(),
            observed: outcome,
            server_id,
            verdict: if allowed == attempt.expect_allowed {
                Verdict::Pass
            } else {
                Verdict::Fail
            },
        });
    }
    Ok(checks)
}

/// Rotation under load: with SVIDs living a few seconds, the experimenter sends a stream of
/// requests through its sidecar to the calculator's while both renew their certificates;
/// none may fail, and the calculator's proxy must present a renewed certificate afterwards.
pub fn rotation_under_load(
    net: &LabNetwork,
    guard: Guard,
    pki: &MeshPki,
    dir: &Path,
) -> Result<IdentityCheck, Error> {
    let lab_ca = CertificateAuthority::load(&pki.dir)?;
    let caller = lab_ca
        .issue(APP, EXPERIMENTER, &IssueOptions::default())?
        .write(dir, "rotation-experimenter")?;
    let files = ClientTlsFiles {
        cert: Some(caller.0),
        key: Some(caller.1),
        ca: pki.ca.clone(),
        expect_server_id: Some(SpiffeId::parse(&spiffe_id(APP, CALCULATOR))?),
    };
    let before = exchange_from_node(net, guard, &files, vec![])?;
    let interactions = 300;
    let result = crate::probe::ask_app(
        net,
        EXPERIMENTER,
        "/api/experimenter/experiment",
        serde_json::json!({
            "interactions": interactions,
            "batchSize": 10,
            "intervalBetweenBatchesInMilliseconds": 100,
        }),
    )?;
    let after = exchange_from_node(net, guard, &files, vec![])?;
    let succeeded = result["rttsInMilliseconds"]
        .as_array()
        .map_or(0, |rtts| rtts.len());
    let failures = &result["failuresByClass"];
    let renewed = before.server_cert.is_some()
        && after.server_cert.is_some()
        && before.server_cert != after.server_cert;
    let ttl = pki
        .svid_ttl
        .map_or_else(|| "the default".to_owned(), |t| format!("{t:?}"));
    Ok(IdentityCheck {
        name: "rotation-under-load".into(),
        description: format!(
            "{interactions} requests over about 3 s while SVIDs living {ttl} rotate"
        ),
        expected: "no failed request; certificate renewed".into(),
        observed: format!(
            "{succeeded} of {interactions} succeeded (failures: {failures}); calculator's \
             certificate {}",
            if renewed { "renewed" } else { "not renewed" }
        ),
        server_id: after.server_id,
        verdict: if succeeded == interactions && renewed {
            Verdict::Pass
        } else {
            Verdict::Fail
        },
    })
}

/// What one exchange with the calculator's proxy showed.
struct Exchange {
    outcome: String,
    server_id: Option<String>,
    /// The leaf certificate the proxy presented (DER).
    server_cert: Option<Vec<u8>>,
}

/// How the verifier reaches the proxy that guards the calculator.
#[derive(Debug, Clone, Copy)]
pub enum Guard {
    /// A sidecar: it intercepts connections to the calculator's pod and speaks mTLS there.
    Sidecar { pod: SocketAddr },
    /// A node agent: mTLS to the agent of the calculator's node (the calculator's SVID asked
    /// for by SNI), then an HTTP/2 CONNECT tunnel to the calculator's app (HBONE).
    NodeAgent { agent: SocketAddr, app: SocketAddr },
}

impl Guard {
    /// The calculator's guard in `net` for `mesh`.
    pub fn of(mesh: Mesh, net: &LabNetwork) -> Result<Guard, Error> {
        let calculator_pod = net
            .topology()
            .first_pod(CALCULATOR)
            .ok_or_else(|| Error::Probe("no calculator pod".into()))?;
        let app = SocketAddr::new(net.pod_ip(&calculator_pod.name)?, Ports::APP);
        Ok(match mesh.enrollment() {
            Enrollment::AgentPerNode => Guard::NodeAgent {
                agent: SocketAddr::new(net.node_ip(&calculator_pod.workload.node)?, Ports::HBONE),
                app,
            },
            _ => Guard::Sidecar { pod: app },
        })
    }
}

/// One exchange with the calculator's guard from the first node, where no mesh captures the
/// verifier's own traffic.
fn exchange_from_node(
    net: &LabNetwork,
    guard: Guard,
    files: &ClientTlsFiles,
    headers: Vec<(&'static str, String)>,
) -> Result<Exchange, Error> {
    let node = net.topology().nodes[0].clone();
    let netns = net.netns_of(NetPlace::Node(&node))?;
    let alpn: &[&[u8]] = match guard {
        Guard::Sidecar { .. } => &[b"http/1.1"],
        Guard::NodeAgent { .. } => &[b"h2"],
    };
    let config = Arc::new(client_config(files, alpn)?);
    Ok(run_in_netns(&netns, move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a current-thread runtime builds")
            .block_on(exchange(guard, config, headers))
    })?)
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// One mTLS exchange (`POST /add`) with the calculator's guard: the outcome class, and the
/// SPIFFE ID and certificate the guard presented, if the exchange completed.
async fn exchange(
    guard: Guard,
    config: Arc<rustls::ClientConfig>,
    headers: Vec<(&'static str, String)>,
) -> Exchange {
    let attempt = async {
        let (connect_to, name) = match guard {
            Guard::Sidecar { pod } => (
                pod,
                ServerName::try_from(format!("{CALCULATOR}.{APP}.svc"))?,
            ),
            Guard::NodeAgent { agent, .. } => (
                agent,
                meshbench_dataplane::hbone_server_name(&SpiffeId::parse(&spiffe_id(
                    APP, CALCULATOR,
                ))?)?,
            ),
        };
        let tcp = tokio::net::TcpStream::connect(connect_to).await?;
        let tls = tokio_rustls::TlsConnector::from(config)
            .connect(name, tcp)
            .await?;
        let leaf = tls
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|chain| chain.first())
            .map(|leaf| leaf.to_vec());
        let status = match guard {
            Guard::Sidecar { .. } => post_add(TokioIo::new(tls), &headers).await?,
            Guard::NodeAgent { app, .. } => {
                let (mut sender, conn) =
                    hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
                        .await?;
                tokio::spawn(conn);
                let connect = http::Request::connect(app.to_string()).body(Empty::<Bytes>::new())?;
                let response = sender.send_request(connect).await?;
                if response.status() != http::StatusCode::OK {
                    // The agent refused the tunnel: an L4 denial, reported as its status.
                    return Ok((response.status().as_u16(), leaf));
                }
                post_add(hyper::upgrade::on(response).await?, &headers).await?
            }
        };
        Ok::<_, BoxError>((status, leaf))
    };
    let failed = |outcome: Outcome| Exchange {
        outcome: outcome.to_string(),
        server_id: None,
        server_cert: None,
    };
    match tokio::time::timeout(Duration::from_secs(5), attempt).await {
        Ok(Ok((status, leaf))) => Exchange {
            outcome: Outcome::Http(status).to_string(),
            server_id: leaf.as_ref().and_then(|der| {
                meshbench_identity::spiffe_ids_of(&der.clone().into())
                    .into_iter()
                    .next()
                    .map(|id| id.to_string())
            }),
            server_cert: leaf,
        },
        Ok(Err(e)) => failed(Outcome::classify(e.as_ref())),
        Err(_) => failed(Outcome::Timeout),
    }
}

/// `POST /add` to the calculator over an established stream; its status.
async fn post_add<IO>(io: IO, headers: &[(&'static str, String)]) -> Result<u16, BoxError>
where
    IO: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await?;
    tokio::spawn(conn);
    let mut request = http::Request::post("/add")
        .header("host", format!("{CALCULATOR}.{APP}.svc"))
        .header("content-type", "application/json");
    for (name, value) in headers {
        request = request.header(*name, value.as_str());
    }
    let request = request.body(Full::new(Bytes::from_static(
        br#"{"firstNumber": 1, "secondNumber": 2}"#,
    )))?;
    let response = sender.send_request(request).await?;
    let status = response.status().as_u16();
    response.into_body().collect().await?;
    Ok(status)
}
