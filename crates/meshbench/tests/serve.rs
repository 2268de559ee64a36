//! `meshbench serve`'s REST API, as a script uses it: runs started, watched over server-sent
//! events, cancelled and downloaded on the loopback lab; every endpoint of the OpenAPI
//! description answered; bad and hostile requests refused with the field named; the token
//! and the cross-site rules enforced.

mod serving;

use std::time::Duration;

use bytes::Bytes;
use http::{Method, StatusCode};
use serde_json::json;
use serving::{get, request, Serve};

/// Lab runs measure: one at a time in this binary, so they do not measure each other.
static LAB: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn lab() -> std::sync::MutexGuard<'static, ()> {
    LAB.lock().unwrap_or_else(|p| p.into_inner())
}

#[test]
fn a_run_started_over_the_api_streams_its_progress_and_serves_its_files() {
    let _lab = lab();
    let serve = Serve::start(&[]);
    let created = serve.post_json(
        &format!("{}/api/runs", serve.url),
        &json!({"profile": "smoke", "backend": "loopback", "duration": "1s",
                "scenarios": ["baseline", "meshbench-sidecar"]}),
    );
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text());
    let id = created.json()["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("smoke-"), "{id}");

    let seen = serve.events(
        &format!("{}/api/runs/{id}/events", serve.url),
        Duration::from_secs(120),
        |name, _| name == "done",
    );
    let named = |n: &'static str| {
        seen.iter()
            .filter(move |(name, _)| name == n)
            .map(|(_, v)| v)
    };
    assert_eq!(named("snapshot").count(), 1, "a snapshot first: {seen:?}");
    let done = named("done").next().unwrap();
    assert_eq!(done["status"], "complete", "{seen:?}");
    // Each cell's seconds arrive while it runs, with its achieved rate and latency.
    let seconds: Vec<_> = named("second").collect();
    assert!(seconds.len() >= 2, "{seen:?}");
    assert!(seconds
        .iter()
        .all(|s| s["achieved_rps"].as_u64().unwrap() > 0));
    assert!(seconds
        .iter()
        .all(|s| s["p99_ms"].as_f64().unwrap() >= s["p50_ms"].as_f64().unwrap()));
    let last_status = named("status").next_back().unwrap();
    assert_eq!(
        (last_status["done"].as_u64(), last_status["total"].as_u64()),
        (Some(4), Some(4))
    );
    assert!(
        named("log").any(|l| l["text"]
            .as_str()
            .unwrap()
            .starts_with("component started: ")),
        "the lab's events: {seen:?}"
    );

    let run = serve.get_path(&format!("/api/runs/{id}")).json();
    assert_eq!(run["status"], "complete");
    assert_eq!(run["cells_done"], 4);
    assert_eq!(run["platform"], "local-lab/loopback");
    let listed = serve.get_path("/api/runs").json();
    assert_eq!(listed[0]["id"], id);

    // The run's own files, and each cell as Fortio and SMP documents.
    let file = |name: &str| serve.get_path(&format!("/api/runs/{id}/files/{name}"));
    let report = file("report.html");
    assert_eq!(report.status, StatusCode::OK);
    assert!(report.text().contains("<svg"), "the report has its charts");
    let results = file("results.json").json();
    assert_eq!(results["cells"].as_array().unwrap().len(), 4);
    let files = serve
        .get(&format!("{}/api/runs/{id}/files", serve.url))
        .json();
    let names: Vec<&str> = files
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    let fortio = names
        .iter()
        .find(|n| n.starts_with("export/fortio/"))
        .unwrap();
    let fortio = file(fortio).json();
    assert!(fortio["DurationHistogram"]["Count"].as_u64().unwrap() > 0);
    assert_eq!(fortio["RequestedQPS"], "200");
    let smp = names
        .iter()
        .find(|n| n.starts_with("export/smp/") && n.contains("meshbench-sidecar"))
        .unwrap();
    let smp = file(smp).json();
    assert!(smp["result"]["latenciesMs"]["p99"].as_f64().unwrap() > 0.0);
    assert_eq!(smp["meshConfig"]["sidecar"]["count"], 2, "{smp}");
    assert!(smp["meshConfig"]["sidecar"]["memMb"].as_i64().unwrap() > 0);

    // The CLI writes the same documents.
    let cli = std::process::Command::new(env!("CARGO_BIN_EXE_meshbench"))
        .args(["export", "--format", "smp"])
        .arg(serve.results.join(&id))
        .output()
        .unwrap();
    meshbench_testkit::assert_success(&cli);
    assert_eq!(String::from_utf8_lossy(&cli.stdout).lines().count(), 4);
}

#[test]
fn cancelling_keeps_the_finished_cells_and_marks_the_run_partial() {
    let _lab = lab();
    let serve = Serve::start(&[]);
    let start = |body: serde_json::Value| {
        let created = serve.post_json(&format!("{}/api/runs", serve.url), &body);
        assert_eq!(created.status, StatusCode::CREATED, "{}", created.text());
        created.json()["id"].as_str().unwrap().to_owned()
    };
    let running = start(json!({"profile": "smoke", "backend": "loopback"}));
    let queued = start(json!({"profile": "smoke", "backend": "loopback"}));
    assert_ne!(running, queued);
    // The lab is one machine: the second waits.
    assert_eq!(
        serve
            .get(&format!("{}/api/runs/{queued}", serve.url))
            .json()["job"]["status"],
        "queued"
    );
    let dequeued = serve.request(
        Method::DELETE,
        &format!("{}/api/runs/{queued}", serve.url),
        &[],
        Bytes::new(),
    );
    assert_eq!(dequeued.status, StatusCode::ACCEPTED);
    assert_eq!(dequeued.json()["status"], "cancelled");

    serve.events(
        &format!("{}/api/runs/{running}/events", serve.url),
        Duration::from_secs(60),
        |name, value| name == "status" && value["done"].as_u64().unwrap() >= 1,
    );
    let stopping = serve.request(
        Method::DELETE,
        &format!("{}/api/runs/{running}", serve.url),
        &[],
        Bytes::new(),
    );
    assert_eq!(stopping.status, StatusCode::ACCEPTED, "{}", stopping.text());
    let seen = serve.events(
        &format!("{}/api/runs/{running}/events", serve.url),
        Duration::from_secs(60),
        |name, _| name == "done",
    );
    assert_eq!(seen.last().unwrap().1["status"], "partial", "{seen:?}");
    let run = serve
        .get(&format!("{}/api/runs/{running}", serve.url))
        .json();
    assert_eq!(run["status"], "partial");
    assert_eq!(run["status_reason"], "interrupted");
    let cells = run["cells_done"].as_u64().unwrap();
    assert!((1..6).contains(&cells), "{run}");
    let report = serve.get(&format!(
        "{}/api/runs/{running}/files/report.html",
        serve.url
    ));
    assert_eq!(
        report.status,
        StatusCode::OK,
        "a partial run has its report"
    );
    // Cancelling what has ended is a conflict, not a success.
    let again = serve.request(
        Method::DELETE,
        &format!("{}/api/runs/{running}", serve.url),
        &[],
        Bytes::new(),
    );
    assert_eq!(again.status, StatusCode::CONFLICT);
    assert_eq!(
        serve
            .get(&format!("{}/api/runs/{queued}", serve.url))
            .json()["job"]["status"],
        "cancelled"
    );
}

#[test]
fn every_endpoint_the_openapi_description_lists_exists() {
    let serve = Serve::start(&[]);
    serve.add_example_run("example");
    let document = serve.get_path("/api/openapi.json").json();
    assert_eq!(document["openapi"], "3.1.0");
    let paths = document["paths"].as_object().unwrap();
    for required in [
        "/api/profiles",
        "/api/runs",
        "/api/runs/{id}",
        "/api/runs/{id}/events",
        "/api/runs/{id}/files/{name}",
        "/api/verify",
        "/api/compare",
    ] {
        assert!(paths.contains_key(required), "{required}");
    }
    for (path, operations) in paths {
        let url = format!(
            "{}{}",
            serve.url,
            path.replace("{id}", "example").replace(
                "{name}",
                if path.starts_with("/api/profiles") {
                    "smoke"
                } else {
                    "results.json"
                }
            )
        );
        for method in operations.as_object().unwrap().keys() {
            // Bodies that are refused, so the walk starts nothing.
            let (method, body) = match method.as_str() {
                "get" => (Method::GET, json!(null)),
                "delete" => (Method::DELETE, json!(null)),
                "post" if path == "/api/runs" => {
                    (Method::POST, json!({"profile": "no-such-profile"}))
                }
                "post" if path == "/api/verify" => {
                    (Method::POST, json!({"meshes": ["no-such-mesh"]}))
                }
                "post" => (Method::POST, json!({"interactions": 0})),
                other => panic!("unexpected method {other} for {path}"),
            };
            let answer = if path.ends_with("/events") {
                let seen = serve.events(&url, Duration::from_secs(10), |name, _| name == "done");
                assert_eq!(seen.last().unwrap().1["status"], "complete");
                continue;
            } else if method == Method::POST {
                serve.post_json(&url, &body)
            } else {
                serve.request(method.clone(), &url, &[], Bytes::new())
            };
            assert_ne!(
                answer.status,
                StatusCode::METHOD_NOT_ALLOWED,
                "{method} {path}"
            );
            assert!(
                !answer.text().contains("no such endpoint"),
                "{method} {path}: {}",
                answer.text()
            );
            assert!(
                answer.status.as_u16() < 500,
                "{method} {path}: {}",
                answer.text()
            );
        }
    }
}

#[test]
fn bad_requests_get_400_naming_the_field_with_the_clis_message() {
    let serve = Serve::start(&[]);
    let runs = format!("{}/api/runs", serve.url);
    let refused = |body: serde_json::Value, field: &str| {
        let error = serve.post_refused(&runs, &body);
        assert_eq!(error["field"], field, "{error}");
        error["error"].as_str().unwrap().to_owned()
    };
    assert!(refused(json!({"profile": "nope"}), "profile").starts_with("unknown profile \"nope\""));
    assert!(refused(
        json!({"profile": "smoke", "scenarios": ["istio"]}),
        "scenarios"
    )
    .starts_with("--scenarios: the profile has no \"istio\""));
    refused(json!({"profile": "smoke", "duration": "soon"}), "duration");
    refused(json!({"profile": "smoke", "backend": "vm"}), "backend");
    refused(json!({"profile": "smoke", "colour": "blue"}), "colour");
    refused(json!({"profile": 7}), "profile");

    // A spec's error is the one `meshbench run --spec` prints for the same text.
    let builtin = std::process::Command::new(env!("CARGO_BIN_EXE_meshbench"))
        .args(["profiles", "show", "smoke"])
        .output()
        .unwrap();
    let spec =
        String::from_utf8(builtin.stdout)
            .unwrap()
            .replacen("- { rps: 400,", "- { rps: fast,", 1);
    let from_api = refused(json!({"spec": spec}), "spec");
    let cli = serving::run_spec_on_the_command_line(&spec);
    assert_eq!(cli.status.code(), Some(2));
    let cli_error = String::from_utf8_lossy(&cli.stderr);
    let problem = from_api.strip_prefix("spec: ").unwrap();
    assert!(problem.starts_with("load.points[1].rps"), "{from_api}");
    assert!(
        cli_error.contains(problem),
        "CLI: {cli_error}\nAPI: {from_api}"
    );

    let not_json = serve.request(
        Method::POST,
        &runs,
        &[("content-type", "application/json")],
        "{\"profile\":",
    );
    assert_eq!(not_json.status, StatusCode::BAD_REQUEST);
    assert!(not_json.json()["error"]
        .as_str()
        .unwrap()
        .starts_with("invalid JSON body"));
    let huge = json!({"spec": "#".repeat(2 << 20)});
    assert_eq!(
        serve.post_json(&runs, &huge).status,
        StatusCode::PAYLOAD_TOO_LARGE
    );
    let nothing = serve.get_path("/api/runs").json();
    assert_eq!(nothing, json!([]), "no bad request started a run");
}

#[test]
fn hostile_paths_and_cross_site_requests_reach_nothing() {
    let serve = Serve::start(&[]);
    serve.add_example_run("example");
    std::fs::write(serve.results.join("secret.txt"), "secret").unwrap();
    for path in [
        "/api/runs/example/files/..%2Fsecret.txt",
        "/api/runs/example/files/../secret.txt",
        "/api/runs/..%2F..%2Fetc/files/passwd",
        "/api/runs/example/files/%2Fetc%2Fpasswd",
        "/runs/example/files/..%2F..%2Fsecret.txt",
        "/api/runs/.%2E/files/results.json",
    ] {
        let answer = serve.get_path(path);
        assert!(
            matches!(
                answer.status,
                StatusCode::NOT_FOUND | StatusCode::BAD_REQUEST
            ),
            "{path}: {}",
            answer.status
        );
        assert!(
            !answer.text().contains("secret\n") && answer.text() != "secret",
            "{path}"
        );
    }
    let runs = format!("{}/api/runs", serve.url);
    // A page of another site cannot start a run, though the operator's browser sends its
    // session cookie along: its form posts carry no CSRF token, it cannot send JSON (415), and
    // its origin is not this server's.
    let (cookie, _csrf) = serve.session();
    let form = serve.form_post("/runs/example/cancel", &cookie, "x=1");
    assert_eq!(form.status, StatusCode::FORBIDDEN, "{}", form.text());
    let plain = request(
        Method::POST,
        &runs,
        &[("cookie", &cookie), ("content-type", "text/plain")],
        "{\"profile\":\"smoke\"}",
    );
    assert_eq!(plain.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let foreign = request(
        Method::POST,
        &runs,
        &[
            ("cookie", &cookie),
            ("content-type", "application/json"),
            ("origin", "https://evil.example"),
        ],
        "{\"profile\":\"no-such\"}",
    );
    assert_eq!(foreign.status, StatusCode::FORBIDDEN);
    let fetch = request(
        Method::POST,
        &runs,
        &[
            ("cookie", &cookie),
            ("content-type", "application/json"),
            ("sec-fetch-site", "cross-site"),
        ],
        "{\"profile\":\"no-such\"}",
    );
    assert_eq!(fetch.status, StatusCode::FORBIDDEN);
    assert_eq!(
        serve.get(&runs).json().as_array().unwrap().len(),
        1,
        "only the example"
    );
}

#[test]
fn beyond_loopback_a_token_is_required_and_checked() {
    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_meshbench"))
        .args(["serve", "--listen", "0.0.0.0:0", "--results"])
        .arg(tempfile::tempdir().unwrap().path())
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("needs --token"));

    let token = "a-test-token-of-32-characters-ok";
    let serve = Serve::start(&["--token", token]);
    let runs = format!("{}/api/runs", serve.url);
    assert_eq!(get(&runs).status, StatusCode::UNAUTHORIZED);
    assert!(get(&runs).json()["error"]
        .as_str()
        .unwrap()
        .contains("token"));
    let wrong = request(
        Method::GET,
        &runs,
        &[("authorization", "Bearer not-the-token-at-all")],
        Bytes::new(),
    );
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    let bearer = format!("Bearer {token}");
    let right = request(
        Method::GET,
        &runs,
        &[("authorization", &bearer)],
        Bytes::new(),
    );
    assert_eq!(right.status, StatusCode::OK);
    let page = get(&format!("{}/", serve.url));
    assert_eq!(page.status, StatusCode::UNAUTHORIZED);
    assert!(page.text().contains("id=\"token\""), "the login page");

    // The login page sets a cookie that then stands for the token.
    let login = request(
        Method::POST,
        &format!("{}/login", serve.url),
        &[("content-type", "application/x-www-form-urlencoded")],
        format!("token={token}"),
    );
    assert_eq!(login.status, StatusCode::SEE_OTHER);
    let cookie = login.headers["set-cookie"].to_str().unwrap().to_owned();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let pair = cookie.split(';').next().unwrap();
    let with_cookie = request(Method::GET, &runs, &[("cookie", pair)], Bytes::new());
    assert_eq!(with_cookie.status, StatusCode::OK);
    let bad_login = request(
        Method::POST,
        &format!("{}/login", serve.url),
        &[("content-type", "application/x-www-form-urlencoded")],
        "token=guess",
    );
    assert_eq!(bad_login.status, StatusCode::UNAUTHORIZED);
    assert!(bad_login.headers.get("set-cookie").is_none());
}

#[test]
fn cost_and_compare_answer_what_the_cli_prints() {
    let serve = Serve::start(&[]);
    serve.add_example_run("example");
    let cost = serve.get(&format!(
        "{}/api/runs/example/cost?pods=500&cpu_price=25&mem_price=3",
        serve.url
    ));
    assert_eq!(cost.status, StatusCode::OK, "{}", cost.text());
    let table = &cost.json()["table"];
    let cli = std::process::Command::new(env!("CARGO_BIN_EXE_meshbench"))
        .args([
            "cost",
            "--pods",
            "500",
            "--cpu-price",
            "25",
            "--mem-price",
            "3",
        ])
        .arg(serve.results.join("example"))
        .output()
        .unwrap();
    meshbench_testkit::assert_success(&cli);
    let printed = String::from_utf8_lossy(&cli.stdout);
    let rows = table["rows"].as_array().unwrap();
    assert!(!rows.is_empty());
    for row in rows {
        let cells: Vec<&str> = row
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap())
            .collect();
        assert!(
            printed.contains(&format!("| {} |", cells.join(" | "))),
            "{cells:?} in {printed}"
        );
    }
    let bad = serve.get(&format!(
        "{}/api/runs/example/cost?pods=many&cpu_price=25&mem_price=3",
        serve.url
    ));
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert_eq!(bad.json()["field"], "pods");

    let compared = serve
        .get(&format!("{}/api/compare?a=example&b=example", serve.url))
        .json();
    let cli = std::process::Command::new(env!("CARGO_BIN_EXE_meshbench"))
        .arg("compare")
        .arg(serve.results.join("example"))
        .arg(serve.results.join("example"))
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&cli.stdout);
    for table in compared["tables"].as_array().unwrap() {
        assert!(
            printed.contains(table["title"].as_str().unwrap()),
            "{table}"
        );
    }
    let missing = serve.get_path("/api/compare?a=example&b=nope");
    assert_eq!(missing.status, StatusCode::BAD_REQUEST);
    assert_eq!(missing.json()["field"], "b");
}
