//! `meshbench serve` as a person uses it: in a real browser (Debian's Chromium, driven through
//! chromedriver). Each test ends with a screenshot of the page it left, under
//! `target/tmp/screenshots/` (test artifacts, not committed), so the pages can be looked at.
//!
//! Under CI a missing Chromium or chromedriver fails the tests (`scripts/test` installs
//! both); elsewhere they are skipped with the reason.

mod serving;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;
use serving::Serve;

/// Lab runs measure, and a browser is heavy: one test at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The longest a table cell may be (characters): about what a reader takes in at a glance.
const MAX_CELL_CHARS: usize = 200;

/// How long a page may take to show what a test waits for.
const PAGE_WAIT: Duration = Duration::from_secs(20);

struct Browser {
    driver: Child,
    client: Client,
    downloads: tempfile::TempDir,
    name: &'static str,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Browser {
    /// Chromium headless under chromedriver, downloading into a temporary directory; `None`
    /// (skipped) outside CI when either is missing.
    async fn open(name: &'static str) -> Option<Browser> {
        let chromium = meshbench_testkit::require_tool("chromium")?;
        let chromedriver = meshbench_testkit::require_tool("chromedriver")?;
        let downloads = tempfile::tempdir().unwrap();
        // chromedriver takes no port 0: a free one, taken at once.
        let port = free_port();
        let driver = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        meshbench_testkit::wait_for("chromedriver to listen", Duration::from_secs(20), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).ok()
        });
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".into(),
            json!({
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                         "--window-size=1366,1000", "--no-first-run", "--disable-extensions"],
                "prefs": {
                    "download.default_directory": downloads.path(),
                    "download.prompt_for_download": false,
                    "download.directory_upgrade": true,
                }
            }),
        );
        let client = ClientBuilder::rustls()
            .unwrap()
            .capabilities(capabilities)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .expect("a Chromium session");
        Some(Browser {
            driver,
            client,
            downloads,
            name,
        })
    }

    async fn goto(&self, url: &str) {
        self.client.goto(url).await.unwrap();
    }

    async fn find(&self, css: &str) -> fantoccini::elements::Element {
        self.client
            .wait()
            .at_most(PAGE_WAIT)
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("{}: no {css} on the page: {e}", self.name))
    }

    async fn text(&self, css: &str) -> String {
        self.find(css).await.text().await.unwrap()
    }

    async fn count(&self, css: &str) -> usize {
        self.client.find_all(Locator::Css(css)).await.unwrap().len()
    }

    /// Polls `check` on the page until it answers, for at most `limit`.
    async fn until<T, F, Fut>(&self, what: &str, limit: Duration, mut check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(found) = check().await {
                return found;
            }
            if Instant::now() > deadline {
                self.screenshot("timeout").await;
                panic!("{}: {what} did not happen within {limit:?}", self.name);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Starts a built-in profile from the new-run form, with the form's defaults.
    async fn start_from_the_form(&self, url: &str, profile: &str) {
        self.goto(&format!("{url}/runs/new")).await;
        self.find("#profile")
            .await
            .select_by_value(profile)
            .await
            .unwrap();
        self.find("#start").await.click().await.unwrap();
    }

    /// The text of `css` now, if the page has it.
    async fn text_now(&self, css: &str) -> Option<String> {
        self.client
            .find(Locator::Css(css))
            .await
            .ok()?
            .text()
            .await
            .ok()
    }

    /// Polls the text of `css` until `done` accepts it, for at most `limit`.
    async fn until_text(
        &self,
        what: &str,
        limit: Duration,
        css: &str,
        done: impl Fn(&str) -> bool,
    ) {
        self.until(what, limit, || async {
            self.text_now(css).await.filter(|t| done(t)).map(|_| ())
        })
        .await
    }

    /// A file that appeared in the download directory (the browser's download finished).
    async fn downloaded(&self, suffix: &str) -> PathBuf {
        let dir = self.downloads.path().to_owned();
        self.until(&format!("a download ending in {suffix}"), PAGE_WAIT, || {
            let dir = dir.clone();
            async move {
                // Chromium writes a `.crdownload` and names the file when it is complete.
                let files: Vec<PathBuf> = std::fs::read_dir(&dir)
                    .unwrap()
                    .flatten()
                    .map(|e| e.path())
                    .collect();
                let busy = files
                    .iter()
                    .any(|p| p.to_string_lossy().ends_with(".crdownload"));
                files.into_iter().filter(|_| !busy).find(|p| {
                    p.to_string_lossy().ends_with(suffix)
                        && std::fs::metadata(p).is_ok_and(|m| m.len() > 0)
                })
            }
        })
        .await
    }

    async fn screenshot(&self, page: &str) {
        let dir = screenshots();
        std::fs::create_dir_all(&dir).unwrap();
        let png = self.client.screenshot().await.unwrap();
        let path = dir.join(format!("{}-{page}.png", self.name));
        std::fs::write(&path, png).unwrap();
        eprintln!("screenshot: {}", path.display());
    }

    /// The text of every heading `css` matches, in the page's order.
    async fn headings(&self, css: &str) -> Vec<String> {
        let script = format!(
            "return Array.from(document.querySelectorAll({css:?})).map(h => h.textContent.trim())"
        );
        let value = self.client.execute(&script, vec![]).await.unwrap();
        serde_json::from_value(value).unwrap()
    }

    /// No table cell of the page holds more than about 200 characters (a reader scans a
    /// table; prose belongs under the heading or in a detail table).
    async fn assert_cells_short(&self, page: &str) {
        let longest: String = serde_json::from_value(
            self.client
                .execute(
                    "return Array.from(document.querySelectorAll('td, th'))\
                     .map(c => c.textContent.trim())\
                     .reduce((a, c) => c.length > a.length ? c : a, '')",
                    vec![],
                )
                .await
                .unwrap(),
        )
        .unwrap();
        assert!(
            longest.chars().count() <= MAX_CELL_CHARS,
            "{page}: a cell of {} characters: {longest}",
            longest.chars().count()
        );
    }

    async fn close(self) {
        let Browser {
            mut driver, client, ..
        } = self;
        let _ = client.close().await;
        let _ = driver.kill();
        let _ = driver.wait();
    }
}

fn screenshots() -> PathBuf {
    std::env::var_os("MESHBENCH_SCREENSHOTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_TARGET_TMPDIR")).join("screenshots"))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// The run page's progress text as `(done, total)`.
fn progress_of(text: &str) -> Option<(u64, u64)> {
    let (done, rest) = text.split_once('/')?;
    let total = rest.split_whitespace().next()?;
    Some((done.trim().parse().ok()?, total.parse().ok()?))
}

#[test]
fn the_smoke_profile_from_the_form_reaches_100_percent_and_shows_its_report() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let serve = Serve::start(&[]);
    runtime().block_on(async {
        let Some(browser) = Browser::open("smoke-run").await else {
            return;
        };
        browser.goto(&serve.login_url).await;
        browser.start_from_the_form(&serve.url, "smoke").await;
        browser.find("#progress-section").await;
        let mut seen_live = false;
        let mut seen_events = false;
        let mut highest = (0, 0);
        // Watch the progress until it says 100%; the page reloads with the report after.
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            let text = browser.text_now("#progress-text").await.unwrap_or_default();
            if !seen_live && browser.count("#live tbody tr").await > 1 {
                seen_live = true;
                browser.screenshot("progress").await;
            }
            seen_events |= browser
                .text_now("#log")
                .await
                .is_some_and(|log| log.contains("component started"));
            if let Some(p) = progress_of(&text) {
                highest = highest.max(p);
            }
            if text.contains("(100%)") {
                break;
            }
            if Instant::now() > deadline {
                browser.screenshot("timeout").await;
                panic!("the progress did not reach 100%; last {text:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(highest, (6, 6), "the smoke profile's six cells");
        assert!(seen_live, "the running cell's seconds were shown");
        assert!(seen_events, "the lab's events were shown");
        // The page reloads itself once the run is done: downloads and the report appear.
        browser
            .until_text(
                "the finished run's page",
                Duration::from_secs(20),
                "#downloads",
                |_| true,
            )
            .await;
        assert_eq!(browser.text("#status").await, "complete");
        assert_eq!(browser.count("#cells tbody tr").await, 6);
        assert!(
            browser.count("#downloads a").await >= 6 + 2 * 6,
            "files and exports"
        );
        // The page opens with what the run found: the sentences, one verdict per finding
        // and point, the charts; the cells and the downloads come after.
        let headings = browser.headings("main h2").await;
        let at = |heading: &str| {
            headings
                .iter()
                .position(|h| h == heading)
                .unwrap_or_else(|| panic!("no {heading:?} in {headings:?}"))
        };
        assert_eq!(at("At a glance"), 0, "{headings:?}");
        assert!(at("Findings, one verdict per point") < at("Charts"));
        assert!(at("Charts") < at("Finished cells") && at("Finished cells") < at("Downloads"));
        assert!(browser.count("#at-a-glance li").await >= 3, "the sentences");
        assert!(browser.count("#charts svg").await >= 2, "the main charts");
        let sentences = browser.text("#at-a-glance ul").await;
        assert!(
            sentences.contains("Of the study's 3 findings") && sentences.contains("requests"),
            "{sentences}"
        );
        browser.assert_cells_short("the run page").await;
        let report = browser.find("#report").await;
        report.enter_frame().await.unwrap();
        let charts = browser
            .until("the report's charts", PAGE_WAIT, || async {
                let n = browser.count("svg").await;
                (n > 0).then_some(n)
            })
            .await;
        assert!(charts >= 2, "{charts} charts");
        // The report opens the same way, and says no more in one cell than a reader takes in.
        let headings = browser.headings("h2").await;
        assert_eq!(
            headings[..3],
            ["At a glance", "Findings, one verdict per point", "Charts"],
            "{headings:?}"
        );
        browser.assert_cells_short("the report").await;
        browser.client.enter_parent_frame().await.unwrap();
        browser
            .client
            .execute("document.getElementById('report').scrollIntoView()", vec![])
            .await
            .unwrap();
        browser.screenshot("report").await;
        browser.goto(&format!("{}/", serve.url)).await;
        assert!(browser.text("table.runs").await.contains("complete"));
        browser.screenshot("runs").await;
        browser.close().await;
    });
}

#[test]
fn an_invalid_uploaded_spec_shows_its_error_at_the_field() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let serve = Serve::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("bad.yaml");
    let smoke = Command::new(env!("CARGO_BIN_EXE_meshbench"))
        .args(["profiles", "show", "smoke"])
        .output()
        .unwrap();
    std::fs::write(
        &spec,
        String::from_utf8(smoke.stdout)
            .unwrap()
            .replacen("- { rps: 400,", "- { rps: fast,", 1),
    )
    .unwrap();
    let cli = Command::new(env!("CARGO_BIN_EXE_meshbench"))
        .args(["run", "--spec"])
        .arg(&spec)
        .output()
        .unwrap();
    let cli_error = String::from_utf8_lossy(&cli.stderr).into_owned();
    runtime().block_on(async {
        let Some(browser) = Browser::open("invalid-spec").await else {
            return;
        };
        browser.goto(&serve.login_url).await;
        browser.goto(&format!("{}/runs/new", serve.url)).await;
        browser
            .find("#spec-file")
            .await
            .send_keys(spec.to_str().unwrap())
            .await
            .unwrap();
        browser.find("#start").await.click().await.unwrap();
        let error = browser.text("#error-spec").await;
        assert!(error.starts_with("spec: load.points[1].rps"), "{error}");
        let problem = error.strip_prefix("spec: ").unwrap();
        assert!(
            cli_error.contains(problem),
            "the CLI's message: {cli_error}\nthe page's: {error}"
        );
        let invalid = browser
            .find("#spec")
            .await
            .attr("aria-invalid")
            .await
            .unwrap();
        assert_eq!(invalid.as_deref(), Some("true"));
        let kept = browser
            .find("#spec")
            .await
            .prop("value")
            .await
            .unwrap()
            .unwrap_or_default();
        assert!(
            kept.contains("rps: fast"),
            "the uploaded spec is in the editor to fix"
        );
        browser.screenshot("new-run-error").await;
        browser.close().await;
    });
    assert!(
        std::fs::read_dir(&serve.results).unwrap().next().is_none(),
        "nothing ran"
    );
}

#[test]
fn two_runs_are_compared_with_their_significance() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let serve = Serve::start(&[]);
    // Two short real runs, queued one after the other over the API.
    let start = || {
        let created = serve.post_json(
            &format!("{}/api/runs", serve.url),
            &json!({"profile": "smoke", "backend": "loopback", "duration": "1s",
                    "scenarios": ["baseline", "baseline-mtls"]}),
        );
        assert_eq!(
            created.status,
            http::StatusCode::CREATED,
            "{}",
            created.text()
        );
        created.json()["id"].as_str().unwrap().to_owned()
    };
    let (a, b) = (start(), start());
    for id in [&a, &b] {
        let seen = serve.events(
            &format!("{}/api/runs/{id}/events", serve.url),
            Duration::from_secs(120),
            |name, _| name == "done",
        );
        assert_eq!(seen.last().unwrap().1["status"], "complete", "{seen:?}");
    }
    runtime().block_on(async {
        let Some(browser) = Browser::open("compare").await else {
            return;
        };
        browser.goto(&serve.login_url).await;
        browser.goto(&format!("{}/compare", serve.url)).await;
        browser.find("#a").await.select_by_value(&a).await.unwrap();
        browser.find("#b").await.select_by_value(&b).await.unwrap();
        browser.find("#compare").await.click().await.unwrap();
        let compared = browser.text("#compared").await;
        assert!(compared.contains(&a) && compared.contains(&b), "{compared}");
        assert!(browser.count("#comparison table").await >= 2);
        let tables = browser.text("#comparison").await;
        for needle in [
            "Mann-Whitney",
            "significant",
            "baseline-mtls",
            "200 rps / 4 conns",
        ] {
            assert!(tables.contains(needle), "{needle} in {tables}");
        }
        browser.screenshot("compare").await;
        browser.close().await;
    });
}

#[test]
fn an_e3_experiment_is_run_downloaded_loaded_back_and_analyzed() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let serve = Serve::start(&[]);
    runtime().block_on(async {
        let Some(browser) = Browser::open("e3").await else {
            return;
        };
        browser.goto(&serve.login_url).await;
        browser.goto(&format!("{}/e3", serve.url)).await;
        let requests = browser.find("#e3-requests").await;
        requests.clear().await.unwrap();
        requests.send_keys("50").await.unwrap();
        let label = browser.find("#e3-label").await;
        label.clear().await.unwrap();
        label.send_keys("browser test").await.unwrap();
        browser.find("#op-division").await.click().await.unwrap();
        browser.find("#e3-run").await.click().await.unwrap();
        browser
            .until_text(
                "the experiment's result",
                Duration::from_secs(60),
                "#e3-median",
                |median| !median.is_empty(),
            )
            .await;
        assert_eq!(browser.count("#e3-rtts li").await, 50);
        assert!(browser.text("#e3-mean").await.ends_with(" ms"));
        assert!(
            browser.count("#e3-histogram rect").await >= 5,
            "a histogram"
        );
        browser.screenshot("e3-result").await;

        browser.find("#e3-download").await.click().await.unwrap();
        let json_path = browser.downloaded(".json").await;
        let result: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
        assert_eq!(result["rttsInMilliseconds"].as_array().unwrap().len(), 50);
        assert_eq!(result["label"], "browser test");
        assert_eq!(
            result["workload"]["allowedOperations"],
            json!(["sum", "subtraction", "multiplication"])
        );

        // Load it back in a fresh page, then analyze.
        browser.goto(&format!("{}/e3", serve.url)).await;
        browser
            .find("#e3-load")
            .await
            .send_keys(json_path.to_str().unwrap())
            .await
            .unwrap();
        browser
            .until_text("the loaded result", PAGE_WAIT, "#e3-title", |title| {
                title == "Result: browser test"
            })
            .await;
        assert_eq!(browser.count("#e3-rtts li").await, 50);
        browser.find("#e3-analyze").await.click().await.unwrap();
        browser
            .until("the analysis", PAGE_WAIT, || async {
                let n = browser
                    .client
                    .find_all(Locator::Css("#e3-stats tr"))
                    .await
                    .ok()?
                    .len();
                (n > 0).then_some(())
            })
            .await;
        let stats = browser.text("#e3-stats").await;
        assert!(
            stats.contains("RTT99") && stats.contains("median"),
            "{stats}"
        );
        browser.find("#e3-csv").await.click().await.unwrap();
        let csv = std::fs::read_to_string(browser.downloaded(".csv").await).unwrap();
        let mut lines = csv.lines();
        assert!(
            lines.next().unwrap().starts_with("RTT90,RTT95,RTT99,count"),
            "{csv}"
        );
        let row: Vec<&str> = lines.next().unwrap().split(',').collect();
        assert_eq!(row[3], "49", "the first RTT left out: {csv}");
        browser.screenshot("e3-analysis").await;
        browser.close().await;
    });
}

#[test]
fn a_cancelled_run_is_marked_partial_with_its_finished_cells() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let serve = Serve::start(&[]);
    runtime().block_on(async {
        let Some(browser) = Browser::open("cancel").await else {
            return;
        };
        browser.goto(&serve.login_url).await;
        browser.start_from_the_form(&serve.url, "smoke").await;
        browser
            .until("a finished cell", Duration::from_secs(120), || async {
                let text = browser
                    .client
                    .find(Locator::Css("#progress-text"))
                    .await
                    .ok()?
                    .text()
                    .await
                    .ok()?;
                progress_of(&text)
                    .filter(|(done, _)| *done >= 1)
                    .map(|_| ())
            })
            .await;
        browser.find("#cancel").await.click().await.unwrap();
        browser
            .until_text(
                "the cancelled run's page",
                Duration::from_secs(60),
                "#downloads",
                |_| true,
            )
            .await;
        assert_eq!(browser.text("#status").await, "partial");
        assert_eq!(browser.text("#reason").await, "interrupted");
        let cells = browser.count("#cells tbody tr").await;
        assert!((1..6).contains(&cells), "{cells} finished cells kept");
        assert!(
            browser.count("#report").await == 1,
            "the partial run's report"
        );
        browser.screenshot("cancelled").await;
        browser.close().await;
    });
}

#[test]
fn without_a_token_beyond_loopback_it_refuses_and_with_one_it_asks_for_it() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let refused = Command::new(env!("CARGO_BIN_EXE_meshbench"))
        .args(["serve", "--listen", "0.0.0.0:0", "--results"])
        .arg(tempfile::tempdir().unwrap().path())
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("--listen 0.0.0.0:0: serving beyond loopback needs --token"),
        "{stderr}"
    );

    let token = "browser-test-token-0123456789";
    let serve = Serve::start(&["--token", token]);
    let unauthenticated = serving::get(&format!("{}/api/runs", serve.url));
    assert_eq!(unauthenticated.status, http::StatusCode::UNAUTHORIZED);
    runtime().block_on(async {
        let Some(browser) = Browser::open("token").await else {
            return;
        };
        browser.goto(&format!("{}/", serve.url)).await;
        browser.find("#token").await;
        assert_eq!(
            browser.count("table.runs").await,
            0,
            "nothing shown before signing in"
        );
        browser.screenshot("login").await;
        browser
            .find("#token")
            .await
            .send_keys("wrong-token-wrong-token")
            .await
            .unwrap();
        browser.find("#login").await.click().await.unwrap();
        assert_eq!(browser.text("#error-token").await, "wrong token");
        browser.find("#token").await.send_keys(token).await.unwrap();
        browser.find("#login").await.click().await.unwrap();
        browser
            .until_text("the runs page", PAGE_WAIT, "main", |main| {
                main.contains("No runs yet")
            })
            .await;
        browser.screenshot("signed-in").await;
        // Logging out ends the session: the next page asks for the token again.
        browser.find("#logout").await.click().await.unwrap();
        browser.find("#token").await;
        browser.goto(&format!("{}/runs/new", serve.url)).await;
        browser.find("#token").await;
        browser.close().await;
    });
}

#[test]
fn a_verification_is_started_from_the_form_and_a_matrix_shows_each_verdict() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    if !meshbench_testkit::require_netns() {
        return;
    }
    let serve = Serve::start(&[]);
    // A verification recorded on this lab, as the results directory would hold it.
    let recorded = serve.results.join("verify-recorded");
    std::fs::create_dir_all(&recorded).unwrap();
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../meshbench-results/schema/example-verify-v1.json"
        ),
        recorded.join("verify.json"),
    )
    .unwrap();
    runtime().block_on(async {
        let Some(browser) = Browser::open("verify").await else {
            return;
        };
        browser.goto(&serve.login_url).await;
        browser.goto(&format!("{}/verify", serve.url)).await;
        browser
            .find("#mesh-meshbench-sidecar")
            .await
            .click()
            .await
            .unwrap();
        browser.find("#start-verify").await.click().await.unwrap();
        // A real verification starts (its lab comes up), then is cancelled: a full one
        // takes minutes per mesh.
        browser
            .until_text(
                "the verification's lab events",
                Duration::from_secs(60),
                "#log",
                |log| log.contains("component started"),
            )
            .await;
        assert_eq!(
            browser.count("#live").await,
            0,
            "a verification has no load to chart"
        );
        browser.screenshot("verifying").await;
        browser.find("#cancel").await.click().await.unwrap();
        browser
            .until_text(
                "the cancelled verification",
                Duration::from_secs(60),
                "#status",
                |status| status == "cancelled",
            )
            .await;

        browser.goto(&format!("{}/verify", serve.url)).await;
        browser
            .find("a[href='/verify/verify-recorded']")
            .await
            .click()
            .await
            .unwrap();
        let matrix = browser.find("table.matrix").await;
        let passes = browser.count("table.matrix td.verdict-pass").await;
        assert!(passes >= 6, "{passes} passing cells");
        assert_eq!(browser.count("table.matrix td.verdict-fail").await, 0);
        let first = matrix
            .find(Locator::Css("td.verdict-pass details"))
            .await
            .unwrap();
        first
            .find(Locator::Css("summary"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        let evidence = first.text().await.unwrap();
        assert!(
            evidence.contains("expected") && evidence.contains("observed"),
            "{evidence}"
        );
        assert!(browser.text("#identity").await.contains("Identity checks"));
        browser.screenshot("matrix").await;
        browser.close().await;
    });
}
