//! The calculator role, E3's API exactly: `POST /add`, `/subtract`, `/multiply` and `/divide`
//! with `{"firstNumber": n, "secondNumber": n}` answer `{"result": x}`; a missing key, a value
//! that is not a JSON number, or a division by zero is a 400 saying which.

use std::sync::Arc;

use http::{Request, StatusCode};
use hyper::body::Incoming;

use crate::fields;
use crate::http::{error, json, not_found, post_json_object, Reply, Role};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Add,
    Subtract,
    Multiply,
    Divide,
}

impl Operation {
    pub const ALL: [Operation; 4] = [
        Operation::Add,
        Operation::Subtract,
        Operation::Multiply,
        Operation::Divide,
    ];

    /// The calculator's path for this operation.
    pub fn path(self) -> &'static str {
        match self {
            Operation::Add => "/add",
            Operation::Subtract => "/subtract",
            Operation::Multiply => "/multiply",
            Operation::Divide => "/divide",
        }
    }

    /// The experimenter's name for it (`allowedOperations`).
    pub fn experiment_name(self) -> &'static str {
        match self {
            Operation::Add => "sum",
            Operation::Subtract => "subtraction",
            Operation::Multiply => "multiplication",
            Operation::Divide => "division",
        }
    }

    pub fn from_path(path: &str) -> Option<Operation> {
        Operation::ALL.into_iter().find(|op| op.path() == path)
    }

    pub fn from_experiment_name(name: &str) -> Option<Operation> {
        Operation::ALL
            .into_iter()
            .find(|op| op.experiment_name() == name)
    }

    pub fn apply(self, first: f64, second: f64) -> Result<f64, String> {
        let result = match self {
            Operation::Add => first + second,
            Operation::Subtract => first - second,
            Operation::Multiply => first * second,
            Operation::Divide if second == 0.0 => {
                return Err("secondNumber: division by zero".to_owned())
            }
            Operation::Divide => first / second,
        };
        if result.is_finite() {
            Ok(result)
        } else {
            Err(format!(
                "the result of {first} and {second} is out of range"
            ))
        }
    }
}

#[derive(Debug, Default)]
pub struct Calculator;

impl Role for Calculator {
    const NAME: &'static str = "calculator";

    async fn handle(self: Arc<Self>, req: Request<Incoming>) -> Reply {
        let Some(operation) = Operation::from_path(req.uri().path()) else {
            return not_found(&req);
        };
        let object = match post_json_object(req, operation.path()).await {
            Ok(object) => object,
            Err(reply) => return reply,
        };
        let result = fields::number(&object, "firstNumber").and_then(|first| {
            let second = fields::number(&object, "secondNumber")?;
            operation.apply(first, second)
        });
        match result {
            Ok(result) => json(StatusCode::OK, &serde_json::json!({ "result": result })),
            Err(message) => error(StatusCode::BAD_REQUEST, message),
        }
    }
}
