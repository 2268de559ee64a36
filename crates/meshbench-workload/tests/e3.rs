//! E3's application over real sockets: the calculator's API and its 400s, the experimenter
//! running against a real calculator (groups that do not divide N, failures by class), the
//! analyzer's percentiles and the security checker's verdicts. The JSON shapes are checked
//! field by field: they are E3's contract.

mod common;

use std::time::Duration;

use common::{closed_port, post, request, start};
use http::Method;
use meshbench_workload::{
    Analyzer, Calculator, Echo, EchoConfig, Experimenter, Mix, SecurityChecker,
};
use serde_json::{json, Value};

#[tokio::test]
async fn the_calculator_answers_each_operation_with_a_result() {
    let calc = start(Calculator).await;
    for (path, expected) in [
        ("/add", 8.0),
        ("/subtract", 4.0),
        ("/multiply", 12.0),
        ("/divide", 3.0),
    ] {
        let (status, body) = post(calc.url(path), r#"{"firstNumber": 6, "secondNumber": 2}"#).await;
        assert_eq!(status, 200, "{path}: {body}");
        assert_eq!(body, json!({ "result": expected }), "{path}");
    }
    // E3's "bigger numbers" run: operands up to 10^16.
    let (status, body) = post(
        calc.url("/add"),
        r#"{"firstNumber": 10000000000000000, "secondNumber": 1}"#,
    )
    .await;
    assert_eq!(status, 200);
    assert!(body["result"].as_f64().unwrap() >= 1e16);
}

#[tokio::test]
async fn the_calculator_rejects_bad_input_with_400_naming_the_field() {
    let calc = start(Calculator).await;
    let cases = [
        ("/add", r#"{"secondNumber": 2}"#, "firstNumber: missing"),
        ("/add", r#"{"firstNumber": 1}"#, "secondNumber: missing"),
        (
            "/multiply",
            r#"{"firstNumber": "1", "secondNumber": 2}"#,
            "firstNumber: expected a number, got a string",
        ),
        (
            "/divide",
            r#"{"firstNumber": 1, "secondNumber": 0}"#,
            "secondNumber: division by zero",
        ),
        ("/add", "not json", "request body is not JSON"),
        ("/add", "[1, 2]", "expected a JSON object, got an array"),
    ];
    for (path, body, message) in cases {
        let (status, reply) = post(calc.url(path), body).await;
        assert_eq!(status, 400, "{path} {body}: {reply}");
        let error = reply["error"].as_str().unwrap();
        assert!(error.contains(message), "{path} {body}: {error}");
    }
    let call = request(Method::GET, calc.url("/add"), "").await;
    assert_eq!(call.outcome.to_string(), "http_405");
    let call = request(Method::POST, calc.url("/modulo"), "{}").await;
    assert_eq!(call.outcome.to_string(), "http_404");
    let call = request(Method::GET, calc.url("/healthz"), "").await;
    assert_eq!(call.outcome.to_string(), "http_200");
}

fn experimenter(calculator: &common::Running, timeout: Duration) -> Experimenter {
    Experimenter::new(&calculator.base(), timeout).unwrap()
}

#[tokio::test]
async fn an_experiment_runs_groups_that_do_not_divide_the_count_and_keeps_e3s_shape() {
    let calc = start(Calculator).await;
    let exp = start(experimenter(&calc, Duration::from_secs(5))).await;
    let request_body = json!({
        "interactions": 25,
        "batchSize": 10,
        "intervalBetweenBatchesInMilliseconds": 20,
        "allowedOperations": ["sum", "subtraction", "multiplication", "division"],
    });
    let (status, result) = post(
        exp.url("/api/experimenter/experiment"),
        &request_body.to_string(),
    )
    .await;
    assert_eq!(status, 200, "{result}");

    // E3's response fields, with their types.
    let rtts = result["rttsInMilliseconds"].as_array().unwrap();
    assert_eq!(rtts.len(), 25, "the original panicked when 25 % 10 != 0");
    assert!(rtts.iter().all(|r| r.as_f64().unwrap() > 0.0));
    assert_eq!(result["failures"], json!(0));
    assert_eq!(result["failuresByClass"], json!({}));
    for field in ["mean", "median", "standardDeviation"] {
        assert!(result[field].as_f64().unwrap() > 0.0, "{field}: {result}");
    }
    let workload = &result["workload"];
    assert_eq!(workload["interactions"], json!(25));
    assert_eq!(workload["batchSize"], json!(10));
    assert_eq!(workload["intervalBetweenBatchesInMilliseconds"], json!(20));
    assert_eq!(
        workload["allowedOperations"],
        json!(["sum", "subtraction", "multiplication", "division"])
    );
    // Three groups, so two pauses of 20 ms.
    assert!(
        result["elapsedMilliseconds"].as_f64().unwrap() >= 40.0,
        "{result}"
    );
}

#[tokio::test]
async fn an_experiment_counts_failures_by_class() {
    // A "calculator" that forbids everything, as a mesh's authorization policy would.
    let forbidding = start(Echo::new(&EchoConfig {
        status: Mix::always(http::StatusCode::FORBIDDEN),
        ..EchoConfig::fixed(Duration::ZERO, 0)
    }))
    .await;
    let exp = start(experimenter(&forbidding, Duration::from_secs(5))).await;
    let (status, result) = post(
        exp.url("/api/experimenter/experiment"),
        r#"{"interactions": 7, "batchSize": 3, "allowedOperations": ["sum"]}"#,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(result["failures"], json!(7));
    assert_eq!(result["failuresByClass"], json!({ "http_403": 7 }));
    assert_eq!(result["rttsInMilliseconds"], json!([]));
    assert_eq!(result["mean"], Value::Null);

    // Nothing listening: refused, not a 403.
    let closed = closed_port();
    let exp = Experimenter::new(
        &format!("http://{}", closed.addr).parse().unwrap(),
        Duration::from_secs(5),
    )
    .unwrap();
    let exp = start(exp).await;
    let (_, result) = post(
        exp.url("/api/experimenter/experiment"),
        r#"{"interactions": 3, "batchSize": 3, "allowedOperations": ["division"]}"#,
    )
    .await;
    assert_eq!(result["failuresByClass"], json!({ "connect_refused": 3 }));

    // A calculator slower than the timeout: timeouts.
    let slow = start(Echo::new(&EchoConfig::fixed(Duration::from_millis(500), 0))).await;
    let exp = start(experimenter(&slow, Duration::from_millis(50))).await;
    let (_, result) = post(
        exp.url("/api/experimenter/experiment"),
        r#"{"interactions": 2, "batchSize": 1}"#,
    )
    .await;
    assert_eq!(result["failuresByClass"], json!({ "timeout": 2 }));
}

#[tokio::test]
async fn a_bad_experiment_is_rejected_naming_the_field() {
    let calc = start(Calculator).await;
    let exp = start(experimenter(&calc, Duration::from_secs(5))).await;
    for (body, message) in [
        (
            r#"{"interactions": 0}"#,
            "interactions: expected a whole number from 1",
        ),
        (
            r#"{"batchSize": "ten"}"#,
            "batchSize: expected a whole number",
        ),
        (
            r#"{"allowedOperations": ["sum", "modulo"]}"#,
            "allowedOperations[1]: unknown operation \"modulo\"",
        ),
        (r#"{"allowedOperations": []}"#, "allowedOperations: empty"),
    ] {
        let (status, reply) = post(exp.url("/api/experimenter/experiment"), body).await;
        assert_eq!(status, 400, "{body}");
        let error = reply["error"].as_str().unwrap();
        assert!(error.contains(message), "{body}: {error}");
    }
}

#[tokio::test]
async fn the_analyzer_answers_e3s_percentiles_as_csv_and_full_statistics_as_json() {
    let analyzer = start(Analyzer).await;
    // 1..=100 ms: RTT90 = 90.1, RTT95 = 95.05, RTT99 = 99.01 (linear interpolation).
    let rtts: Vec<f64> = (1..=100).map(f64::from).collect();
    let result = json!({ "rttsInMilliseconds": rtts, "failures": 0 }).to_string();
    let call = request(Method::POST, analyzer.url("/api/analyzer/analyze"), &result).await;
    assert_eq!(call.outcome.to_string(), "http_200");
    let csv = String::from_utf8(call.body.to_vec()).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines[0], "RTT90,RTT95,RTT99");
    let row: Vec<f64> = lines[1].split(',').map(|v| v.parse().unwrap()).collect();
    for (got, want) in row.iter().zip([90.1, 95.05, 99.01]) {
        assert!((got - want).abs() < 1e-9, "{csv}");
    }

    let (status, stats) = post(
        analyzer.url("/api/analyzer/analyze?format=json&discardFirst=true"),
        &result,
    )
    .await;
    assert_eq!(status, 200);
    let summary = &stats["summary"];
    assert_eq!(summary["count"], json!(99), "the first RTT is dropped");
    assert_eq!(summary["min"], json!(2.0));
    for field in [
        "mean",
        "std_dev",
        "q1",
        "median",
        "q3",
        "max",
        "p90",
        "p95",
        "p99",
        "p999",
        "max_over_p99",
    ] {
        assert!(summary[field].is_number(), "{field}: {stats}");
    }

    let (status, reply) = post(
        analyzer.url("/api/analyzer/analyze"),
        r#"{"rttsInMilliseconds": [1, "two"]}"#,
    )
    .await;
    assert_eq!(status, 400);
    assert!(reply["error"]
        .as_str()
        .unwrap()
        .contains("rttsInMilliseconds[1]"));
}

#[tokio::test]
async fn the_security_checker_tells_a_403_from_a_refused_connection_and_a_timeout() {
    let calc = start(Calculator).await;
    let forbidding = start(Echo::new(&EchoConfig {
        status: Mix::always(http::StatusCode::FORBIDDEN),
        ..EchoConfig::fixed(Duration::ZERO, 0)
    }))
    .await;
    let slow = start(Echo::new(&EchoConfig::fixed(Duration::from_secs(2), 0))).await;
    let checker = start(SecurityChecker::new(
        "checker",
        "app",
        Duration::from_millis(300),
    ))
    .await;
    let check = |target: Value| {
        let url = checker.url("/api/security-checker/check");
        async move {
            let (status, report) = post(url, &target.to_string()).await;
            assert_eq!(status, 200, "{report}");
            report
        }
    };
    let report = check(json!({
        "host": "127.0.0.1", "port": calc.addr.port(), "path": "/add",
        "body": {"firstNumber": 1, "secondNumber": 2}, "marker": "mb-marker-1",
    }))
    .await;
    assert_eq!(report["outcome"], json!("http_200"), "{report}");
    assert_eq!(report["status"], json!(200));
    assert_eq!(report["allowed"], json!(true));
    assert_eq!(report["method"], json!("POST"));
    assert_eq!(report["checker"], json!("checker"));
    assert_eq!(report["namespace"], json!("app"));
    assert!(report["elapsedMilliseconds"].as_f64().unwrap() > 0.0);

    let report = check(json!({"host": "127.0.0.1", "port": forbidding.addr.port()})).await;
    assert_eq!(
        (report["outcome"].clone(), report["allowed"].clone()),
        (json!("http_403"), json!(false))
    );

    let closed = closed_port();
    let report = check(json!({"host": "127.0.0.1", "port": closed.addr.port()})).await;
    assert_eq!(report["outcome"], json!("connect_refused"), "{report}");
    assert_eq!(report["status"], Value::Null);
    assert!(report["error"].is_string());

    let report = check(json!({"host": "127.0.0.1", "port": slow.addr.port()})).await;
    assert_eq!(report["outcome"], json!("timeout"), "{report}");

    // A checker is a target too: it can check itself.
    let report =
        check(json!({"host": "127.0.0.1", "port": checker.addr.port(), "path": "/"})).await;
    assert_eq!(report["outcome"], json!("http_200"), "{report}");

    let (status, reply) = post(
        checker.url("/api/security-checker/check"),
        r#"{"port": 80}"#,
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(reply["error"], json!("host: missing"));
}
