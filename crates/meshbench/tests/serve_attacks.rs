//! `meshbench serve` attacked as issue 43 found it could be: a rebinding page, an alias bomb,
//! an overflowing duration, a malformed or linked results directory, JSON in a form's content
//! type, silent connections and too many of them, a token or session leaking into the lab's
//! processes, the cookie and the CSRF token. Each runs against a real server on 127.0.0.1:0
//! over real sockets.

mod serving;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, StatusCode};
use serde_json::json;
use serving::{get, request, Serve};

/// Lab runs measure: one at a time in this binary.
static LAB: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn lab() -> std::sync::MutexGuard<'static, ()> {
    LAB.lock().unwrap_or_else(|p| p.into_inner())
}

/// serve's control-listener deadline for a connection to say which protocol it speaks.
const SNIFF_DEADLINE: Duration = Duration::from_secs(10);

#[test]
fn a_rebinding_host_is_refused_on_every_route_before_authentication() {
    let serve = Serve::start(&["--allowed-host", "bench.example"]);
    let port = serve.authority().rsplit(':').next().unwrap().to_owned();
    let evil = format!("rebind.evil.example:{port}");
    let bearer = format!("Bearer {}", serve.token);
    let (cookie, csrf) = serve.session();
    for (method, path) in [
        (Method::GET, "/"),
        (Method::GET, "/api/runs"),
        (Method::GET, "/login"),
        (Method::GET, "/static/app.css"),
        (Method::POST, "/api/runs"),
    ] {
        let url = format!("{}{path}", serve.url);
        let origin = format!("http://{evil}");
        // The page's own Host and Origin agree, as they do after a rebinding; even the
        // credentials do not make it this server.
        for credential in [
            ("authorization", bearer.as_str()),
            ("cookie", cookie.as_str()),
        ] {
            let answer = request(
                method.clone(),
                &url,
                &[
                    ("host", &evil),
                    ("origin", &origin),
                    credential,
                    ("x-csrf-token", &csrf),
                    ("content-type", "application/json"),
                ],
                "{\"profile\":\"smoke\",\"backend\":\"loopback\"}",
            );
            assert_eq!(
                answer.status,
                StatusCode::MISDIRECTED_REQUEST,
                "{method} {path}: {}",
                answer.text()
            );
        }
    }
    // A request that names two hosts (two Host headers, or an absolute-form target whose
    // authority is not its Host) is not taken for this server's either.
    for head in [
        format!(
            "GET /api/runs HTTP/1.1\r\nHost: {}\r\nHost: {evil}\r\n",
            serve.authority()
        ),
        format!(
            "GET http://{evil}/api/runs HTTP/1.1\r\nHost: {}\r\n",
            serve.authority()
        ),
    ] {
        let mut stream = TcpStream::connect(serve.authority()).unwrap();
        stream
            .write_all(
                format!("{head}Authorization: {bearer}\r\nConnection: close\r\n\r\n").as_bytes(),
            )
            .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        let status = answer.lines().next().unwrap_or_default();
        assert!(
            status.contains(" 421 ") || status.contains(" 400 "),
            "{head:?}: {status}"
        );
    }
    // The names it was given are its own.
    for host in [format!("bench.example:{port}"), format!("localhost:{port}")] {
        let answer = request(
            Method::GET,
            &format!("{}/api/runs", serve.url),
            &[("host", &host), ("authorization", &bearer)],
            Bytes::new(),
        );
        assert_eq!(answer.status, StatusCode::OK, "{host}");
    }
    assert_eq!(serve.get_path("/api/runs").json(), json!([]));
}

/// The resident peak of a process, in KiB.
fn peak_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[test]
fn an_alias_bomb_spec_is_refused_at_once_naming_its_line() {
    let serve = Serve::start(&[]);
    // Ten levels of ten aliases each: 10^10 leaves once expanded.
    let mut bomb = String::from("name: bomb\na0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for level in 1..10 {
        let prev = format!("*a{}", level - 1);
        let row = [prev.as_str(); 10].join(", ");
        bomb.push_str(&format!("a{level}: &a{level} [{row}]\n"));
    }
    bomb.push_str("scenarios: [baseline]\n");
    let before = peak_kib(serve.pid());
    let started = Instant::now();
    let answer = serve.post_json(&format!("{}/api/runs", serve.url), &json!({"spec": bomb}));
    let took = started.elapsed();
    assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{}", answer.text());
    let error = answer.json();
    assert_eq!(error["field"], "spec");
    let message = error["error"].as_str().unwrap();
    assert!(
        message.contains("line 2") && message.contains("anchors"),
        "{message}"
    );
    assert!(took < Duration::from_secs(2), "{took:?}");
    let grown = peak_kib(serve.pid()).saturating_sub(before);
    assert!(grown < 64 * 1024, "the server grew {grown} KiB");

    // The command line refuses the same file with the same words, and exit code 2.
    let cli = serving::run_spec_on_the_command_line(&bomb);
    assert_eq!(cli.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&cli.stderr);
    assert!(
        stderr.contains("line 2") && stderr.contains("anchors"),
        "{stderr}"
    );
}

#[test]
fn an_overflowing_duration_is_refused_by_name_and_the_worker_runs_the_next_job() {
    let _lab = lab();
    let serve = Serve::start(&[]);
    let runs = format!("{}/api/runs", serve.url);
    for (body, field) in [
        (
            json!({"profile": "smoke", "duration": "300000000000y"}),
            "duration",
        ),
        (
            json!({"profile": "smoke", "warmup": "300000000000y"}),
            "warmup",
        ),
    ] {
        let error = serve.post_refused(&runs, &body);
        assert_eq!(error["field"], field, "{error}");
    }
    let builtin = std::process::Command::new(env!("CARGO_BIN_EXE_meshbench"))
        .args(["profiles", "show", "smoke"])
        .output()
        .unwrap();
    let smoke = String::from_utf8(builtin.stdout).unwrap();
    for (from, to, field) in [
        ("duration: ", "duration: 300000000000y\n#", "duration"),
        ("- { rps: 400,", "- { rps: 1e300,", "rps"),
        ("connections: 8", "connections: 4000000000", "connections"),
    ] {
        assert!(smoke.contains(from), "the smoke profile has {from:?}");
        let spec = smoke.replacen(from, to, 1);
        let answer = serve.post_json(&runs, &json!({"spec": spec}));
        assert_eq!(
            answer.status,
            StatusCode::BAD_REQUEST,
            "{to}: {}",
            answer.text()
        );
        let message = answer.json()["error"].as_str().unwrap().to_owned();
        assert!(message.contains(field), "{to}: {message}");
    }
    // The worker is alive: the next job runs to the end.
    let created = serve.post_json(
        &runs,
        &json!({"profile": "smoke", "backend": "loopback", "duration": "1s", "scenarios": ["baseline"]}),
    );
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text());
    let id = created.json()["id"].as_str().unwrap().to_owned();
    let seen = serve.events(
        &format!("{}/api/runs/{id}/events", serve.url),
        Duration::from_secs(120),
        |name, _| name == "done",
    );
    assert_eq!(seen.last().unwrap().1["status"], "complete", "{seen:?}");
}

#[test]
fn a_malformed_results_json_is_listed_as_unreadable_beside_good_runs() {
    let serve = Serve::start(&[]);
    serve.add_example_run("good");
    let example: serde_json::Value =
        serde_json::from_slice(&std::fs::read(serve.results.join("good/results.json")).unwrap())
            .unwrap();
    let mut negative = example.clone();
    negative["config"]["duration_seconds"] = json!(-1.0);
    std::fs::create_dir(serve.results.join("negative")).unwrap();
    std::fs::write(
        serve.results.join("negative/results.json"),
        serde_json::to_vec(&negative).unwrap(),
    )
    .unwrap();
    std::fs::create_dir(serve.results.join("garbage")).unwrap();
    std::fs::write(serve.results.join("garbage/results.json"), "{\"cells\": [").unwrap();

    let listed = serve.get_path("/api/runs");
    assert_eq!(listed.status, StatusCode::OK, "{}", listed.text());
    let listed = listed.json();
    let status = |id: &str| {
        listed
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == id)
            .unwrap_or_else(|| panic!("{id} listed: {listed}"))
            .clone()
    };
    assert_eq!(status("good")["status"], "complete");
    assert_eq!(status("negative")["cells_total"], json!(null), "{listed}");
    let garbage = status("garbage");
    assert_eq!(garbage["status"], "unreadable");
    assert!(
        garbage["status_reason"]
            .as_str()
            .unwrap()
            .contains("results.json"),
        "{garbage}"
    );
    for path in [
        "/",
        "/compare",
        "/runs/negative",
        "/runs/garbage",
        "/api/runs/negative",
    ] {
        let answer = serve.get_path(path);
        assert!(
            answer.status.as_u16() < 500,
            "{path}: {} {}",
            answer.status,
            answer.text()
        );
    }
}

#[test]
fn links_under_the_results_directory_are_refused_and_never_followed() {
    let serve = Serve::start(&[]);
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("shadow");
    std::fs::write(&secret, "root:secret-hash:19000::::::\n").unwrap();
    serve.add_example_run("linked-report");
    let report = serve.results.join("linked-report/report.md");
    std::fs::remove_file(&report).unwrap();
    std::os::unix::fs::symlink(&secret, &report).unwrap();
    // A whole run directory that is a link to one outside.
    let elsewhere = outside.path().join("run");
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::copy(
        serve.results.join("linked-report/results.json"),
        elsewhere.join("results.json"),
    )
    .unwrap();
    std::fs::write(elsewhere.join("report.md"), "secret-hash").unwrap();
    std::os::unix::fs::symlink(&elsewhere, serve.results.join("linked-run")).unwrap();

    let file = serve.get(&format!(
        "{}/api/runs/linked-report/files/report.md",
        serve.url
    ));
    assert_eq!(file.status, StatusCode::FORBIDDEN, "{}", file.text());
    assert!(file.text().contains("symbolic link"), "{}", file.text());
    for path in [
        "/api/runs/linked-run",
        "/api/runs/linked-run/files/report.md",
        "/runs/linked-run/files/report.md",
        "/runs/linked-report/files/report.md",
        "/api/runs",
        "/",
    ] {
        let answer = serve.get_path(path);
        assert!(
            !answer.text().contains("secret-hash"),
            "{path}: {}",
            answer.text()
        );
    }
    let run = serve
        .get(&format!("{}/api/runs/linked-run", serve.url))
        .json();
    assert_eq!(run["status"], "unreadable", "{run}");
    assert!(
        run["status_reason"]
            .as_str()
            .unwrap()
            .contains("symbolic link"),
        "{run}"
    );
}

#[test]
fn json_endpoints_refuse_a_forms_content_type() {
    let serve = Serve::start(&[]);
    let (cookie, csrf) = serve.session();
    for path in [
        "/api/runs",
        "/api/verify",
        "/api/e3/experiment",
        "/api/e3/analyze",
    ] {
        let url = format!("{}{path}", serve.url);
        for content_type in [
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "text/plain",
        ] {
            let with_bearer = serve.request(
                Method::POST,
                &url,
                &[("content-type", content_type)],
                "{\"profile\":\"smoke\",\"interactions\":1}",
            );
            assert_eq!(
                with_bearer.status,
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "{path} {content_type}"
            );
            let with_session = request(
                Method::POST,
                &url,
                &[
                    ("cookie", &cookie),
                    ("x-csrf-token", &csrf),
                    ("origin", &serve.url),
                    ("content-type", content_type),
                ],
                "{\"profile\":\"smoke\",\"interactions\":1}",
            );
            assert_eq!(
                with_session.status,
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "{path} {content_type}"
            );
        }
    }
    // A browser's JSON without the session's CSRF token, or without saying where it comes
    // from, changes nothing either.
    let runs = format!("{}/api/runs", serve.url);
    let body = "{\"profile\":\"no-such-profile\"}";
    let no_csrf = request(
        Method::POST,
        &runs,
        &[
            ("cookie", &cookie),
            ("origin", &serve.url),
            ("content-type", "application/json"),
        ],
        body,
    );
    assert_eq!(no_csrf.status, StatusCode::FORBIDDEN);
    let no_origin = request(
        Method::POST,
        &runs,
        &[
            ("cookie", &cookie),
            ("x-csrf-token", &csrf),
            ("content-type", "application/json"),
        ],
        body,
    );
    assert_eq!(no_origin.status, StatusCode::FORBIDDEN);
    let right = request(
        Method::POST,
        &runs,
        &[
            ("cookie", &cookie),
            ("x-csrf-token", &csrf),
            ("origin", &serve.url),
            ("content-type", "application/json"),
        ],
        body,
    );
    assert_eq!(
        right.status,
        StatusCode::BAD_REQUEST,
        "reached the handler: {}",
        right.text()
    );
    assert_eq!(serve.get(&runs).json(), json!([]), "nothing started");
}

/// Seconds until the server closes `stream` (reading what it sends, if anything).
fn closed_within(mut stream: TcpStream, limit: Duration) -> Duration {
    let started = Instant::now();
    stream.set_read_timeout(Some(limit)).unwrap();
    let mut buf = [0u8; 1024];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return started.elapsed(),
            Ok(_) => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
                ) =>
            {
                return started.elapsed()
            }
            Err(e) => panic!("still open after {:?}: {e}", started.elapsed()),
        }
    }
}

#[test]
fn a_silent_connection_and_a_partial_http2_preface_are_closed_within_the_deadline() {
    let serve = Serve::start(&[]);
    let addr = serve.authority().to_owned();
    let silent = TcpStream::connect(&addr).unwrap();
    let mut partial = TcpStream::connect(&addr).unwrap();
    partial
        .write_all(&b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"[..23])
        .unwrap();
    let limit = SNIFF_DEADLINE + Duration::from_secs(5);
    let waits: Vec<Duration> = [silent, partial]
        .into_iter()
        .map(|stream| std::thread::spawn(move || closed_within(stream, limit)))
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().unwrap())
        .collect();
    for wait in waits {
        assert!(wait >= SNIFF_DEADLINE - Duration::from_secs(1), "{wait:?}");
    }
    // The server still answers.
    assert_eq!(serve.get_path("/api/runs").status, StatusCode::OK);
}

#[test]
fn the_257th_connection_is_refused_at_once_and_a_freed_place_is_taken_again() {
    let serve = Serve::start(&[]);
    let addr = serve.authority().to_owned();
    let mut held: Vec<TcpStream> = (0..256)
        .map(|_| TcpStream::connect(&addr).unwrap())
        .collect();
    // Each of them is being served (the 256 accepts happen in order, before the next one).
    let refused = TcpStream::connect(&addr).unwrap();
    let wait = closed_within(refused, Duration::from_secs(5));
    assert!(wait < Duration::from_secs(5), "{wait:?}");
    held.truncate(200);
    // The freed places are given back as the server sees the connections close.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let answer = std::panic::catch_unwind(|| get(&format!("{}/login", serve.url)).status);
        if answer.ok() == Some(StatusCode::OK) {
            break;
        }
        assert!(Instant::now() < deadline, "no place freed within 10 s");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Every process below `root`, by parent.
fn descendants(root: u32) -> Vec<u32> {
    let mut parents = std::collections::HashMap::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
            continue;
        };
        if let Some(ppid) = status
            .lines()
            .find_map(|l| l.strip_prefix("PPid:"))
            .and_then(|p| p.trim().parse::<u32>().ok())
        {
            parents.insert(pid, ppid);
        }
    }
    let mut found = vec![];
    let mut frontier = vec![root];
    while let Some(parent) = frontier.pop() {
        for (&pid, &ppid) in &parents {
            if ppid == parent {
                found.push(pid);
                frontier.push(pid);
            }
        }
    }
    found
}

#[test]
fn no_token_or_session_reaches_a_lab_processs_environment_or_arguments() {
    let _lab = lab();
    let dir = tempfile::tempdir().unwrap();
    let token = "an-environment-token-of-40-characters-ok";
    let serve = Serve::start_with_env(
        &dir.path().join("results"),
        &[],
        &[("MESHBENCH_TOKEN", token)],
    );
    assert!(
        serve.login_url.ends_with(token),
        "the environment's token is used"
    );
    let (cookie, csrf) = serve.session();
    let session_id = cookie.split_once('=').unwrap().1.to_owned();
    let created = request(
        Method::POST,
        &format!("{}/api/runs", serve.url),
        &[
            ("cookie", &cookie),
            ("x-csrf-token", &csrf),
            ("origin", &serve.url),
            ("content-type", "application/json"),
        ],
        serde_json::to_vec(
            &json!({"profile": "smoke", "backend": "loopback", "duration": "3s",
                "scenarios": ["meshbench-sidecar"]}),
        )
        .unwrap(),
    );
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text());
    let id = created.json()["id"].as_str().unwrap().to_owned();
    // Once a cell measures, the lab's processes are all up.
    serve.events(
        &format!("{}/api/runs/{id}/events", serve.url),
        Duration::from_secs(120),
        |name, _| name == "second",
    );
    let children = descendants(serve.pid());
    assert!(children.len() >= 3, "the lab's processes: {children:?}");
    let mut read = 0;
    for pid in children {
        for file in ["environ", "cmdline"] {
            let Ok(bytes) = std::fs::read(format!("/proc/{pid}/{file}")) else {
                continue;
            };
            read += 1;
            let text = String::from_utf8_lossy(&bytes);
            for secret in [token, &session_id, &csrf] {
                assert!(
                    !text.contains(secret),
                    "/proc/{pid}/{file} holds a secret: {text}"
                );
            }
        }
    }
    assert!(read >= 6, "read {read} files");
    serve.events(
        &format!("{}/api/runs/{id}/events", serve.url),
        Duration::from_secs(120),
        |name, _| name == "done",
    );
}

#[test]
fn the_cookie_is_a_session_not_the_token_and_no_page_carries_csrf_before_login() {
    let serve = Serve::start(&[]);
    // Without the token or a session: 401, and neither the login page nor the 401 page has a
    // CSRF token.
    assert_eq!(
        get(&format!("{}/api/runs", serve.url)).status,
        StatusCode::UNAUTHORIZED
    );
    let refused = get(&format!("{}/", serve.url));
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    let login = get(&format!("{}/login", serve.url));
    for page in [&refused, &login] {
        assert!(!page.text().contains("csrf"), "{}", page.text());
        assert!(page.text().contains("id=\"token\""), "the login form");
    }

    let answer = get(&serve.login_url);
    assert_eq!(answer.status, StatusCode::SEE_OTHER);
    assert_eq!(answer.headers["referrer-policy"], "same-origin");
    let set_cookie = answer.headers["set-cookie"].to_str().unwrap().to_owned();
    assert!(!set_cookie.contains(&serve.token), "{set_cookie}");
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=43200"] {
        assert!(set_cookie.contains(attribute), "{attribute}: {set_cookie}");
    }
    let (a_cookie, a_csrf) = serve.session();
    let (b_cookie, b_csrf) = serve.session();
    assert_ne!(a_cookie, b_cookie);
    assert_ne!(a_csrf, b_csrf, "a CSRF token per session");
    // One session's CSRF token is no good with another's cookie.
    let form = |cookie: &str, csrf: &str| {
        serve.form_post(
            "/verify",
            cookie,
            format!("csrf={csrf}&meshes=no-such-mesh"),
        )
    };
    assert_eq!(form(&a_cookie, &b_csrf).status, StatusCode::FORBIDDEN);
    assert_ne!(form(&a_cookie, &a_csrf).status, StatusCode::FORBIDDEN);

    // Logging out ends the session.
    let logout = serve.form_post("/logout", &a_cookie, format!("csrf={a_csrf}"));
    assert_eq!(logout.status, StatusCode::SEE_OTHER, "{}", logout.text());
    let after = request(
        Method::GET,
        &format!("{}/api/runs", serve.url),
        &[("cookie", &a_cookie)],
        Bytes::new(),
    );
    assert_eq!(after.status, StatusCode::UNAUTHORIZED);
    let other = request(
        Method::GET,
        &format!("{}/api/runs", serve.url),
        &[("cookie", &b_cookie)],
        Bytes::new(),
    );
    assert_eq!(other.status, StatusCode::OK);

    // Logins are limited: after ten wrong ones even the right token waits.
    for _ in 0..10 {
        let wrong = get(&format!(
            "{}/login?token=wrong-token-wrong-token",
            serve.url
        ));
        assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    }
    let limited = get(&serve.login_url);
    assert_eq!(limited.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(limited.headers.contains_key("retry-after"));
    assert!(limited.headers.get("set-cookie").is_none());
}
