//! Identity checks against an enrolled destination's proxy (its sidecar, or its node's agent
//! over HBONE): the verifier handshakes with the calculator's guard itself, from where no mesh
//! captures its traffic (a node of the local lab, a pod outside the mesh on a cluster), with a
//! valid SVID, none, one from another trust domain, an expired one, and a valid SVID of the
//! wrong workload carrying forged identity headers. Each must be refused except the first;
//! the handshake also reads the SPIFFE ID the proxy presents, which TLS 1.3 hides from a
//! wire capture. Then rotation under load: SVIDs living seconds renew while the experimenter
//! sends a stream of requests to the calculator.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use meshbench_identity::{
    client_config, client_config_by_name, CertificateAuthority, CertificateSummary, ClientTlsFiles,
    IssueOptions, SpiffeId,
};
use meshbench_loadgen::Outcome;
use meshbench_meshes::{spiffe_id, Enrollment, MeshPki, Ports, Scenario};
use meshbench_netlab::{run_in_netns, LabNetwork, NetPlace};
use meshbench_results::{IdentityCheck, Verdict};
use rustls_pki_types::ServerName;

use crate::e3::{APP, CALCULATOR, CHECKER, EXPERIMENTER};
use crate::Error;

/// SVID lifetime in the case where identities are checked: proxies renew at half of it.
pub(crate) const ROTATION_TTL: Duration = Duration::from_secs(4);
/// How long the calculator's guard may take to present an SVID the CA service renewed (on a
/// cluster its first one lives a minute and is renewed at half of that).
const RENEWED_SVID_WAIT: Duration = Duration::from_secs(90);
/// Requests in each round of the CA rotation check.
const ROTATION_ROUND: usize = 300;
/// Rotates a mesh's CA (see `Scenario::rotate_ca`).
pub(crate) type CaRotation<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), meshbench_meshes::Error>> + 'a>>;
/// One exchange, from connect to the answer.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(5);

/// What one exchange with the calculator's guard showed; `meshbench wire exchange` prints it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ExchangeReport {
    /// The outcome class: `http_200`, `http_403`, `tls_handshake`, ...
    pub outcome: String,
    /// The identity the guard presented, if the exchange completed: its SPIFFE ID, or its
    /// DNS name where the mesh names workloads so (Linkerd).
    pub server_id: Option<String>,
    /// The certificate the guard presented, if the exchange completed.
    pub server_cert: Option<CertificateSummary>,
}

pub(crate) type BoxFuture<'a, T> =
    std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// Where the verifier makes its own exchanges with the calculator's guard, and how it has the
/// experimenter's app run an experiment: from a node of the local lab, or from a pod outside
/// the mesh on a cluster.
pub(crate) trait GuardAccess: Sync {
    /// One exchange with the guard, presenting `files`' certificate (if any) and `headers`.
    fn exchange<'a>(
        &'a self,
        files: &'a ClientTlsFiles,
        headers: &'a [(String, String)],
    ) -> BoxFuture<'a, Result<ExchangeReport, Error>>;
    /// Has the experimenter's own app run the experiment `body`; its result.
    fn run_experiment(
        &self,
        body: serde_json::Value,
    ) -> BoxFuture<'_, Result<serde_json::Value, Error>>;
}

struct Attempt {
    name: &'static str,
    description: &'static str,
    files: ClientTlsFiles,
    headers: Vec<(String, String)>,
    expect_allowed: bool,
}

/// The identity checks, their certificates made before any is tried, so that a cluster's
/// checking pod can be given them when it is created.
pub(crate) struct IdentityPlan {
    attempts: Vec<Attempt>,
    /// The experimenter's valid SVID, with which the rotation check reads the guard's (`None`:
    /// the rotation check is not made, and the verifier's notes say why).
    rotation_caller: Option<ClientTlsFiles>,
    /// The expired SVID's notAfter.
    expired_after: time::OffsetDateTime,
    /// How long the mesh's renewed SVIDs live.
    svid_ttl: Option<Duration>,
    /// Files the checks present that are made where the checks run (a checking pod, by the
    /// mesh's own CA), not on this machine.
    #[cfg_attr(not(feature = "kubernetes"), allow(dead_code))] // the cluster's checks only
    made_remotely: Vec<PathBuf>,
}

/// An SVID the checks present: its certificate (with any intermediates) and its key.
#[derive(Debug, Clone)]
pub(crate) struct CertKey {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl From<(PathBuf, PathBuf)> for CertKey {
    fn from((cert, key): (PathBuf, PathBuf)) -> Self {
        CertKey { cert, key }
    }
}

/// The mesh's own certificates for the checks: valid SVIDs of the experimenter (the caller the
/// policy allows) and the security checker (a valid caller it does not), an expired one of
/// the experimenter, and the root the guard's certificate chains to.
pub(crate) struct MeshSvids {
    pub trust_root: PathBuf,
    pub experimenter: CertKey,
    pub checker: CertKey,
    /// `None` where the mesh's CA cannot be asked for a short lifetime (Linkerd's signs for
    /// its configured one): the expired-certificate check is then not made.
    pub expired: Option<CertKey>,
    pub expired_after: time::OffsetDateTime,
    /// The experimenter's, for the rotation check, where it is made.
    pub rotation_caller: Option<CertKey>,
    /// Which of these files are made where the checks run, not here.
    pub made_remotely: Vec<PathBuf>,
}

impl IdentityPlan {
    /// Makes the checks' certificates in `dir`, from the CA `mesh`'s proxies trust (the run's
    /// own, or the one its control plane was given) and with the identities it names; the
    /// mesh's SVIDs live `svid_ttl` once renewed.
    pub(crate) fn prepare(
        mesh: Scenario,
        pki: &MeshPki,
        dir: &Path,
        svid_ttl: Option<Duration>,
    ) -> Result<Self, Error> {
        create_dir(dir)?;
        let ca_dir = mesh.ca_dir(pki);
        let (ca_file, _) = CertificateAuthority::files(&ca_dir);
        let lab_ca = CertificateAuthority::load(&ca_dir)?;
        let issue = |sa: &str, ttl: Option<Duration>| {
            lab_ca.issue_for(
                &SpiffeId::parse(&mesh.workload_identity(APP, sa))?,
                &IssueOptions {
                    ttl,
                    ..IssueOptions::default()
                },
            )
        };
        // Fresh SVIDs from the lab CA: the ones issued at start-up may be short-lived.
        let svid = |sa: &str| -> Result<CertKey, Error> {
            Ok(issue(sa, None)?.write(dir, &format!("fresh-{sa}"))?.into())
        };
        let short = issue(EXPERIMENTER, Some(Duration::from_secs(1)))?;
        let svids = MeshSvids {
            trust_root: ca_file,
            experimenter: svid(EXPERIMENTER)?,
            checker: svid(CHECKER)?,
            expired_after: short.not_after,
            expired: Some(short.write(dir, "expired-experimenter")?.into()),
            rotation_caller: Some(
                issue(EXPERIMENTER, None)?
                    .write(dir, "rotation-experimenter")?
                    .into(),
            ),
            made_remotely: vec![],
        };
        Self::from_svids(mesh, svids, dir, svid_ttl)
    }

    /// The checks presenting `svids` (and a certificate of another trust domain, made in
    /// `dir`) to the calculator's guard.
    pub(crate) fn from_svids(
        mesh: Scenario,
        svids: MeshSvids,
        dir: &Path,
        svid_ttl: Option<Duration>,
    ) -> Result<Self, Error> {
        create_dir(dir)?;
        let calculator = mesh.workload_identity(APP, CALCULATOR);
        // A mesh naming workloads by DNS name (Linkerd) is checked by that name, which the
        // guard asks for; the others by SPIFFE ID.
        let calculator_id = SpiffeId::parse(&calculator).ok();
        let files = |cert: Option<&CertKey>| ClientTlsFiles {
            cert: cert.map(|c| c.cert.clone()),
            key: cert.map(|c| c.key.clone()),
            ca: svids.trust_root.clone(),
            expect_server_id: calculator_id.clone(),
        };
        let forged_id = mesh.workload_identity(APP, EXPERIMENTER);
        let foreign_ca =
            CertificateAuthority::init(&dir.join("other-trust-domain"), "evil.example")?;
        let foreign: CertKey = foreign_ca
            .issue(
                APP,
                EXPERIMENTER,
                &IssueOptions {
                    // The experimenter's own name where the mesh names workloads by DNS name.
                    dns_names: SpiffeId::parse(&forged_id)
                        .is_err()
                        .then(|| forged_id.clone())
                        .into_iter()
                        .collect(),
                    ..IssueOptions::default()
                },
            )?
            .write(dir, "other-trust-domain-experimenter")?
            .into();

        let expired = svids.expired.as_ref().map(|expired| Attempt {
            name: "expired-certificate",
            description: "the experimenter's SVID from the mesh's CA, expired",
            files: files(Some(expired)),
            headers: vec![],
            expect_allowed: false,
        });
        let attempts: Vec<Attempt> = [
            Some(Attempt {
                name: "valid-identity",
                description: "the experimenter's SVID: the one caller the policy allows",
                files: files(Some(&svids.experimenter)),
                headers: vec![],
                expect_allowed: true,
            }),
            Some(Attempt {
                name: "no-client-certificate",
                description: "TLS without a client certificate",
                files: files(None),
                headers: vec![],
                expect_allowed: false,
            }),
            Some(Attempt {
                name: "other-trust-domain",
                description: "app/experimenter's name, issued by another trust domain's CA",
                files: files(Some(&foreign)),
                headers: vec![],
                expect_allowed: false,
            }),
            expired,
            Some(Attempt {
                name: "forged-identity-header",
                description: "the security checker's valid SVID, claiming the experimenter's \
                              identity in x-forwarded-client-cert and x-meshbench-identity",
                files: files(Some(&svids.checker)),
                headers: vec![
                    (
                        "x-forwarded-client-cert".into(),
                        format!("By={calculator};URI={forged_id}"),
                    ),
                    ("x-meshbench-identity".into(), forged_id.clone()),
                ],
                expect_allowed: false,
            }),
        ]
        .into_iter()
        .flatten()
        .collect();
        Ok(IdentityPlan {
            attempts,
            rotation_caller: svids.rotation_caller.as_ref().map(|c| files(Some(c))),
            expired_after: svids.expired_after,
            svid_ttl,
            made_remotely: svids.made_remotely,
        })
    }

    /// Whether the experimenter's valid SVID should get through to the calculator, and why,
    /// where the policy in force says otherwise than E3's (which allows it): a policy that
    /// does not allow the experimenter's call, or a guard that takes only another proxy's
    /// identity (a waypoint in front of the calculator).
    pub(crate) fn expect_valid_identity(&mut self, allowed: bool, why: &'static str) {
        if let Some(attempt) = self
            .attempts
            .iter_mut()
            .find(|a| a.name == "valid-identity")
        {
            attempt.expect_allowed = allowed;
            attempt.description = why;
        }
    }

    /// Where the remotely made expired SVID turned out to expire.
    #[cfg_attr(not(feature = "kubernetes"), allow(dead_code))] // the cluster's checks only
    pub(crate) fn set_expired_after(&mut self, not_after: time::OffsetDateTime) {
        self.expired_after = not_after;
    }

    /// Every file the checks present or trust that is made here (the others are
    /// [`IdentityPlan::made_remotely`]).
    #[cfg_attr(not(feature = "kubernetes"), allow(dead_code))] // the cluster's checks only
    pub(crate) fn files(&self) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = self
            .attempts
            .iter()
            .map(|a| &a.files)
            .chain(self.rotation_caller.as_ref())
            .flat_map(|f| [f.cert.clone(), f.key.clone(), Some(f.ca.clone())])
            .flatten()
            .filter(|f| !self.made_remotely.contains(f))
            .collect();
        files.sort();
        files.dedup();
        files
    }

    /// Runs the identity checks against the calculator's guard, then rotation under load:
    /// by short-lived SVIDs, or, given `ca_rotation` (a mesh whose certificates cannot live
    /// seconds), by rotating the mesh's CA while the requests flow.
    pub(crate) async fn run(
        &self,
        access: &dyn GuardAccess,
        ca_rotation: Option<CaRotation<'_>>,
    ) -> Result<Vec<IdentityCheck>, Error> {
        // The short-lived SVID must have expired before it is tried. X.509 stores whole
        // seconds and a certificate is valid through its notAfter second, so wait past the
        // next one.
        let expired_at = self.expired_after + Duration::from_secs(1);
        let deadline = Instant::now() + Duration::from_secs(10);
        while time::OffsetDateTime::now_utc() <= expired_at && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut checks = vec![];
        for attempt in &self.attempts {
            let ExchangeReport {
                outcome, server_id, ..
            } = access.exchange(&attempt.files, &attempt.headers).await?;
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
        let Some(caller) = &self.rotation_caller else {
            return Ok(checks);
        };
        checks.push(match ca_rotation {
            None => self.rotation_under_load(access, caller).await?,
            Some(rotate) => self.ca_rotation_under_load(access, caller, rotate).await?,
        });
        Ok(checks)
    }

    /// The mesh's CA rotates to a new root, then the experimenter sends rounds of requests
    /// through its proxy to the calculator's until the calculator's proxy presents a renewed
    /// certificate (or [`RENEWED_SVID_WAIT`] has passed); none may fail.
    async fn ca_rotation_under_load(
        &self,
        access: &dyn GuardAccess,
        caller: &ClientTlsFiles,
        rotate: CaRotation<'_>,
    ) -> Result<IdentityCheck, Error> {
        let before = access.exchange(caller, &[]).await?;
        rotate.await?;
        let deadline = Instant::now() + RENEWED_SVID_WAIT;
        let (mut sent, mut succeeded, mut failures) = (0, 0, vec![]);
        let after = loop {
            let (ok, failed) = experiment_round(access, ROTATION_ROUND).await?;
            sent += ROTATION_ROUND;
            succeeded += ok;
            if failed.as_object().is_some_and(|f| !f.is_empty()) {
                failures.push(failed);
            }
            let after = access.exchange(caller, &[]).await?;
            if renewed(&before, &after) || Instant::now() >= deadline {
                break after;
            }
        };
        let renewed = renewed(&before, &after);
        Ok(IdentityCheck {
            name: "rotation-under-load".into(),
            description: format!(
                "rounds of {ROTATION_ROUND} requests over about 3 s each, from the moment the \
                 mesh's CA was rotated to a new root until the calculator's proxy presented a \
                 renewed certificate"
            ),
            expected: "no failed request; certificate renewed".into(),
            observed: format!(
                "{succeeded} of {sent} succeeded (failures: {}); calculator's certificate {}",
                serde_json::Value::Array(failures),
                if renewed { "renewed" } else { "not renewed" }
            ),
            server_id: after.server_id.clone(),
            verdict: if succeeded == sent && renewed {
                Verdict::Pass
            } else {
                Verdict::Fail
            },
        })
    }

    /// With SVIDs living a few seconds, the experimenter sends a stream of requests through
    /// its proxy to the calculator's while both renew their certificates; none may fail, and
    /// the calculator's proxy must present a renewed certificate afterwards.
    async fn rotation_under_load(
        &self,
        access: &dyn GuardAccess,
        caller: &ClientTlsFiles,
    ) -> Result<IdentityCheck, Error> {
        let before = self.renewed_guard_certificate(access, caller).await?;
        let interactions = ROTATION_ROUND;
        let (succeeded, failures) = experiment_round(access, interactions).await?;
        let after = access.exchange(caller, &[]).await?;
        let renewed = renewed(&before, &after);
        let ttl = self
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
            server_id: after.server_id.clone(),
            verdict: if succeeded == interactions && renewed {
                Verdict::Pass
            } else {
                Verdict::Fail
            },
        })
    }

    /// What the guard presents once its certificate is one the CA service signed for the
    /// short lifetime (a cluster's pods start with a longer-lived one, see
    /// `meshbench_kube::BOOTSTRAP_SVID_TTL`): rotation is judged from there.
    async fn renewed_guard_certificate(
        &self,
        access: &dyn GuardAccess,
        caller: &ClientTlsFiles,
    ) -> Result<ExchangeReport, Error> {
        let deadline = Instant::now() + RENEWED_SVID_WAIT;
        loop {
            let report = access.exchange(caller, &[]).await?;
            let now = time::OffsetDateTime::now_utc().unix_timestamp();
            let short_lived = match (self.svid_ttl, &report.server_cert) {
                (Some(ttl), Some(cert)) => expires_within(cert, ttl, now),
                _ => true,
            };
            if short_lived || Instant::now() >= deadline {
                return Ok(report);
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// Has the experimenter send `interactions` requests to the calculator through the mesh, in
/// batches of 10 every 100 ms: how many succeeded, and its failures by class.
async fn experiment_round(
    access: &dyn GuardAccess,
    interactions: usize,
) -> Result<(usize, serde_json::Value), Error> {
    let result = access
        .run_experiment(serde_json::json!({
            "interactions": interactions,
            "batchSize": 10,
            "intervalBetweenBatchesInMilliseconds": 100,
        }))
        .await?;
    let succeeded = result["rttsInMilliseconds"]
        .as_array()
        .map_or(0, |rtts| rtts.len());
    Ok((succeeded, result["failuresByClass"].clone()))
}

fn create_dir(dir: &Path) -> Result<(), Error> {
    std::fs::create_dir_all(dir).map_err(|source| Error::Io {
        path: dir.to_owned(),
        source,
    })
}

/// Whether `cert` expires within `ttl` (and a second of rounding) of `now`: one the CA signed
/// for the short lifetime. Judged by what is left of it, not by notAfter - notBefore: CAs
/// backdate notBefore for clock skew (ours by five minutes), so a 4 s SVID spans 304 s.
fn expires_within(cert: &CertificateSummary, ttl: Duration, now: i64) -> bool {
    cert.not_after - now <= i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX) + 1
}

/// Whether the guard presented a different certificate `after` than `before` (both seen).
fn renewed(before: &ExchangeReport, after: &ExchangeReport) -> bool {
    let serial = |r: &ExchangeReport| r.server_cert.as_ref().map(|c| c.serial.clone());
    serial(before).is_some() && serial(after).is_some() && serial(before) != serial(after)
}

/// How the verifier reaches the proxy that guards the calculator.
#[derive(Debug, Clone)]
pub enum Guard {
    /// A sidecar: it intercepts connections to the calculator's pod and speaks mTLS there.
    Sidecar { pod: SocketAddr },
    /// A sidecar that takes another proxy's mTLS on the pod's address when asked, by SNI,
    /// for the pod's own identity, and presents a certificate for that name (Linkerd, whose
    /// identities are DNS names); a connection without that name is not its mTLS. Checked
    /// by the name, without ALPN, as a linkerd2-proxy connects to another.
    NamedSidecar {
        pod: SocketAddr,
        server_name: String,
    },
    /// A node agent: mTLS to the agent of the calculator's node (the calculator's SVID asked
    /// for by SNI), then an HTTP/2 CONNECT tunnel to the calculator's app (HBONE).
    NodeAgent { agent: SocketAddr, app: SocketAddr },
}

impl Guard {
    /// The calculator's guard for `mesh`, its app at `app` on the node at `node_ip`.
    pub fn for_calculator(
        mesh: Scenario,
        app: std::net::IpAddr,
        node_ip: std::net::IpAddr,
    ) -> Guard {
        let app = SocketAddr::new(app, Ports::APP);
        match mesh.enrollment() {
            Enrollment::AgentPerNode => Guard::NodeAgent {
                agent: SocketAddr::new(node_ip, Ports::HBONE),
                app,
            },
            _ => Guard::Sidecar { pod: app },
        }
    }

    /// The calculator's guard in `net` for `mesh`.
    pub fn of(mesh: Scenario, net: &LabNetwork) -> Result<Guard, Error> {
        let calculator_pod = net
            .topology()
            .first_pod(CALCULATOR)
            .ok_or_else(|| Error::Probe("no calculator pod".into()))?;
        Ok(Guard::for_calculator(
            mesh,
            net.pod_ip(&calculator_pod.name)?,
            net.node_ip(&calculator_pod.workload.node)?,
        ))
    }
}

/// The local lab's access to the guard: from the first node, where no mesh captures the
/// verifier's own traffic; the experimenter's app is asked inside its pod.
pub(crate) struct NodeAccess<'n> {
    pub net: &'n LabNetwork,
    pub guard: Guard,
}

impl GuardAccess for NodeAccess<'_> {
    fn exchange<'a>(
        &'a self,
        files: &'a ClientTlsFiles,
        headers: &'a [(String, String)],
    ) -> BoxFuture<'a, Result<ExchangeReport, Error>> {
        Box::pin(async move {
            let node = self.net.topology().nodes[0].clone();
            let netns = self.net.netns_of(NetPlace::Node(&node))?;
            let (guard, files, headers) = (self.guard.clone(), files.clone(), headers.to_vec());
            run_in_netns(&netns, move || {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a current-thread runtime builds")
                    .block_on(exchange(guard, &files, &headers))
            })?
        })
    }

    fn run_experiment(
        &self,
        body: serde_json::Value,
    ) -> BoxFuture<'_, Result<serde_json::Value, Error>> {
        Box::pin(async move {
            crate::probe::ask_app(self.net, EXPERIMENTER, "/api/experimenter/experiment", body)
        })
    }
}

/// One mTLS exchange (`POST /add`) with the calculator's guard, from where this runs,
/// presenting `files`' certificate and `headers`: its outcome class, and what the guard
/// presented if the exchange completed. `Err` only for files that cannot be loaded.
pub async fn exchange(
    guard: Guard,
    files: &ClientTlsFiles,
    headers: &[(String, String)],
) -> Result<ExchangeReport, Error> {
    let config = Arc::new(match guard {
        Guard::Sidecar { .. } => client_config(files, &[b"http/1.1"])?,
        Guard::NodeAgent { .. } => client_config(files, &[b"h2"])?,
        Guard::NamedSidecar { .. } => client_config_by_name(files, &[])?,
    });
    Ok(exchange_with(guard, config, headers.to_vec()).await)
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

async fn exchange_with(
    guard: Guard,
    config: Arc<rustls::ClientConfig>,
    headers: Vec<(String, String)>,
) -> ExchangeReport {
    let attempt = async {
        let (connect_to, name) = match &guard {
            Guard::Sidecar { pod } => (
                *pod,
                ServerName::try_from(format!("{CALCULATOR}.{APP}.svc"))?,
            ),
            Guard::NamedSidecar { pod, server_name } => {
                (*pod, ServerName::try_from(server_name.clone())?)
            }
            Guard::NodeAgent { agent, .. } => (
                *agent,
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
            Guard::Sidecar { .. } | Guard::NamedSidecar { .. } => {
                post_add(TokioIo::new(tls), &headers).await?
            }
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
    let failed = |outcome: Outcome| ExchangeReport {
        outcome: outcome.to_string(),
        server_id: None,
        server_cert: None,
    };
    match tokio::time::timeout(EXCHANGE_TIMEOUT, attempt).await {
        Ok(Ok((status, leaf))) => {
            let leaf = leaf.map(rustls_pki_types::CertificateDer::from);
            ExchangeReport {
                outcome: Outcome::Http(status).to_string(),
                // The SPIFFE ID, or for a mesh naming workloads by DNS name, that name.
                server_id: leaf.as_ref().and_then(|der| {
                    meshbench_identity::spiffe_ids_of(der)
                        .into_iter()
                        .next()
                        .map(|id| id.to_string())
                        .or_else(|| meshbench_identity::dns_names_of(der).into_iter().next())
                }),
                server_cert: leaf.as_ref().and_then(CertificateSummary::of),
            }
        }
        Ok(Err(e)) => failed(Outcome::classify(e.as_ref())),
        Err(_) => failed(Outcome::Timeout),
    }
}

/// `POST /add` to the calculator over an established stream; its status.
async fn post_add<IO>(io: IO, headers: &[(String, String)]) -> Result<u16, BoxError>
where
    IO: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await?;
    tokio::spawn(conn);
    let mut request = http::Request::post("/add")
        .header("host", format!("{CALCULATOR}.{APP}.svc"))
        .header("content-type", "application/json");
    for (name, value) in headers {
        request = request.header(name.as_str(), value.as_str());
    }
    let request = request.body(Full::new(Bytes::from_static(
        br#"{"firstNumber": 1, "secondNumber": 2}"#,
    )))?;
    let response = sender.send_request(request).await?;
    let status = response.status().as_u16();
    response.into_body().collect().await?;
    Ok(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert(not_before: i64, not_after: i64) -> CertificateSummary {
        CertificateSummary {
            serial: "01".into(),
            not_before,
            not_after,
        }
    }

    #[test]
    fn a_backdated_short_lived_svid_counts_as_short_lived_and_a_bootstrap_one_does_not() {
        let ttl = ROTATION_TTL;
        let now = 1_000_000;
        // Our CA's 4 s SVID, backdated five minutes: short-lived, although it spans 304 s.
        assert!(expires_within(&cert(now - 300, now + 4), ttl, now));
        // A cluster pod's first SVID (a minute), half-way through: not yet renewed.
        assert!(!expires_within(&cert(now - 330, now + 30), ttl, now));
        // A day-long one.
        assert!(!expires_within(&cert(now - 300, now + 86_400), ttl, now));
    }
}
