//! `meshbench serve` as a child process, and a small HTTP client for it (tests of the API and
//! of the browser UI share this). Serve prints the URL that logs in with its token; the
//! methods of [`Serve`] send that token as a bearer, as a script would, and the free functions
//! send nothing, as a stranger would.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// A running `meshbench serve` over its own results directory.
pub struct Serve {
    child: Child,
    pub url: String,
    /// The address serve printed that logs a browser in.
    pub login_url: String,
    /// The token in it.
    pub token: String,
    pub results: PathBuf,
    _dir: Option<tempfile::TempDir>,
}

impl Serve {
    /// Serves a fresh results directory on loopback, with `args` added.
    pub fn start(args: &[&str]) -> Serve {
        let dir = tempfile::tempdir().unwrap();
        let results = dir.path().join("results");
        let mut serve = Serve::start_in(&results, args);
        serve._dir = Some(dir);
        serve
    }

    pub fn start_in(results: &Path, args: &[&str]) -> Serve {
        Serve::start_with_env(results, args, &[])
    }

    /// Serves `results` with `args`, and `env` set in its environment.
    pub fn start_with_env(results: &Path, args: &[&str], env: &[(&str, &str)]) -> Serve {
        let mut child = Command::new(env!("CARGO_BIN_EXE_meshbench"))
            .args(["serve", "--listen", "127.0.0.1:0", "--results"])
            .arg(results)
            .args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let ready: serde_json::Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("no ready line from meshbench serve ({e}): {line:?}"));
        let login_url = ready["login_url"].as_str().unwrap().to_owned();
        let token = login_url
            .split_once("?token=")
            .map(|(_, token)| token.to_owned())
            .unwrap_or_else(|| panic!("no token in the login URL {login_url}"));
        Serve {
            child,
            url: ready["url"]
                .as_str()
                .unwrap()
                .trim_end_matches('/')
                .to_owned(),
            login_url,
            token,
            results: results.to_owned(),
            _dir: None,
        }
    }

    /// Puts a copy of the schema's example results into the results directory as run `id`.
    pub fn add_example_run(&self, id: &str) {
        let dir = self.results.join(id);
        std::fs::create_dir_all(&dir).unwrap();
        let example = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../meshbench-results/schema/example-results-v1.json"
        );
        std::fs::copy(example, dir.join("results.json")).unwrap();
        let result: meshbench_results::RunResult =
            meshbench_results::read_json(&dir.join("results.json")).unwrap();
        meshbench_report::write_reports(&dir, &result).unwrap();
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `host:port` of the server.
    pub fn authority(&self) -> &str {
        self.url.trim_start_matches("http://")
    }

    /// `Authorization: Bearer <token>` with `headers`.
    fn with_token<'h>(
        &self,
        bearer: &'h str,
        headers: &[(&'h str, &'h str)],
    ) -> Vec<(&'h str, &'h str)> {
        let mut all = vec![("authorization", bearer)];
        all.extend_from_slice(headers);
        all
    }

    /// One request with the token.
    pub fn request(
        &self,
        method: Method,
        url: &str,
        headers: &[(&str, &str)],
        body: impl Into<Bytes>,
    ) -> Answer {
        let bearer = format!("Bearer {}", self.token);
        request(method, url, &self.with_token(&bearer, headers), body)
    }

    pub fn get(&self, url: &str) -> Answer {
        self.request(Method::GET, url, &[], Bytes::new())
    }

    /// GET of `path` (with its query) on this server.
    pub fn get_path(&self, path: &str) -> Answer {
        self.get(&format!("{}{path}", self.url))
    }

    pub fn post_json(&self, url: &str, body: &serde_json::Value) -> Answer {
        self.request(
            Method::POST,
            url,
            &[("content-type", "application/json")],
            serde_json::to_vec(body).unwrap(),
        )
    }

    /// Server-sent events with the token, as [`events`] reads them.
    pub fn events(
        &self,
        url: &str,
        timeout: Duration,
        until: impl FnMut(&str, &serde_json::Value) -> bool,
    ) -> Vec<(String, serde_json::Value)> {
        let bearer = format!("Bearer {}", self.token);
        events_with(url, &[("authorization", &bearer)], timeout, until)
    }

    /// Logs in through the URL serve printed, as a browser does: the session cookie
    /// (`name=value`) and the session's CSRF token from the page it leads to.
    pub fn session(&self) -> (String, String) {
        let login = get(&self.login_url);
        assert_eq!(login.status, StatusCode::SEE_OTHER, "{}", login.text());
        let cookie = login.headers["set-cookie"].to_str().unwrap().to_owned();
        let pair = cookie.split(';').next().unwrap().to_owned();
        let page = request(
            Method::GET,
            &format!("{}/", self.url),
            &[("cookie", &pair)],
            Bytes::new(),
        );
        assert_eq!(page.status, StatusCode::OK);
        let text = page.text();
        let csrf = text
            .split_once("name=\"csrf-token\" content=\"")
            .and_then(|(_, rest)| rest.split_once('"'))
            .map(|(csrf, _)| csrf.to_owned())
            .unwrap_or_else(|| panic!("no CSRF token in a logged-in page: {text}"));
        (pair, csrf)
    }

    /// POSTs `body` as JSON to `url`, asserts that it is refused as a bad request, and returns
    /// the error document.
    pub fn post_refused(&self, url: &str, body: &serde_json::Value) -> serde_json::Value {
        let answer = self.post_json(url, body);
        assert_eq!(
            answer.status,
            StatusCode::BAD_REQUEST,
            "{body}: {}",
            answer.text()
        );
        answer.json()
    }

    /// What a browser on this server's own pages sends for a form: a POST of `form` to `path`
    /// with the session's `cookie` and this server's origin.
    pub fn form_post(&self, path: &str, cookie: &str, form: impl Into<Bytes>) -> Answer {
        request(
            Method::POST,
            &format!("{}{path}", self.url),
            &[
                ("cookie", cookie),
                ("origin", &self.url),
                ("content-type", "application/x-www-form-urlencoded"),
            ],
            form,
        )
    }

    /// Stops the server as Ctrl-C would and waits for it.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_child(&self.child),
            rustix::process::Signal::TERM,
        );
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "meshbench serve did not stop");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            self.stop();
        }
    }
}

/// `meshbench run --spec` on `spec`, written to a file as a user would: what the command line
/// says of a spec the API was given.
pub fn run_spec_on_the_command_line(spec: &str) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("spec.yaml");
    std::fs::write(&path, spec).unwrap();
    Command::new(env!("CARGO_BIN_EXE_meshbench"))
        .args(["run", "--spec"])
        .arg(&path)
        .output()
        .unwrap()
}

pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Answer {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "not JSON ({e}): {} {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn client() -> Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build_http()
}

/// One request; `headers` as (name, value).
pub fn request(
    method: Method,
    url: &str,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> Answer {
    runtime().block_on(async {
        let mut builder = Request::builder().method(method).uri(url);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        let response = tokio::time::timeout(
            Duration::from_secs(60),
            client().request(builder.body(Full::new(body.into())).unwrap()),
        )
        .await
        .expect("the server answers within a minute")
        .unwrap();
        let (parts, body) = response.into_parts();
        let body = body.collect().await.unwrap().to_bytes();
        Answer {
            status: parts.status,
            headers: parts.headers,
            body,
        }
    })
}

pub fn get(url: &str) -> Answer {
    request(Method::GET, url, &[], Bytes::new())
}

pub fn post_json(url: &str, body: &serde_json::Value) -> Answer {
    request(
        Method::POST,
        url,
        &[("content-type", "application/json")],
        serde_json::to_vec(body).unwrap(),
    )
}

/// Server-sent events of `url` until `until` says stop or `timeout` passes: (event, data).
pub fn events(
    url: &str,
    timeout: Duration,
    until: impl FnMut(&str, &serde_json::Value) -> bool,
) -> Vec<(String, serde_json::Value)> {
    events_with(url, &[], timeout, until)
}

fn events_with(
    url: &str,
    headers: &[(&str, &str)],
    timeout: Duration,
    mut until: impl FnMut(&str, &serde_json::Value) -> bool,
) -> Vec<(String, serde_json::Value)> {
    runtime().block_on(async {
        let mut builder = Request::get(url);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        let response = client()
            .request(builder.body(Full::new(Bytes::new())).unwrap())
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(
            response.headers()["content-type"],
            "text/event-stream",
            "an event stream"
        );
        let mut body = response.into_body();
        let mut seen = vec![];
        let mut buffer = String::new();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let frame = tokio::time::timeout_at(deadline, body.frame())
                .await
                .unwrap_or_else(|_| panic!("no end of events within {timeout:?}; saw {seen:?}"));
            let Some(frame) = frame else { return seen };
            let Ok(data) = frame.unwrap().into_data() else {
                continue;
            };
            buffer.push_str(&String::from_utf8_lossy(&data));
            while let Some(end) = buffer.find("\n\n") {
                let block: String = buffer.drain(..end + 2).collect();
                let mut name = String::from("message");
                let mut payload = String::new();
                for line in block.lines() {
                    if let Some(n) = line.strip_prefix("event: ") {
                        name = n.to_owned();
                    } else if let Some(d) = line.strip_prefix("data: ") {
                        payload.push_str(d);
                    }
                }
                if payload.is_empty() {
                    continue;
                }
                let value: serde_json::Value = serde_json::from_str(&payload).unwrap();
                let stop = until(&name, &value);
                seen.push((name, value));
                if stop {
                    return seen;
                }
            }
        }
    })
}
