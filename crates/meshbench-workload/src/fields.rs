//! Reading fields of a JSON request with errors that name the field and what was wrong with
//! it (`interactions: expected a whole number from 1 to 10000000, got -3`).

use serde_json::{Map, Value};

use crate::http::kind;

pub type Object = Map<String, Value>;

pub fn number(object: &Object, name: &str) -> Result<f64, String> {
    match object.get(name) {
        None => Err(format!("{name}: missing")),
        Some(Value::Number(n)) => n
            .as_f64()
            .filter(|v| v.is_finite())
            .ok_or_else(|| format!("{name}: {n} is out of range")),
        Some(other) => Err(format!("{name}: expected a number, got {}", kind(other))),
    }
}

/// A whole number in `min..=max`; `default` when the field is absent (required if `None`).
pub fn whole(
    object: &Object,
    name: &str,
    default: Option<u64>,
    min: u64,
    max: u64,
) -> Result<u64, String> {
    let expected = || format!("{name}: expected a whole number from {min} to {max}");
    match object.get(name) {
        None => default.ok_or_else(|| format!("{name}: missing")),
        Some(Value::Number(n)) => n
            .as_u64()
            .filter(|v| (min..=max).contains(v))
            .ok_or_else(|| format!("{}, got {n}", expected())),
        Some(other) => Err(format!("{}, got {}", expected(), kind(other))),
    }
}

pub fn string<'a>(object: &'a Object, name: &str) -> Result<Option<&'a str>, String> {
    match object.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(format!("{name}: expected a string, got {}", kind(other))),
    }
}

pub fn strings<'a>(object: &'a Object, name: &str) -> Result<Vec<&'a str>, String> {
    match object.get(name) {
        None => Err(format!("{name}: missing")),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                item.as_str()
                    .ok_or_else(|| format!("{name}[{i}]: expected a string, got {}", kind(item)))
            })
            .collect(),
        Some(other) => Err(format!("{name}: expected an array, got {}", kind(other))),
    }
}
