//! The HTML pages, rendered on the server from the same functions the API answers with.
//! Every form is a plain HTML form (it works without JavaScript); `static/app.js` adds the
//! live progress (server-sent events) and E3's client. Every value from a run or a request is
//! escaped; forms carry the CSRF token.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Multipart, Path, Query, State};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Extension;
use axum::Router;
use http::{header, StatusCode};
use meshbench_report::{html_escape as esc, table_html};
use meshbench_results::{MeshVerification, RunResult, Verdict, VerifyReport};

use crate::api::{self, ApiError, CompareQuery, CostQuery, NewRun, NewVerification};
use crate::catalog;
use crate::guard::{self, CSRF_FIELD};
use crate::jobs::JobSnapshot;
use crate::sessions::Caller;
use crate::state::AppState;

type Shared = State<Arc<AppState>>;

const APP_CSS: &str = include_str!("../static/app.css");
const APP_JS: &str = include_str!("../static/app.js");

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/", get(runs_page))
        .route("/runs/new", get(new_run_page))
        .route("/runs", post(submit_run))
        .route("/runs/{id}", get(run_page))
        .route("/runs/{id}/cancel", post(cancel_run))
        .route("/runs/{id}/cost", get(cost_page))
        .route("/runs/{id}/files/{*name}", get(run_file))
        .route("/compare", get(compare_page))
        .route("/verify", get(verify_page).post(submit_verification))
        .route("/verify/{id}", get(verification_page))
        .route("/verify/{id}/cancel", post(cancel_run))
        .route("/e3", get(e3_page))
        .route("/login", get(login_get).post(login_post))
        .route("/logout", post(logout))
        .route(
            "/static/app.css",
            get(|| async { static_file(APP_CSS, "text/css; charset=utf-8") }),
        )
        .route(
            "/static/app.js",
            get(|| async { static_file(APP_JS, "text/javascript; charset=utf-8") }),
        )
}

fn static_file(body: &'static str, content_type: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

const NAV: [(&str, &str); 5] = [
    ("/", "Runs"),
    ("/runs/new", "New run"),
    ("/compare", "Compare"),
    ("/verify", "Verify"),
    ("/e3", "E3 experimenter"),
];

/// The page around `body`.
fn page(caller: &Caller, status: StatusCode, title: &str, active: &str, body: &str) -> Response {
    let mut nav = String::new();
    for (href, label) in NAV {
        let current = if href == active {
            " aria-current=\"page\""
        } else {
            ""
        };
        let _ = write!(nav, "<a href=\"{href}\"{current}>{label}</a>");
    }
    // Only a logged-in browser gets a CSRF token, and a way to log out; the login page and
    // the 401 page carry neither (and no navigation: it would lead back to the login).
    let (csrf_meta, logout) = match caller.csrf() {
        Some(csrf) => (
            format!("<meta name=\"csrf-token\" content=\"{}\">", esc(csrf)),
            format!(
                "<form method=\"post\" action=\"/logout\" class=\"logout\">{}<button type=\"submit\" id=\"logout\">Log out</button></form>",
                csrf_input(caller)
            ),
        ),
        None => (String::new(), String::new()),
    };
    if *caller == Caller::Anonymous {
        nav.clear();
    }
    let html = format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         {csrf_meta}\
         <title>{title} · meshbench</title>\
         <link rel=\"stylesheet\" href=\"/static/app.css\">\
         <script src=\"/static/app.js\" defer></script></head>\
         <body><a class=\"skip\" href=\"#main\">Skip to content</a>\
         <header><nav aria-label=\"main\"><span class=\"brand\">meshbench</span>{nav}\
         <a href=\"/api/openapi.json\">API</a>{logout}</nav></header>\
         <main id=\"main\"><h1>{title}</h1>\n{body}</main></body></html>\n",
        title = esc(title),
    );
    (
        status,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; frame-ancestors 'none'",
            ),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        Html(html),
    )
        .into_response()
}

/// A form's CSRF field: a session's token (a bearer caller needs none).
fn csrf_input(caller: &Caller) -> String {
    caller
        .csrf()
        .map(|csrf| {
            format!(
                "<input type=\"hidden\" name=\"{CSRF_FIELD}\" value=\"{}\">",
                esc(csrf)
            )
        })
        .unwrap_or_default()
}

fn error_page(caller: &Caller, error: ApiError) -> Response {
    let title = if error.status == StatusCode::NOT_FOUND {
        "Not found"
    } else {
        "Error"
    };
    page(
        caller,
        error.status,
        title,
        "",
        &format!(
            "<p class=\"error\" role=\"alert\">{}</p>",
            esc(&error.error)
        ),
    )
}

fn badge(status: &str) -> String {
    format!("<span class=\"badge status-{0}\">{0}</span>", esc(status))
}

fn form_fields(body: &[u8]) -> HashMap<String, Vec<String>> {
    let mut fields: HashMap<String, Vec<String>> = HashMap::new();
    for (k, v) in form_urlencoded::parse(body) {
        fields
            .entry(k.into_owned())
            .or_default()
            .push(v.into_owned());
    }
    fields
}

fn first<'f>(fields: &'f HashMap<String, Vec<String>>, name: &str) -> Option<&'f str> {
    fields.get(name).and_then(|v| v.first()).map(String::as_str)
}

// ---- runs ----

async fn runs_page(State(state): Shared, Extension(caller): Extension<Caller>) -> Response {
    let runs = api::all_runs(&state);
    let mut body = String::new();
    if runs.is_empty() {
        body.push_str("<p>No runs yet in this results directory. <a href=\"/runs/new\">Start one</a>, or run <code>meshbench run</code>: its results show up here.</p>");
    } else {
        body.push_str("<table class=\"runs\"><caption>Runs, newest first</caption><thead><tr><th scope=\"col\">Run</th><th scope=\"col\">Profile</th><th scope=\"col\">Backend</th><th scope=\"col\">Status</th><th scope=\"col\">Started</th><th scope=\"col\">Scenarios</th><th scope=\"col\">Cells</th><th scope=\"col\">Verified</th></tr></thead><tbody>");
        for run in &runs {
            let text = |key: &str| run[key].as_str().unwrap_or("").to_owned();
            let id = text("id");
            let scenarios = run["scenarios"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default();
            let cells = match (run["cells_done"].as_u64(), run["cells_total"].as_u64()) {
                (Some(done), Some(total)) => format!("{done}/{total}"),
                (Some(done), None) => done.to_string(),
                _ => String::new(),
            };
            let _ = write!(
                body,
                "<tr><td><a href=\"/runs/{id}\">{id}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&text("profile")),
                esc(&text("platform")),
                badge(&text("status")),
                esc(&text("started_at")),
                esc(&scenarios),
                esc(&cells),
                run["verify"].as_str().map(badge).unwrap_or_default(),
                id = esc(&id),
            );
        }
        body.push_str("</tbody></table>");
    }
    page(&caller, StatusCode::OK, "Runs", "/", &body)
}

/// What the new-run form shows: the values given, and the error at its field.
#[derive(Debug, Default)]
struct RunForm {
    new: NewRun,
    spec_text: String,
}

#[derive(serde::Deserialize)]
struct NewRunQuery {
    profile: Option<String>,
    edit: Option<String>,
}

async fn new_run_page(
    State(state): Shared,
    Extension(caller): Extension<Caller>,
    Query(q): Query<NewRunQuery>,
) -> Response {
    let mut form = RunForm::default();
    form.new.profile = q.profile.clone();
    if q.edit.is_some() {
        let name = q.profile.as_deref().unwrap_or("quick");
        match meshbench_experiment::builtin_spec(name) {
            Ok(spec) => form.spec_text = spec.to_owned(),
            Err(e) => {
                return render_new_run(
                    &state,
                    &caller,
                    &form,
                    Some(&ApiError::field("profile", e.to_string())),
                )
            }
        }
    }
    render_new_run(&state, &caller, &form, None)
}

fn field_error(error: Option<&ApiError>, field: &str) -> (String, String) {
    match error.filter(|e| e.field.as_deref() == Some(field)) {
        Some(e) => (
            format!(
                "<p class=\"field-error\" id=\"error-{field}\" role=\"alert\">{}</p>",
                esc(&e.error)
            ),
            format!(" aria-invalid=\"true\" aria-describedby=\"error-{field}\""),
        ),
        None => (String::new(), String::new()),
    }
}

fn render_new_run(
    state: &AppState,
    caller: &Caller,
    form: &RunForm,
    error: Option<&ApiError>,
) -> Response {
    let new = &form.new;
    let mut options = String::new();
    let chosen = new.profile.as_deref().unwrap_or("quick");
    for profile in api::builtin_profiles() {
        let selected = if profile.name == chosen {
            " selected"
        } else {
            ""
        };
        let _ = write!(
            options,
            "<option value=\"{0}\"{selected} data-scenarios=\"{1}\" data-placements=\"{2}\">{0} ({3} cells, about {4} s)</option>",
            esc(&profile.name),
            esc(&profile.scenarios.join(",")),
            esc(&profile.placements.join(",")),
            profile.cells,
            profile.estimated_seconds,
        );
    }
    let (profile_err, profile_aria) = field_error(error, "profile");
    let (spec_err, spec_aria) = field_error(error, "spec");
    let (scen_err, scen_aria) = field_error(error, "scenarios");
    let (plac_err, plac_aria) = field_error(error, "placements");
    let (dur_err, dur_aria) = field_error(error, "duration");
    let (warm_err, warm_aria) = field_error(error, "warmup");
    let (back_err, back_aria) = field_error(error, "backend");
    let (scale_err, scale_aria) = field_error(error, "scale");
    let general = match error {
        Some(e)
            if !matches!(
                e.field.as_deref(),
                Some(
                    "profile"
                        | "spec"
                        | "scenarios"
                        | "placements"
                        | "duration"
                        | "warmup"
                        | "backend"
                        | "scale"
                )
            ) =>
        {
            format!("<p class=\"error\" role=\"alert\">{}</p>", esc(&e.error))
        }
        _ => String::new(),
    };
    let backend = new
        .backend
        .as_deref()
        .unwrap_or(meshbench_netlab::Backend::default_here().name());
    let backend_option = |name: &str, label: &str| {
        let selected = if backend == name { " selected" } else { "" };
        format!("<option value=\"{name}\"{selected}>{label}</option>")
    };
    let scale = new.scale.as_deref().unwrap_or("local");
    let body = format!(
        "{general}<form method=\"post\" action=\"/runs\" enctype=\"multipart/form-data\" class=\"stack\" id=\"new-run\">{csrf}\
         <fieldset><legend>What to run</legend>\
         <label for=\"profile\">Built-in profile</label>\
         <select id=\"profile\" name=\"profile\"{profile_aria}>{options}</select>{profile_err}\
         <p class=\"hint\"><a href=\"/runs/new?profile={chosen_q}&amp;edit=1\" id=\"edit-profile\">Edit this profile's spec</a> (fills the editor below)</p>\
         <label for=\"spec\">Or a spec of your own (YAML; used instead of the profile when not empty)</label>\
         <textarea id=\"spec\" name=\"spec\" rows=\"14\" spellcheck=\"false\"{spec_aria}>{spec}</textarea>\
         <label for=\"spec-file\">Or upload a spec file</label>\
         <input type=\"file\" id=\"spec-file\" name=\"spec_file\" accept=\".yaml,.yml,text/yaml\">{spec_err}\
         </fieldset>\
         <fieldset><legend>Settings</legend>\
         <label for=\"scenarios\">Scenarios (comma-separated; empty: all of the profile's)</label>\
         <input id=\"scenarios\" name=\"scenarios\" value=\"{scenarios}\"{scen_aria}>{scen_err}\
         <label for=\"placements\">Placements (intra-node, inter-node; empty: all)</label>\
         <input id=\"placements\" name=\"placements\" value=\"{placements}\"{plac_aria}>{plac_err}\
         <label for=\"duration\">Measured duration of each cell (empty: the profile's)</label>\
         <input id=\"duration\" name=\"duration\" value=\"{duration}\" placeholder=\"e.g. 10s\"{dur_aria}>{dur_err}\
         <label for=\"warmup\">Warm-up of each cell (empty: the profile's)</label>\
         <input id=\"warmup\" name=\"warmup\" value=\"{warmup}\" placeholder=\"e.g. 1s\"{warm_aria}>{warm_err}\
         <label for=\"scale\">Scale</label>\
         <select id=\"scale\" name=\"scale\"{scale_aria}><option value=\"local\"{local_sel}>local (sized for this machine)</option><option value=\"original\"{orig_sel}>original (the study's loads)</option></select>{scale_err}\
         <label for=\"backend\">Backend</label>\
         <select id=\"backend\" name=\"backend\"{back_aria}>{netns}{loopback}{kubernetes}</select>{back_err}\
         <label class=\"check\"><input type=\"checkbox\" id=\"pin\" name=\"pin\" value=\"1\"{pin}> Pin the load generator to CPU 0 and the system under test to the others</label>\
         </fieldset>\
         <p>One run measures at a time; a run started while another measures waits in the queue.</p>\
         <button type=\"submit\" id=\"start\">Start the run</button></form>",
        csrf = csrf_input(caller),
        chosen_q = esc(chosen),
        spec = esc(&form.spec_text),
        scenarios = esc(&new.scenarios.join(",")),
        placements = esc(&new.placements.join(",")),
        duration = esc(new.duration.as_deref().unwrap_or("")),
        warmup = esc(new.warmup.as_deref().unwrap_or("")),
        local_sel = if scale == "local" { " selected" } else { "" },
        orig_sel = if scale == "original" { " selected" } else { "" },
        netns = backend_option("netns", "netns (nodes and pods as network namespaces; needs root)"),
        loopback = backend_option("loopback", "loopback (pods on 127.x addresses)"),
        kubernetes = if state.cluster {
            backend_option("kubernetes", "kubernetes (the cluster serve was given)")
        } else {
            String::new()
        },
        pin = if new.pin { " checked" } else { "" },
    );
    let status = form_status(error.is_some());
    page(caller, status, "New run", "/runs/new", &body)
}

async fn submit_run(
    State(state): Shared,
    Extension(caller): Extension<Caller>,
    mut multipart: Multipart,
) -> Response {
    let mut form = RunForm::default();
    let mut csrf = None;
    let mut upload = String::new();
    loop {
        let field = match multipart.next_field().await {
            Ok(Some(field)) => field,
            Ok(None) => break,
            Err(e) => {
                return render_new_run(
                    &state,
                    &caller,
                    &form,
                    Some(&ApiError::field(
                        "spec",
                        format!("the form could not be read: {e}"),
                    )),
                )
            }
        };
        let name = field.name().unwrap_or("").to_owned();
        let text = match field.bytes().await {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(e) => {
                return render_new_run(
                    &state,
                    &caller,
                    &form,
                    Some(&ApiError::field(
                        "spec",
                        format!(
                            "the form could not be read: {e} (a spec may be at most {} KiB)",
                            api::BODY_LIMIT / 1024
                        ),
                    )),
                )
            }
        };
        match name.as_str() {
            CSRF_FIELD => csrf = Some(text),
            "profile" => form.new.profile = Some(text),
            "spec" => form.spec_text = text,
            "spec_file" => upload = text,
            "scenarios" => form.new.scenarios = vec![text],
            "placements" => form.new.placements = vec![text],
            "duration" => form.new.duration = Some(text),
            "warmup" => form.new.warmup = Some(text),
            "scale" => form.new.scale = Some(text),
            "backend" => form.new.backend = Some(text),
            "pin" => form.new.pin = true,
            _ => {}
        }
    }
    if let Err(e) = guard::check_form_csrf(&caller, csrf.as_deref()) {
        return error_page(&caller, e);
    }
    // An uploaded file wins over the editor; the editor then shows what was uploaded.
    if !upload.trim().is_empty() {
        form.spec_text = upload;
    }
    form.new.spec = Some(form.spec_text.clone());
    let submitted = api::parse_off_the_workers(&state, form.new.clone())
        .await
        .and_then(|job| api::submit(&state, job));
    after_submit(submitted, "/runs", |e| {
        render_new_run(&state, &caller, &form, Some(e))
    })
}

async fn run_page(
    State(state): Shared,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Response {
    let Some(view) = api::run_view(&state, &id) else {
        return error_page(&caller, ApiError::not_found(format!("no run {id:?}")));
    };
    let mut body = String::new();
    let job = view.job.as_ref();
    let status = job
        .filter(|j| !j.status.finished())
        .map(|j| j.status.name().to_owned())
        .or_else(|| view.summary.as_ref().map(|s| s.status.clone()))
        .or_else(|| job.map(|j| j.status.name().to_owned()))
        .unwrap_or_default();
    body.push_str("<dl class=\"facts\">");
    let _ = write!(
        body,
        "<dt>Status</dt><dd id=\"status\">{}</dd>",
        badge(&status)
    );
    let reason = view
        .summary
        .as_ref()
        .and_then(|s| s.status_reason.clone())
        .or_else(|| job.and_then(|j| j.reason.clone()));
    if let Some(reason) = reason.filter(|_| status != "complete") {
        let _ = write!(body, "<dt>Why</dt><dd id=\"reason\">{}</dd>", esc(&reason));
    }
    if let Some(s) = &view.summary {
        let _ = write!(
            body,
            "<dt>Profile</dt><dd>{}</dd><dt>Backend</dt><dd>{}</dd><dt>Started</dt><dd>{}</dd><dt>Finished</dt><dd>{}</dd><dt>Scenarios</dt><dd>{}</dd><dt>Cells</dt><dd id=\"cells-done\">{}{}</dd>",
            esc(&s.profile),
            esc(&s.platform),
            esc(&s.started_at),
            esc(s.finished_at.as_deref().unwrap_or("")),
            esc(&s.scenarios.join(", ")),
            s.cells_done,
            s.cells_total.map(|t| format!(" of {t}")).unwrap_or_default(),
        );
        if let Some(verify) = &s.verify {
            let _ = write!(body, "<dt>Verified</dt><dd>{}</dd>", badge(verify));
        }
    }
    body.push_str("</dl>");
    if let Some(job) = job.filter(|j| !j.status.finished()) {
        body.push_str(&progress_section(
            &caller,
            job,
            &format!("/runs/{}/cancel", esc(&id)),
        ));
    }
    let on_disk = catalog::run_dir(&state.results_dir, &id)
        .and_then(|dir| catalog::read_run(&dir).ok().map(|r| (dir, r)));
    if let Some((dir, result)) = on_disk {
        let running = job.is_some_and(|j| !j.status.finished());
        // A finished run opens with what it found: the sentences, the findings' verdicts and
        // the main charts; the cells, downloads and the full report follow.
        let result = Arc::new(result);
        if !running && !result.cells.is_empty() {
            body.push_str(&glance_off_the_workers(result.clone()).await);
        }
        if !result.cells.is_empty() {
            body.push_str("<h2 id=\"finished-cells\">Finished cells</h2><table id=\"cells\"><thead><tr><th scope=\"col\">#</th><th scope=\"col\">Cell</th><th scope=\"col\">Achieved rps</th><th scope=\"col\">p50 ms</th><th scope=\"col\">p99 ms</th><th scope=\"col\">Not 2xx</th></tr></thead><tbody>");
            for (i, cell) in result.cells.iter().enumerate() {
                let _ = write!(
                    body,
                    "<tr><td>{}</td><td>{}</td><td>{:.1}</td><td>{:.3}</td><td>{:.3}</td><td>{}</td></tr>",
                    i + 1,
                    esc(&catalog::cell_label(cell)),
                    cell.load.achieved_rps,
                    cell.load.latency.p50_us as f64 / 1e3,
                    cell.load.latency.p99_us as f64 / 1e3,
                    meshbench_report::tables::error_count(cell),
                );
            }
            body.push_str("</tbody></table>");
        }
        if !running {
            let files = catalog::run_files(&dir, &result);
            body.push_str("<h2>Downloads</h2><ul class=\"downloads\" id=\"downloads\">");
            for f in &files {
                let _ = write!(
                    body,
                    "<li><a href=\"/runs/{id}/files/{name}\">{name}</a> <span class=\"hint\">{desc}</span></li>",
                    id = esc(&id),
                    name = esc(&f.name),
                    desc = esc(&f.description),
                );
            }
            body.push_str("</ul>");
            let _ = write!(
                body,
                "<p><a href=\"/runs/{0}/cost\">Cost of this run's overhead</a> · <a href=\"/compare?a={0}\">Compare with another run</a></p>",
                esc(&id)
            );
            if dir.has("report.html") {
                let _ = write!(
                    body,
                    "<h2>Report</h2><iframe id=\"report\" class=\"report\" title=\"the run's report\" src=\"/runs/{}/files/report.html\" sandbox=\"allow-same-origin\"></iframe>",
                    esc(&id)
                );
            }
        }
    }
    page(&caller, StatusCode::OK, &format!("Run {id}"), "/", &body)
}

/// The report's opening for a finished run (`meshbench_report::glance_html`), computed on a
/// blocking thread: the analysis bootstraps every group's per-second series.
async fn glance_off_the_workers(result: Arc<RunResult>) -> String {
    tokio::task::spawn_blocking(move || {
        let analysis = meshbench_report::Analysis::of(&result);
        meshbench_report::glance_html(
            &meshbench_report::glance(&result, &analysis),
            &meshbench_report::charts(&analysis),
        )
    })
    .await
    .unwrap_or_else(|e| {
        format!(
            "<p class=\"error\">The summary could not be computed: {}</p>",
            esc(&e.to_string())
        )
    })
}

/// The live part of a job's page: progress, the running cell's seconds, the lab's events, a
/// cancel button. `static/app.js` keeps it current from the event stream; without JavaScript
/// it is the state when the page was loaded (reload to refresh).
fn progress_section(caller: &Caller, job: &JobSnapshot, cancel: &str) -> String {
    let percent = (job.done * 100).checked_div(job.total).unwrap_or(0);
    let eta = job
        .eta_seconds
        .map(|s| {
            format!(
                "ETA {}",
                humantime::format_duration(std::time::Duration::from_secs(s.round() as u64))
            )
        })
        .unwrap_or_default();
    let mut log = String::new();
    for line in job.log.iter().rev().take(50).rev() {
        let _ = write!(
            log,
            "<li class=\"log-{}\">{}</li>",
            esc(&line.level),
            esc(&line.text)
        );
    }
    let verify = job.kind == "verify";
    let unit = if verify { "cases" } else { "cells" };
    // A verification has no load to chart; cancelling it keeps nothing (its verdicts are
    // written once every case is done).
    let live = if verify {
        ""
    } else {
        "<div class=\"live\"><svg id=\"live-chart\" viewBox=\"0 0 600 160\" role=\"img\" aria-label=\"the running cell's p50 and p99 per second\"></svg>\
         <table id=\"live\"><caption>The running cell, per second</caption><thead><tr><th scope=\"col\">Second</th><th scope=\"col\">Achieved rps</th><th scope=\"col\">p50 ms</th><th scope=\"col\">p99 ms</th><th scope=\"col\">Failures</th></tr></thead><tbody></tbody></table></div>"
    };
    let cancel_label = if verify {
        "Cancel (the verification is abandoned and its lab torn down)"
    } else {
        "Cancel (finished cells are kept)"
    };
    format!(
        "<section id=\"progress-section\" data-events=\"/api/runs/{id}/events\" data-unit=\"{unit}\" aria-live=\"polite\">\
         <h2>Progress</h2>\
         <p><progress id=\"progress\" max=\"{total}\" value=\"{done}\">{percent}%</progress> \
         <span id=\"progress-text\">{done}/{total} {unit} ({percent}%)</span> <span id=\"eta\">{eta}</span></p>\
         <p id=\"current\">{current}</p>{live}\
         <h3>Lab events</h3><ol id=\"log\" class=\"log\">{log}</ol>\
         <form method=\"post\" action=\"{cancel}\">{csrf}<button type=\"submit\" id=\"cancel\" class=\"danger\">{cancel_label}</button></form>\
         </section>",
        id = esc(&job.id),
        total = job.total,
        done = job.done,
        current = esc(job.current.as_deref().unwrap_or(if job.status == crate::jobs::JobStatus::Queued { "queued: waiting for the run before it" } else { "" })),
        csrf = csrf_input(caller),
    )
}

async fn cancel_run(
    State(state): Shared,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    uri: http::Uri,
    body: Bytes,
) -> Response {
    let fields = form_fields(&body);
    if let Err(e) = guard::check_form_csrf(&caller, first(&fields, CSRF_FIELD)) {
        return error_page(&caller, e);
    }
    match api::cancel(&state, &id) {
        Ok(_) => {
            let back = if uri.path().starts_with("/verify/") {
                "verify"
            } else {
                "runs"
            };
            Redirect::to(&format!("/{back}/{id}")).into_response()
        }
        Err(e) => error_page(&caller, e),
    }
}

async fn run_file(
    State(state): Shared,
    Extension(caller): Extension<Caller>,
    Path((id, name)): Path<(String, String)>,
) -> Response {
    api::file_response(&state, &id, &name).unwrap_or_else(|e| error_page(&caller, e))
}

async fn cost_page(
    State(state): Shared,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    Query(q): Query<CostQuery>,
) -> Response {
    if catalog::run_dir(&state.results_dir, &id).is_none() {
        return error_page(
            &caller,
            ApiError::not_found(format!("no run {id:?} with results")),
        );
    }
    let asked = q.pods.is_some() || q.cpu_price.is_some() || q.mem_price.is_some();
    let outcome = match asked {
        true => {
            let (state, id, q) = (state.clone(), id.clone(), q.clone());
            let priced = move || api::cost_of(&state, &id, &q);
            Some(api::off_the_workers("pricing the run", priced).await)
        }
        false => None,
    };
    let error = outcome.as_ref().and_then(|o| o.as_ref().err());
    let (pods_err, pods_aria) = field_error(error, "pods");
    let (cpu_err, cpu_aria) = field_error(error, "cpu_price");
    let (mem_err, mem_aria) = field_error(error, "mem_price");
    let mut body = format!(
        "<p>The run's measured overhead per pod (CPU and memory of its mesh components against the baseline), priced as E5's model does.</p>\
         <form method=\"get\" action=\"/runs/{id}/cost\" class=\"inline-form\">\
         <label for=\"pods\">Pods</label><input id=\"pods\" name=\"pods\" inputmode=\"numeric\" value=\"{pods}\" required{pods_aria}>{pods_err}\
         <label for=\"cpu_price\">Price of a core per month</label><input id=\"cpu_price\" name=\"cpu_price\" inputmode=\"decimal\" value=\"{cpu}\" required{cpu_aria}>{cpu_err}\
         <label for=\"mem_price\">Price of a GiB per month</label><input id=\"mem_price\" name=\"mem_price\" inputmode=\"decimal\" value=\"{mem}\" required{mem_aria}>{mem_err}\
         <button type=\"submit\" id=\"cost\">Price it</button></form>",
        id = esc(&id),
        pods = esc(q.pods.as_deref().unwrap_or("100")),
        cpu = esc(q.cpu_price.as_deref().unwrap_or("25")),
        mem = esc(q.mem_price.as_deref().unwrap_or("3")),
    );
    if let Some(Ok(table)) = &outcome {
        body.push_str(&table_html(table));
    }
    let status = form_status(error.is_some());
    page(&caller, status, &format!("Cost of {id}"), "/", &body)
}

// ---- compare ----

async fn compare_page(
    State(state): Shared,
    Extension(caller): Extension<Caller>,
    Query(q): Query<CompareQuery>,
) -> Response {
    let runs = catalog::list_runs(&state.results_dir);
    let select = |name: &str, chosen: Option<&String>| {
        let mut out = format!(
            "<select id=\"{name}\" name=\"{name}\"><option value=\"\">choose a run</option>"
        );
        for run in &runs {
            let selected = if chosen.map(String::as_str) == Some(run.id.as_str()) {
                " selected"
            } else {
                ""
            };
            let _ = write!(
                out,
                "<option value=\"{0}\"{selected}>{0} ({1}, {2})</option>",
                esc(&run.id),
                esc(&run.profile),
                esc(&run.status)
            );
        }
        out.push_str("</select>");
        out
    };
    let asked = q.a.as_deref().is_some_and(|s| !s.is_empty())
        && q.b.as_deref().is_some_and(|s| !s.is_empty());
    let outcome = match asked {
        true => {
            let (state, q) = (state.clone(), q.clone());
            let compared = move || api::comparison(&state, &q);
            Some(api::off_the_workers("comparing the runs", compared).await)
        }
        false => None,
    };
    let error = outcome.as_ref().and_then(|o| o.as_ref().err());
    let (a_err, _) = field_error(error, "a");
    let (b_err, _) = field_error(error, "b");
    let mut body = format!(
        "<form method=\"get\" action=\"/compare\" class=\"inline-form\">\
         <label for=\"a\">A (the reference)</label>{sa}{a_err}\
         <label for=\"b\">B (compared with A)</label>{sb}{b_err}\
         <button type=\"submit\" id=\"compare\">Compare</button></form>",
        sa = select("a", q.a.as_ref()),
        sb = select("b", q.b.as_ref()),
    );
    if let Some(Ok((a, b, tables))) = &outcome {
        let _ = write!(
            body,
            "<p id=\"compared\">B <a href=\"/runs/{bid}\">{bid}</a> ({bp}) against A <a href=\"/runs/{aid}\">{aid}</a> ({ap}).</p>",
            aid = esc(&a.id),
            ap = esc(&a.profile),
            bid = esc(&b.id),
            bp = esc(&b.profile),
        );
        body.push_str("<div id=\"comparison\">");
        for table in tables {
            body.push_str(&table_html(table));
        }
        body.push_str("</div>");
    }
    let status = form_status(error.is_some());
    page(&caller, status, "Compare two runs", "/compare", &body)
}

// ---- verify ----

async fn verify_page(State(state): Shared, Extension(caller): Extension<Caller>) -> Response {
    render_verify(&state, &caller, &[], None)
}

fn render_verify(
    state: &AppState,
    caller: &Caller,
    chosen: &[String],
    error: Option<&ApiError>,
) -> Response {
    let verifiable = api::verifiable();
    let mut boxes = String::new();
    for mesh in &verifiable {
        let checked = if chosen.iter().any(|c| c == mesh.name()) {
            " checked"
        } else {
            ""
        };
        let _ = write!(
            boxes,
            "<label class=\"check\"><input type=\"checkbox\" name=\"meshes\" value=\"{0}\" id=\"mesh-{0}\"{checked}> {0}</label>",
            esc(mesh.name())
        );
    }
    let (meshes_err, _) = field_error(error, "meshes");
    let general = match error {
        Some(e) if e.field.as_deref() != Some("meshes") => {
            format!("<p class=\"error\" role=\"alert\">{}</p>", esc(&e.error))
        }
        _ => String::new(),
    };
    let mut body = format!(
        "{general}<p>E3's zero-trust matrix for each mesh: who can reach whom (expected and observed), the wire between them (TLS or plaintext, and whether a marker leaked), and identity checks. It needs the netns backend.</p>\
         <form method=\"post\" action=\"/verify\" class=\"stack\">{csrf}<fieldset><legend>Meshes (none checked: every data plane)</legend>{boxes}</fieldset>{meshes_err}\
         <button type=\"submit\" id=\"start-verify\">Verify</button></form>",
        csrf = csrf_input(caller),
    );
    let jobs: Vec<JobSnapshot> = state
        .jobs
        .list()
        .into_iter()
        .filter(|j| j.kind == "verify")
        .collect();
    let done = catalog::list_verifications(&state.results_dir);
    if !jobs.is_empty() || !done.is_empty() {
        body.push_str("<h2>Verifications</h2><table><thead><tr><th scope=\"col\">Verification</th><th scope=\"col\">Meshes</th><th scope=\"col\">Verdict</th></tr></thead><tbody>");
        for job in jobs.iter().filter(|j| !done.iter().any(|d| d.id == j.id)) {
            let _ = write!(
                body,
                "<tr><td><a href=\"/verify/{0}\">{0}</a></td><td></td><td>{1}</td></tr>",
                esc(&job.id),
                badge(job.status.name())
            );
        }
        for v in &done {
            let _ = write!(
                body,
                "<tr><td><a href=\"/verify/{0}\">{0}</a></td><td>{1}</td><td>{2}</td></tr>",
                esc(&v.id),
                esc(&v.meshes.join(", ")),
                badge(if v.passed { "passed" } else { "failed" })
            );
        }
        body.push_str("</tbody></table>");
    }
    let status = form_status(error.is_some());
    page(caller, status, "Verify", "/verify", &body)
}

async fn submit_verification(
    State(state): Shared,
    Extension(caller): Extension<Caller>,
    body: Bytes,
) -> Response {
    let fields = form_fields(&body);
    if let Err(e) = guard::check_form_csrf(&caller, first(&fields, CSRF_FIELD)) {
        return error_page(&caller, e);
    }
    let meshes = fields.get("meshes").cloned().unwrap_or_default();
    let new = NewVerification {
        meshes: meshes.clone(),
    };
    let submitted = api::verification_of(&new).and_then(|job| api::submit(&state, job));
    after_submit(submitted, "/verify", |e| {
        render_verify(&state, &caller, &meshes, Some(e))
    })
}

async fn verification_page(
    State(state): Shared,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Response {
    let job = state.jobs.snapshot(&id).filter(|j| j.kind == "verify");
    let report =
        catalog::verify_dir(&state.results_dir, &id).map(|dir| catalog::read_verification(&dir));
    let mut body = String::new();
    match (&job, &report) {
        (None, None) => {
            return error_page(
                &caller,
                ApiError::not_found(format!("no verification {id:?}")),
            )
        }
        (Some(job), _) if !job.status.finished() => {
            let _ = write!(
                body,
                "<dl class=\"facts\"><dt>Status</dt><dd id=\"status\">{}</dd></dl>",
                badge(job.status.name())
            );
            body.push_str(&progress_section(
                &caller,
                job,
                &format!("/verify/{}/cancel", esc(&id)),
            ));
        }
        (_, Some(Ok(report))) => body.push_str(&matrix(report)),
        (_, Some(Err(why))) => {
            let _ = write!(
                body,
                "<p class=\"error\">verify.json cannot be read: {}</p>",
                esc(why)
            );
        }
        (Some(job), None) => {
            let _ = write!(
                body,
                "<dl class=\"facts\"><dt>Status</dt><dd id=\"status\">{}</dd><dt>Why</dt><dd>{}</dd></dl>",
                badge(job.status.name()),
                esc(job.reason.as_deref().unwrap_or(""))
            );
        }
    }
    page(
        &caller,
        StatusCode::OK,
        &format!("Verification {id}"),
        "/verify",
        &body,
    )
}

fn verdict_class(v: Verdict) -> &'static str {
    match v {
        Verdict::Pass => "pass",
        Verdict::Fail => "fail",
    }
}

/// The reachability matrix of each mesh: a row per case, a column per probe, each cell
/// coloured by its verdict with the observed and expected outcome and its wire evidence.
fn matrix(report: &VerifyReport) -> String {
    let mut out = format!(
        "<p>Overall: {} · {} · <a href=\"#identity\">identity checks</a></p>",
        badge(if report.passed { "passed" } else { "failed" }),
        esc(&report.started_at)
    );
    for mesh in &report.meshes {
        out.push_str(&mesh_matrix(mesh));
    }
    out
}

fn mesh_matrix(mesh: &MeshVerification) -> String {
    let mut out = format!(
        "<section class=\"mesh\"><h2>{}</h2><p>{}</p>",
        esc(&mesh.mesh),
        esc(&mesh.description)
    );
    if let Some(error) = &mesh.error {
        let _ = write!(out, "<p class=\"error\">not verified: {}</p>", esc(error));
    }
    for note in &mesh.notes {
        let _ = write!(out, "<p class=\"hint\">{}</p>", esc(note));
    }
    let mut probes: Vec<(String, String)> = vec![];
    for case in &mesh.cases {
        for p in &case.probes {
            let key = (p.from.clone(), p.to.clone());
            if !probes.contains(&key) {
                probes.push(key);
            }
        }
    }
    if !probes.is_empty() {
        out.push_str("<table class=\"matrix\"><thead><tr><th scope=\"col\">Case</th>");
        for (from, to) in &probes {
            let _ = write!(out, "<th scope=\"col\">{} → {}</th>", esc(from), esc(to));
        }
        out.push_str("</tr></thead><tbody>");
        for case in &mesh.cases {
            let _ = write!(
                out,
                "<tr><th scope=\"row\">{}. {}<br><span class=\"hint\">meshed: {}</span></th>",
                case.case,
                esc(&case.title),
                if case.meshed.is_empty() {
                    "nothing".to_owned()
                } else {
                    esc(&case.meshed.join(", "))
                }
            );
            for (from, to) in &probes {
                let Some(p) = case.probes.iter().find(|p| &p.from == from && &p.to == to) else {
                    out.push_str("<td></td>");
                    continue;
                };
                let allowed = |a: bool| if a { "allowed" } else { "denied" };
                let mut evidence = format!(
                    "<dl><dt>request</dt><dd>{}</dd><dt>expected</dt><dd>{} ({})</dd><dt>observed</dt><dd>{}</dd>",
                    esc(&p.request),
                    allowed(p.expected_allowed),
                    esc(&p.expected_reason),
                    esc(&p.observed)
                );
                if let Some(note) = &p.note {
                    let _ = write!(evidence, "<dt>note</dt><dd>{}</dd>", esc(note));
                }
                if let Some(w) = &p.wire {
                    let _ = write!(
                        evidence,
                        "<dt>wire ({})</dt><dd class=\"verdict-{}\">{} of {} connections TLS{}; marker {}; encryption {}{}</dd>",
                        esc(&w.capture_point),
                        verdict_class(w.verdict),
                        w.tls_connections,
                        w.connections,
                        if w.tls_versions.is_empty() {
                            String::new()
                        } else {
                            format!(" ({})", esc(&w.tls_versions.join(", ")))
                        },
                        if w.marker_seen { "seen in clear" } else { "not seen" },
                        if w.encryption_expected { "expected" } else { "not expected" },
                        w.note.as_ref().map(|n| format!("; {}", esc(n))).unwrap_or_default(),
                    );
                }
                evidence.push_str("</dl>");
                let _ = write!(
                    out,
                    "<td class=\"verdict-{cls}\"><strong>{verdict}</strong> {observed}<br><span class=\"hint\">expected {expected}</span><details><summary>evidence</summary>{evidence}</details></td>",
                    cls = verdict_class(p.verdict),
                    verdict = if p.verdict == Verdict::Pass { "PASS" } else { "FAIL" },
                    observed = allowed(p.observed_allowed),
                    expected = allowed(p.expected_allowed),
                );
            }
            out.push_str("</tr>");
        }
        out.push_str("</tbody></table>");
    }
    if !mesh.identity.is_empty() {
        out.push_str("<h3 id=\"identity\">Identity checks</h3><table><thead><tr><th scope=\"col\">Check</th><th scope=\"col\">Expected</th><th scope=\"col\">Observed</th><th scope=\"col\">Server identity</th><th scope=\"col\">Verdict</th></tr></thead><tbody>");
        for c in &mesh.identity {
            let _ = write!(
                out,
                "<tr><td>{}<br><span class=\"hint\">{}</span></td><td>{}</td><td>{}</td><td>{}</td><td class=\"verdict-{}\">{}</td></tr>",
                esc(&c.name),
                esc(&c.description),
                esc(&c.expected),
                esc(&c.observed),
                esc(c.server_id.as_deref().unwrap_or("")),
                verdict_class(c.verdict),
                if c.verdict == Verdict::Pass { "PASS" } else { "FAIL" },
            );
        }
        out.push_str("</tbody></table>");
    }
    out.push_str("</section>");
    out
}

// ---- E3 ----

async fn e3_page(Extension(caller): Extension<Caller>) -> Response {
    let ops = ["sum", "subtraction", "multiplication", "division"]
        .iter()
        .map(|op| format!("<label class=\"check\"><input type=\"checkbox\" name=\"allowedOperations\" value=\"{op}\" id=\"op-{op}\" checked> {op}</label>"))
        .collect::<String>();
    let body = format!(
        "<p>E3's experimenter, as the study's frontend had it: it sends the requests one at a time to E3's calculator (started by this server on loopback), in groups with a pause between groups, and shows every round-trip time. The calculator behind a mesh is the <a href=\"/runs/new?profile=zero-trust-app\">zero-trust-app</a> profile.</p>\
         <noscript><p class=\"error\">This page needs JavaScript (it downloads and loads JSON in the browser); the same experiment is <code>POST /api/e3/experiment</code>.</p></noscript>\
         <form id=\"e3-form\" class=\"stack\">\
         <fieldset><legend>Experiment</legend>\
         <label for=\"e3-label\">Label</label><input id=\"e3-label\" name=\"label\" value=\"local, no mesh\">\
         <label for=\"e3-requests\">Requests</label><input id=\"e3-requests\" name=\"interactions\" type=\"number\" min=\"1\" max=\"{max}\" value=\"100\" required>\
         <label for=\"e3-group\">Group size</label><input id=\"e3-group\" name=\"batchSize\" type=\"number\" min=\"1\" value=\"10\" required>\
         <label for=\"e3-interval\">Interval between groups (ms)</label><input id=\"e3-interval\" name=\"intervalBetweenBatchesInMilliseconds\" type=\"number\" min=\"0\" value=\"0\" required>\
         </fieldset><fieldset><legend>Operations</legend>{ops}</fieldset>\
         <p class=\"field-error\" id=\"e3-error\" role=\"alert\" hidden></p>\
         <button type=\"submit\" id=\"e3-run\">Run the experiment</button>\
         <label for=\"e3-load\">Or load an earlier result (JSON)</label><input type=\"file\" id=\"e3-load\" accept=\".json,application/json\">\
         </form>\
         <section id=\"e3-result\" hidden aria-live=\"polite\"><h2 id=\"e3-title\">Result</h2>\
         <dl class=\"facts\"><dt>Requests</dt><dd id=\"e3-count\"></dd><dt>Failures</dt><dd id=\"e3-failures\"></dd><dt>Mean</dt><dd id=\"e3-mean\"></dd><dt>Median</dt><dd id=\"e3-median\"></dd><dt>Standard deviation</dt><dd id=\"e3-stddev\"></dd></dl>\
         <svg id=\"e3-histogram\" viewBox=\"0 0 600 200\" role=\"img\" aria-label=\"histogram of the RTTs\"></svg>\
         <p><a id=\"e3-download\" href=\"#\" download=\"experiment.json\">Download the result (JSON)</a></p>\
         <p><label class=\"check\"><input type=\"checkbox\" id=\"e3-discard\" checked> Leave out the first RTT (connection set-up), as E3 did</label> <button type=\"button\" id=\"e3-analyze\">Analyze</button></p>\
         <div id=\"e3-analysis\" hidden><table id=\"e3-stats\"><caption>Statistics (ms)</caption><tbody></tbody></table>\
         <p><a id=\"e3-csv\" href=\"#\" download=\"analysis.csv\">Download the analysis (CSV)</a></p></div>\
         <details><summary>Every RTT (ms)</summary><ol id=\"e3-rtts\" class=\"rtts\"></ol></details>\
         </section>",
        max = crate::e3::MAX_INTERACTIONS,
    );
    page(&caller, StatusCode::OK, "E3 experimenter", "/e3", &body)
}

// ---- login ----

pub fn login_page(status: StatusCode, error: Option<&str>) -> Response {
    let error = error
        .map(|e| {
            format!(
                "<p class=\"field-error\" id=\"error-token\" role=\"alert\">{}</p>",
                esc(e)
            )
        })
        .unwrap_or_default();
    let body = format!(
        "<p>This server needs its token: open the login address <code>meshbench serve</code> \
         printed, or enter the token (from <code>--token-file</code> or <code>MESHBENCH_TOKEN</code>).</p>\
         <form method=\"post\" action=\"/login\" class=\"stack\"><label for=\"token\">Token</label>\
         <input id=\"token\" name=\"token\" type=\"password\" autocomplete=\"current-password\" required>{error}\
         <button type=\"submit\" id=\"login\">Sign in</button></form>"
    );
    let mut response = page(&Caller::Anonymous, status, "Sign in", "", &body);
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-store"),
    );
    response
}

#[derive(Debug, Default, serde::Deserialize)]
pub struct LoginQuery {
    token: Option<String>,
}

/// `GET /login`: the form, or, with `?token=`, the login URL serve printed.
async fn login_get(
    State(state): Shared,
    Extension(caller): Extension<Caller>,
    Query(q): Query<LoginQuery>,
) -> Response {
    match q.token {
        Some(token) => log_in(&state, &token),
        None if caller != Caller::Anonymous => Redirect::to("/").into_response(),
        None => login_page(StatusCode::OK, None),
    }
}

/// `POST /login`: the form.
async fn login_post(State(state): Shared, body: Bytes) -> Response {
    let fields = form_fields(&body);
    log_in(&state, first(&fields, "token").unwrap_or(""))
}

/// Trades the token for a session: a cookie with a random id, never the token itself. Failed
/// attempts are limited ([`crate::sessions::MAX_FAILED_LOGINS`] a minute), and a limited
/// attempt is refused before the token is compared.
fn log_in(state: &AppState, given: &str) -> Response {
    if let Err(wait) = state.sessions.login_allowed() {
        let mut response = login_page(
            StatusCode::TOO_MANY_REQUESTS,
            Some(&format!(
                "too many failed logins; try again in {} s",
                wait.as_secs().max(1)
            )),
        );
        if let Ok(value) = http::HeaderValue::from_str(&wait.as_secs().max(1).to_string()) {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
        return response;
    }
    if !guard::same_secret(given, &state.token) {
        state.sessions.login_failed();
        return login_page(StatusCode::UNAUTHORIZED, Some("wrong token"));
    }
    let (id, _) = state.sessions.open();
    let cookie = format!(
        "{}={id}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}",
        state.cookie_name,
        state.sessions.ttl().as_secs()
    );
    ([(header::SET_COOKIE, cookie)], Redirect::to("/")).into_response()
}

/// `POST /logout`: the session ends here and now, its cookie is cleared.
async fn logout(
    State(state): Shared,
    Extension(caller): Extension<Caller>,
    body: Bytes,
) -> Response {
    let fields = form_fields(&body);
    if let Err(e) = guard::check_form_csrf(&caller, first(&fields, CSRF_FIELD)) {
        return error_page(&caller, e);
    }
    if let Caller::Session { id, .. } = &caller {
        state.sessions.close(id);
    }
    let cookie = format!(
        "{}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0",
        state.cookie_name
    );
    ([(header::SET_COOKIE, cookie)], Redirect::to("/login")).into_response()
}

/// Where a submitted form goes: to its job's page under `pages` once queued, or back to the
/// form with the error (`again`).
fn after_submit(
    submitted: Result<String, ApiError>,
    pages: &str,
    again: impl FnOnce(&ApiError) -> Response,
) -> Response {
    match submitted {
        Ok(id) => Redirect::to(&format!("{pages}/{id}")).into_response(),
        Err(e) => again(&e),
    }
}

/// A form page's status: 400 when it is shown again with the error its input caused.
fn form_status(refused: bool) -> StatusCode {
    if refused {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    }
}
