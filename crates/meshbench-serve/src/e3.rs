//! E3's experimenter frontend, server side: the server starts E3's calculator (the workload
//! role, a real HTTP server on loopback) and runs the experimenter library against it, as
//! E3's experimenter service did; the analysis is the analyzer role's. A meshed E3 run (the
//! calculator behind a mesh) is the `zero-trust-app` profile, started like any run.

use std::net::SocketAddr;
use std::time::Duration;

use http::Uri;
use meshbench_workload::{
    Analysis, Calculator as CalculatorRole, Experimenter, RoleService, Workload,
};
use serde_json::{Map, Value};

/// The largest experiment the frontend runs (E3's was 10,000 requests).
pub const MAX_INTERACTIONS: u64 = 100_000;
/// Each call to the calculator must answer within this.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// The calculator the frontend's experiments call, serving until the server stops.
pub struct Calculator {
    addr: SocketAddr,
    _server: tokio::task::JoinHandle<()>,
}

impl Calculator {
    pub async fn start() -> Result<Calculator, crate::Error> {
        let bound = meshbench_workload::bind(&meshbench_workload::ServeOptions {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            tls: None,
            drain_timeout: Duration::from_secs(1),
        })
        .await?;
        let addr = bound.local_addr();
        let server = tokio::spawn(bound.serve(
            RoleService::new(CalculatorRole),
            std::future::pending::<()>(),
        ));
        Ok(Calculator {
            addr,
            _server: server,
        })
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Calculator {
    fn drop(&mut self) {
        self._server.abort();
    }
}

/// Runs E3's experiment (E3's request body) against the calculator; `Err` names the field.
pub async fn experiment(
    calculator: &Calculator,
    body: &Map<String, Value>,
) -> Result<Value, String> {
    let workload = Workload::parse(body)?;
    if workload.interactions > MAX_INTERACTIONS {
        return Err(format!(
            "interactions: at most {MAX_INTERACTIONS} from the frontend (got {})",
            workload.interactions
        ));
    }
    let uri: Uri = calculator
        .url()
        .parse()
        .map_err(|e| format!("the calculator's address: {e}"))?;
    let experimenter = Experimenter::new(&uri, CALL_TIMEOUT).map_err(|e| e.to_string())?;
    let result = experimenter.run(&workload).await;
    serde_json::to_value(&result).map_err(|e| e.to_string())
}

/// The analysis of an experiment result (E3's JSON): meshbench's full statistics.
pub fn analyze(result: &Map<String, Value>, discard_first: bool) -> Result<Analysis, String> {
    let rtts = meshbench_workload::rtts_of(result)?;
    Ok(Analysis::of(&rtts, discard_first))
}

/// The analysis as CSV: E3's RTT90/95/99 columns first, then every statistic, in ms.
pub fn analysis_csv(analysis: &Analysis) -> String {
    let header = "RTT90,RTT95,RTT99,count,mean,std_dev,min,q1,median,q3,max,p99.9,max_over_p99,discarded_first";
    let row = match &analysis.summary {
        Some(s) => format!(
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            s.p90,
            s.p95,
            s.p99,
            s.count,
            s.mean,
            s.std_dev,
            s.min,
            s.q1,
            s.median,
            s.q3,
            s.max,
            s.p999,
            s.max_over_p99.map(|r| r.to_string()).unwrap_or_default(),
            analysis.discarded_first
        ),
        None => format!(",,,0,,,,,,,,,,{}", analysis.discarded_first),
    };
    format!("{header}\n{row}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[tokio::test]
    async fn an_experiment_against_the_real_calculator_answers_e3s_fields() {
        let calculator = Calculator::start().await.unwrap();
        let result = experiment(
            &calculator,
            &object(serde_json::json!({"interactions": 20, "batchSize": 5, "allowedOperations": ["sum", "division"]})),
        )
        .await
        .unwrap();
        assert_eq!(result["rttsInMilliseconds"].as_array().unwrap().len(), 20);
        assert_eq!(result["failures"], 0);
        assert!(result["median"].as_f64().unwrap() > 0.0);
        let analysis = analyze(result.as_object().unwrap(), true).unwrap();
        assert_eq!(analysis.summary.as_ref().unwrap().count, 19);
        let csv = analysis_csv(&analysis);
        let mut lines = csv.lines();
        assert!(lines.next().unwrap().starts_with("RTT90,RTT95,RTT99,"));
        assert_eq!(lines.next().unwrap().split(',').count(), 14);
    }

    #[tokio::test]
    async fn bad_experiments_name_their_field() {
        let calculator = Calculator::start().await.unwrap();
        let too_many = experiment(
            &calculator,
            &object(serde_json::json!({"interactions": MAX_INTERACTIONS + 1})),
        )
        .await
        .unwrap_err();
        assert!(too_many.starts_with("interactions:"), "{too_many}");
        let bad_op = experiment(
            &calculator,
            &object(serde_json::json!({"allowedOperations": ["modulo"]})),
        )
        .await
        .unwrap_err();
        assert!(bad_op.starts_with("allowedOperations[0]:"), "{bad_op}");
        let not_a_result = analyze(&object(serde_json::json!({"rtts": []})), false).unwrap_err();
        assert!(
            not_a_result.starts_with("rttsInMilliseconds:"),
            "{not_a_result}"
        );
    }
}
