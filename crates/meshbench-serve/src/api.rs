//! The REST API (JSON under `/api/`) and the router that puts it, the pages and the guard
//! together. Every page is backed by these endpoints; `/api/openapi.json` describes them.
//! A bad request gets 400 with `{"error": "...", "field": "..."}`, the message the CLI gives
//! for the same input.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use futures::{Stream, StreamExt};
use http::{header, StatusCode};
use meshbench_experiment::{builtin_spec, parse_spec, profile_names, Profile, Scale};
use meshbench_meshes::Scenario;
use meshbench_netlab::Backend;
use meshbench_report::{compare_runs, cost_table, tables::Table, Prices};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use tokio::sync::broadcast;

use crate::catalog::{self, RunSummary};
pub use crate::error::ApiError;
use crate::jobs::{CancelOutcome, JobEvent, JobRequest, JobSnapshot, RunTarget, SubmitError};
use crate::sessions::Caller;
use crate::state::AppState;

/// Any request body: a spec, a form.
pub const BODY_LIMIT: usize = 1 << 20;
/// An E3 result to analyze (10,000 RTTs are about 200 KiB).
const ANALYZE_LIMIT: usize = 8 << 20;

type Shared = State<Arc<AppState>>;

/// The JSON endpoints, under `/api/` (the pages have their own routes; the server's router puts
/// both behind the guard).
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/openapi.json", get(crate::openapi::document))
        .route("/api/profiles", get(profiles))
        .route("/api/profiles/{name}", get(profile))
        .route("/api/runs", get(list_runs).post(create_run))
        .route("/api/runs/{id}", get(get_run).delete(cancel_run))
        .route("/api/runs/{id}/events", get(events))
        .route("/api/runs/{id}/files", get(list_files))
        .route("/api/runs/{id}/files/{*name}", get(file))
        .route("/api/runs/{id}/cost", get(cost))
        .route("/api/compare", get(compare))
        .route(
            "/api/verify",
            get(list_verifications).post(create_verification),
        )
        .route("/api/verify/{id}", get(get_verification).delete(cancel_run))
        .route("/api/e3/experiment", post(e3_experiment))
        .route(
            "/api/e3/analyze",
            post(e3_analyze).layer(DefaultBodyLimit::max(ANALYZE_LIMIT)),
        )
}

/// A profile as `GET /api/profiles` lists it.
#[derive(Debug, Serialize)]
pub struct ProfileInfo {
    pub name: String,
    pub description: String,
    pub scenarios: Vec<String>,
    pub placements: Vec<String>,
    pub cells: usize,
    pub estimated_seconds: u64,
}

impl ProfileInfo {
    fn of(profile: &Profile) -> ProfileInfo {
        ProfileInfo {
            name: profile.name.clone(),
            description: profile.description.clone(),
            scenarios: profile
                .scenarios
                .iter()
                .map(|m| m.name().to_owned())
                .collect(),
            placements: profile
                .placements
                .iter()
                .map(|p| p.name().to_owned())
                .collect(),
            cells: profile.cells(),
            estimated_seconds: profile.estimated_duration().as_secs(),
        }
    }
}

pub fn builtin_profiles() -> Vec<ProfileInfo> {
    profile_names()
        .into_iter()
        .filter_map(|name| Profile::builtin(name, Scale::Local).ok())
        .map(|p| ProfileInfo::of(&p))
        .collect()
}

async fn profiles() -> Json<Vec<ProfileInfo>> {
    Json(builtin_profiles())
}

async fn profile(Path(name): Path<String>) -> Result<Json<Value>, ApiError> {
    let spec = builtin_spec(&name).map_err(|e| ApiError::not_found(e.to_string()))?;
    let profile =
        Profile::builtin(&name, Scale::Local).map_err(|e| ApiError::not_found(e.to_string()))?;
    Ok(Json(
        json!({"profile": ProfileInfo::of(&profile), "spec": spec}),
    ))
}

/// `POST /api/runs`, and the new-run form.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewRun {
    /// A built-in profile (default quick), unless `spec` is given.
    pub profile: Option<String>,
    /// An experiment spec (YAML).
    pub spec: Option<String>,
    /// `local` (default) or `original`.
    pub scale: Option<String>,
    #[serde(default)]
    pub scenarios: Vec<String>,
    #[serde(default)]
    pub placements: Vec<String>,
    /// Each cell's measured duration, such as `2s`.
    pub duration: Option<String>,
    pub warmup: Option<String>,
    /// `netns` (default where permitted) or `loopback`.
    pub backend: Option<String>,
    #[serde(default)]
    pub pin: bool,
}

/// Turns a new-run request into a job, or the error at its field, with the CLI's messages.
pub fn job_of(new: &NewRun, cluster: bool) -> Result<JobRequest, ApiError> {
    use meshbench_experiment::Error as E;
    let at = |e: E| -> ApiError {
        let field = match &e {
            E::UnknownProfile { .. } => "profile".to_owned(),
            E::UnknownSelection { field, .. } => field.trim_start_matches('-').to_owned(),
            E::Spec { origin, field, .. } if origin == "command line" => {
                field.trim_start_matches('-').to_owned()
            }
            _ => "spec".to_owned(),
        };
        ApiError::field(&field, e.to_string())
    };
    let scale = match new.scale.as_deref().filter(|s| !s.is_empty()) {
        None => Scale::Local,
        Some(name) => Scale::parse(name).ok_or_else(|| {
            ApiError::field(
                "scale",
                format!("unknown scale {name:?}; known: local, original"),
            )
        })?,
    };
    let spec = new.spec.as_deref().filter(|s| !s.trim().is_empty());
    let mut profile = match spec {
        Some(text) => parse_spec(text, "spec", scale).map_err(at)?,
        None => Profile::builtin(
            new.profile
                .as_deref()
                .filter(|p| !p.is_empty())
                .unwrap_or("quick"),
            scale,
        )
        .map_err(at)?,
    };
    if let Some(text) = new.duration.as_deref().filter(|s| !s.trim().is_empty()) {
        let duration = parse_duration("duration", text)?;
        profile.set_duration(duration).map_err(at)?;
    }
    if let Some(text) = new.warmup.as_deref().filter(|s| !s.trim().is_empty()) {
        let warmup = parse_duration("warmup", text)?;
        profile.set_warmup(warmup).map_err(at)?;
    }
    let names = |items: &[String]| -> Vec<String> {
        items
            .iter()
            .flat_map(|s| s.split(','))
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect()
    };
    profile
        .select(&names(&new.scenarios), &names(&new.placements))
        .map_err(at)?;
    let target = match new.backend.as_deref().filter(|s| !s.is_empty()) {
        None => RunTarget::Lab(Backend::default_here()),
        Some("kubernetes" | "k8s") if cluster => RunTarget::Kubernetes,
        Some("kubernetes" | "k8s") => {
            return Err(ApiError::field(
                "backend",
                "--backend kubernetes: this server was started without a cluster (meshbench serve --kubeconfig FILE)",
            ))
        }
        Some(name) => name.parse::<Backend>().map(RunTarget::Lab).map_err(|_| {
            ApiError::field(
                "backend",
                format!("unknown backend {name:?}; known: netns, loopback, kubernetes"),
            )
        })?,
    };
    Ok(JobRequest::Run {
        profile: Box::new(profile),
        target,
        pin: new.pin,
    })
}

fn parse_duration(field: &str, text: &str) -> Result<Duration, ApiError> {
    humantime::parse_duration(text.trim()).map_err(|e| {
        ApiError::field(
            field,
            format!("--{field}: {e} (expected a duration such as 10s, 250ms or 1m)"),
        )
    })
}

/// A new run's job: its spec is parsed and checked on a blocking thread, never on the
/// server's async workers (a spec is up to [`BODY_LIMIT`] of YAML).
pub async fn parse_off_the_workers(state: &AppState, new: NewRun) -> Result<JobRequest, ApiError> {
    let cluster = state.cluster;
    off_the_workers("checking the spec", move || job_of(&new, cluster)).await
}

/// `work` on a blocking thread, never on the server's async workers, which answer every other
/// request meanwhile: parsing a spec, or reading runs from disk and analysing them (the
/// analysis bootstraps every group's per-second series). `what` names it if the thread fails.
pub async fn off_the_workers<T: Send + 'static>(
    what: &'static str,
    work: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(work).await.unwrap_or_else(|e| {
        Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("{what} failed: {e}"),
        ))
    })
}

pub fn submit(state: &AppState, request: JobRequest) -> Result<String, ApiError> {
    state.jobs.submit(request).map_err(|e| match e {
        SubmitError::QueueFull => ApiError::new(StatusCode::TOO_MANY_REQUESTS, e.to_string()),
        SubmitError::ShuttingDown => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
        SubmitError::Directory(_) => {
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
        }
    })
}

/// The JSON body, or a 400 that says what is wrong with it.
fn json_body<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(&mut deserializer).map_err(|e| {
        let path = e.path().to_string();
        let field = (path != ".").then_some(path);
        ApiError {
            status: StatusCode::BAD_REQUEST,
            error: format!("invalid JSON body: {}", e.inner()),
            field,
        }
    })
}

async fn create_run(State(state): Shared, body: axum::body::Bytes) -> Result<Response, ApiError> {
    let new: NewRun = json_body(&body)?;
    let job = parse_off_the_workers(&state, new).await?;
    let id = submit(&state, job)?;
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, format!("/api/runs/{id}"))],
        Json(json!({"id": id})),
    )
        .into_response())
}

/// A run: what the results directory says, with the job's live state while it is queued or
/// running.
#[derive(Debug, Serialize)]
pub struct RunView {
    #[serde(flatten)]
    pub summary: Option<RunSummary>,
    pub id: String,
    pub job: Option<JobSnapshot>,
}

pub fn run_view(state: &AppState, id: &str) -> Option<RunView> {
    let job = state.jobs.snapshot(id).filter(|j| j.kind == "run");
    let summary =
        catalog::run_dir(&state.results_dir, id).map(|dir| match catalog::read_run(&dir) {
            Ok(result) => {
                let mut summary = RunSummary::of(id, &result, &dir);
                if let Some(job) = &job {
                    if !job.status.finished() {
                        summary.status = job.status.name().to_owned();
                    }
                }
                summary
            }
            Err(why) => RunSummary::unreadable(id, why),
        });
    if summary.is_none() && job.is_none() {
        return None;
    }
    Some(RunView {
        summary,
        id: id.to_owned(),
        job,
    })
}

/// Every run on disk, plus the jobs that have not written one yet.
pub fn all_runs(state: &AppState) -> Vec<Value> {
    let jobs = state.jobs.list();
    let mut runs: Vec<Value> = jobs
        .iter()
        .filter(|j| j.kind == "run" && catalog::run_dir(&state.results_dir, &j.id).is_none())
        .map(|j| json!({"id": j.id, "status": j.status, "job": j}))
        .collect();
    for summary in catalog::list_runs(&state.results_dir) {
        let job = jobs.iter().find(|j| j.id == summary.id);
        let mut value = serde_json::to_value(&summary).unwrap_or(Value::Null);
        if let Some(job) = job.filter(|j| !j.status.finished()) {
            value["status"] = json!(job.status.name());
        }
        runs.push(value);
    }
    runs
}

async fn list_runs(State(state): Shared) -> Json<Vec<Value>> {
    Json(all_runs(&state))
}

async fn get_run(State(state): Shared, Path(id): Path<String>) -> Result<Json<RunView>, ApiError> {
    run_view(&state, &id)
        .map(Json)
        .ok_or_else(|| ApiError::not_found(format!("no run {id:?}")))
}

pub fn cancel(state: &AppState, id: &str) -> Result<CancelOutcome, ApiError> {
    match state.jobs.cancel(id) {
        CancelOutcome::NotFound if catalog::run_dir(&state.results_dir, id).is_some() => {
            Err(ApiError::new(
                StatusCode::CONFLICT,
                format!("run {id:?} is not running here"),
            ))
        }
        CancelOutcome::NotFound => Err(ApiError::not_found(format!("no run {id:?}"))),
        CancelOutcome::AlreadyFinished => Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("run {id:?} has already finished"),
        )),
        outcome => Ok(outcome),
    }
}

async fn cancel_run(State(state): Shared, Path(id): Path<String>) -> Result<Response, ApiError> {
    let outcome = cancel(&state, &id)?;
    let status = match outcome {
        CancelOutcome::Dequeued => "cancelled",
        _ => "stopping",
    };
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({"id": id, "status": status})),
    )
        .into_response())
}

/// The SSE stream of a job: a `snapshot` event with everything so far, then `status`,
/// `second`, `log` events as they happen, and `done` at the end, after which it closes. A run
/// that is not a job of this server gets its snapshot from disk and `done` at once.
async fn events(
    State(state): Shared,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    use crate::state::{NoSlot, WatcherSlot, MAX_WATCHERS, MAX_WATCHERS_PER_CLIENT};
    let slot = WatcherSlot::take(&state.watchers, caller.key()).map_err(|no| match no {
        NoSlot::AllTaken => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{MAX_WATCHERS} event streams are open already"),
        ),
        NoSlot::ClientFull => ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            format!("you have {MAX_WATCHERS_PER_CLIENT} event streams open already"),
        ),
    })?;
    // Subscribe before the snapshot, so nothing between the two is missed.
    let receiver = state.jobs.subscribe();
    let (first, finished): (Vec<Event>, bool) = match state.jobs.snapshot(&id) {
        Some(job) => {
            let finished = job.status.finished();
            let mut first = vec![sse("snapshot", &job)];
            if finished {
                first.push(sse(
                    "done",
                    &json!({"status": job.status, "reason": job.reason}),
                ));
            }
            (first, finished)
        }
        None => {
            let view = run_view(&state, &id)
                .ok_or_else(|| ApiError::not_found(format!("no run {id:?}")))?;
            let summary = view.summary.as_ref();
            let status = summary.map_or("unreadable".to_owned(), |s| s.status.clone());
            (
                vec![
                    sse("snapshot", &view),
                    sse(
                        "done",
                        &json!({"status": status, "reason": summary.and_then(|s| s.status_reason.clone())}),
                    ),
                ],
                true,
            )
        }
    };
    // The slot goes with the stream: dropped when the watcher leaves or the job ends.
    let jobs = state.jobs.clone();
    let rest = futures::stream::unfold(
        (receiver, id, finished, slot),
        move |(mut receiver, id, ended, slot)| {
            let jobs = jobs.clone();
            async move {
                if ended {
                    return None;
                }
                loop {
                    match receiver.recv().await {
                        Ok((job, event)) if job == id => {
                            let ended = matches!(event, JobEvent::Done { .. });
                            return Some((sse(event.name(), &event), (receiver, id, ended, slot)));
                        }
                        Ok(_) => continue,
                        // A slow watcher misses some seconds; the next status catches it up.
                        // But if it missed the end, the end is told now: nothing else would
                        // close the stream.
                        Err(broadcast::error::RecvError::Lagged(_)) => match jobs.ended(&id) {
                            Some(done) => {
                                return Some((sse("done", &done), (receiver, id, true, slot)));
                            }
                            None => continue,
                        },
                        Err(broadcast::error::RecvError::Closed) => return None,
                    }
                }
            }
        },
    );
    let stream = futures::stream::iter(first).chain(rest).map(Ok);
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

fn sse(name: &str, data: &impl Serialize) -> Event {
    Event::default()
        .event(name)
        .json_data(data)
        .unwrap_or_else(|_| Event::default().event(name))
}

fn run_of(
    state: &AppState,
    id: &str,
) -> Result<(catalog::RunDir, meshbench_results::RunResult), ApiError> {
    let dir = catalog::run_dir(&state.results_dir, id)
        .ok_or_else(|| ApiError::not_found(format!("no run {id:?} with results")))?;
    let result = catalog::read_run(&dir).map_err(|why| {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("run {id:?}: {why}"),
        )
    })?;
    Ok((dir, result))
}

async fn list_files(
    State(state): Shared,
    Path(id): Path<String>,
) -> Result<Json<Vec<catalog::RunFile>>, ApiError> {
    let (dir, result) = run_of(&state, &id)?;
    Ok(Json(catalog::run_files(&dir, &result)))
}

pub fn file_response(state: &AppState, id: &str, name: &str) -> Result<Response, ApiError> {
    let (dir, result) = run_of(state, id)?;
    let (body, content_type) = catalog::read_file(&dir, &result, name)
        .ok_or_else(|| ApiError::not_found(format!("run {id:?} has no file {name:?}")))?
        .map_err(|refused| {
            ApiError::new(StatusCode::FORBIDDEN, format!("run {id:?}: {refused}"))
        })?;
    let download = name.rsplit('/').next().unwrap_or(name).to_owned();
    let disposition = if content_type.starts_with("text/html") {
        "inline".to_owned()
    } else {
        format!("attachment; filename=\"{}-{download}\"", id)
    };
    Ok((
        [
            (header::CONTENT_TYPE, content_type.to_owned()),
            (header::CONTENT_DISPOSITION, disposition),
            // A report is data: no scripts, nothing fetched, only its inline styles and SVGs.
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; style-src 'unsafe-inline'; img-src data:; frame-ancestors 'self'".to_owned(),
            ),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff".to_owned()),
        ],
        body,
    )
        .into_response())
}

async fn file(
    State(state): Shared,
    Path((id, name)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    file_response(&state, &id, &name)
}

/// `GET /api/runs/{id}/cost` and the cost form.
#[derive(Debug, Default, Clone, Deserialize)]
pub struct CostQuery {
    pub pods: Option<String>,
    pub cpu_price: Option<String>,
    pub mem_price: Option<String>,
}

pub fn prices(q: &CostQuery) -> Result<Prices, ApiError> {
    let number = |field: &str, value: Option<&String>| -> Result<f64, ApiError> {
        let text = value.map(|v| v.trim()).unwrap_or("");
        match text.parse::<f64>() {
            Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
            _ => Err(ApiError::field(
                field,
                format!(
                    "--{}: {text:?} is not a non-negative number",
                    field.replace('_', "-")
                ),
            )),
        }
    };
    let pods_text = q.pods.as_deref().map(str::trim).unwrap_or("");
    let pods = pods_text.parse::<u64>().map_err(|_| {
        ApiError::field(
            "pods",
            format!("--pods: {pods_text:?} is not a whole number"),
        )
    })?;
    Ok(Prices {
        pods,
        cpu_per_core_month: number("cpu_price", q.cpu_price.as_ref())?,
        memory_per_gib_month: number("mem_price", q.mem_price.as_ref())?,
    })
}

pub fn cost_of(state: &AppState, id: &str, q: &CostQuery) -> Result<Table, ApiError> {
    let (_, result) = run_of(state, id)?;
    Ok(cost_table(&result, prices(q)?))
}

async fn cost(
    State(state): Shared,
    Path(id): Path<String>,
    Query(q): Query<CostQuery>,
) -> Result<Json<Value>, ApiError> {
    let table = {
        let id = id.clone();
        off_the_workers("pricing the run", move || cost_of(&state, &id, &q)).await?
    };
    Ok(Json(json!({"id": id, "table": table_json(&table)})))
}

pub fn table_json(table: &Table) -> Value {
    json!({"title": table.title, "note": table.note, "headers": table.headers, "rows": table.rows})
}

#[derive(Debug, Default, Clone, Deserialize)]
pub struct CompareQuery {
    pub a: Option<String>,
    pub b: Option<String>,
}

/// B against A, as `meshbench compare` prints it.
pub fn comparison(
    state: &AppState,
    q: &CompareQuery,
) -> Result<(RunSummary, RunSummary, Vec<Table>), ApiError> {
    let side = |field: &str, id: Option<&String>| {
        let id = id
            .map(|s| s.trim())
            .filter(|s| !s.is_empty())
            .ok_or_else(|| ApiError::field(field, format!("{field}: choose a run")))?;
        let (dir, result) = run_of(state, id)
            .map_err(|e| ApiError::field(field, format!("{field}: {}", e.error)))?;
        Ok::<_, ApiError>((RunSummary::of(id, &result, &dir), result))
    };
    let (a, ra) = side("a", q.a.as_ref())?;
    let (b, rb) = side("b", q.b.as_ref())?;
    Ok((a, b, compare_runs(&ra, &rb)))
}

async fn compare(
    State(state): Shared,
    Query(q): Query<CompareQuery>,
) -> Result<Json<Value>, ApiError> {
    let (a, b, tables) =
        off_the_workers("comparing the runs", move || comparison(&state, &q)).await?;
    Ok(Json(json!({
        "a": a,
        "b": b,
        "tables": tables.iter().map(table_json).collect::<Vec<_>>(),
    })))
}

/// `POST /api/verify` and the verify form.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewVerification {
    /// Meshes to verify (default: every data plane of the local lab).
    #[serde(default)]
    pub meshes: Vec<String>,
}

/// The meshes verify can take, in the order it reports them (`baseline`, the negative
/// control, last).
pub fn verifiable() -> Vec<Scenario> {
    let mut meshes: Vec<Scenario> = meshbench_meshes::enrollable()
        .into_iter()
        .chain(meshbench_meshes::unenforceable())
        .collect();
    meshes.push(Scenario::baseline());
    meshes
}

pub fn verification_of(new: &NewVerification) -> Result<JobRequest, ApiError> {
    let known = verifiable();
    let names: Vec<&str> = new
        .meshes
        .iter()
        .flat_map(|s| s.split(','))
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    let meshes = if names.is_empty() {
        known[..known.len() - 1].to_vec()
    } else {
        names
            .iter()
            .map(|name| match Scenario::parse(name) {
                Some(mesh) if known.contains(&mesh) => Ok(mesh),
                _ => Err(ApiError::field(
                    "meshes",
                    format!(
                        "--mesh: cannot verify {name:?} (verify supports: {})",
                        known
                            .iter()
                            .map(|m| m.name())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )),
            })
            .collect::<Result<_, _>>()?
    };
    Ok(JobRequest::Verify { meshes })
}

async fn create_verification(
    State(state): Shared,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let new: NewVerification = json_body(&body)?;
    let id = submit(&state, verification_of(&new)?)?;
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, format!("/api/verify/{id}"))],
        Json(json!({"id": id})),
    )
        .into_response())
}

async fn list_verifications(State(state): Shared) -> Json<Value> {
    let jobs: Vec<JobSnapshot> = state
        .jobs
        .list()
        .into_iter()
        .filter(|j| j.kind == "verify" && !j.status.finished())
        .collect();
    Json(json!({
        "jobs": jobs,
        "verifications": catalog::list_verifications(&state.results_dir),
    }))
}

async fn get_verification(
    State(state): Shared,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let job = state.jobs.snapshot(&id).filter(|j| j.kind == "verify");
    let report = catalog::verify_dir(&state.results_dir, &id)
        .map(|dir| catalog::read_verification(&dir))
        .transpose()
        .map_err(|why| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, why))?;
    if job.is_none() && report.is_none() {
        return Err(ApiError::not_found(format!("no verification {id:?}")));
    }
    Ok(Json(json!({"id": id, "job": job, "report": report})))
}

async fn e3_experiment(
    State(state): Shared,
    body: axum::body::Bytes,
) -> Result<Json<Value>, ApiError> {
    let body: Map<String, Value> = json_body(&body)?;
    // Held until the experiment ends: no queued job starts measuring beside it.
    let _alone = state
        .jobs
        .measure_alone()
        .map_err(|busy| ApiError::new(StatusCode::CONFLICT, busy.to_string()))?;
    let result = crate::e3::experiment(&state.calculator, &body)
        .await
        .map_err(|e| {
            let field = e.split([':', '[']).next().unwrap_or("").to_owned();
            ApiError::field(&field, e)
        })?;
    Ok(Json(result))
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AnalyzeQuery {
    #[serde(default)]
    discard_first: bool,
    format: Option<String>,
}

async fn e3_analyze(
    Query(q): Query<AnalyzeQuery>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let result: Map<String, Value> = json_body(&body)?;
    let analysis = crate::e3::analyze(&result, q.discard_first)
        .map_err(|e| ApiError::field("rttsInMilliseconds", e))?;
    Ok(match q.format.as_deref() {
        Some("csv") => (
            [
                (header::CONTENT_TYPE, "text/csv; charset=utf-8"),
                (
                    header::CONTENT_DISPOSITION,
                    "attachment; filename=\"analysis.csv\"",
                ),
            ],
            crate::e3::analysis_csv(&analysis),
        )
            .into_response(),
        None | Some("json") => Json(&analysis).into_response(),
        Some(other) => {
            return Err(ApiError::field(
                "format",
                format!("format: unknown {other:?}; known: json, csv"),
            ))
        }
    })
}
