//! Response knobs that vary per request: "value:percent" mixes as Fortio's echo server reads
//! them (`delay=250ms:10,1s:0.5`, `status=503:20`, `size=4KiB`). A value without a percent
//! applies to every request.
//!
//! Which requests get which value is decided by a Weyl sequence (n * golden ratio mod 1) over
//! the request count instead of a random draw: over any window of requests the shares are as
//! close to the declared percentages as integers allow, so a short benchmark sees the mix it
//! asked for, and two runs see the same one.

use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// 2^64 / golden ratio: stepping by it visits [0, 2^64) evenly.
const WEYL_STEP: u64 = 0x9E37_79B9_7F4A_7C15;

#[derive(Debug, Clone, PartialEq)]
pub struct Mix<T> {
    /// (value, percent of requests); percents sum to at most 100.
    entries: Vec<(T, f64)>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{knob}={spec:?}: {problem}")]
pub struct MixError {
    pub knob: &'static str,
    pub spec: String,
    pub problem: String,
}

impl<T: Clone> Mix<T> {
    pub fn always(value: T) -> Self {
        Mix {
            entries: vec![(value, 100.0)],
        }
    }

    /// Parses `v1[:p1],v2[:p2],...` with `parse_value` for each value.
    pub fn parse(
        knob: &'static str,
        spec: &str,
        parse_value: impl Fn(&str) -> Result<T, String>,
    ) -> Result<Self, MixError> {
        let err = |problem: String| MixError {
            knob,
            spec: spec.to_owned(),
            problem,
        };
        let mut entries = Vec::new();
        let mut total = 0.0;
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (value, percent) = match part.rsplit_once(':') {
                Some((value, percent)) => {
                    let percent = f64::from_str(percent)
                        .ok()
                        .filter(|p| (0.0..=100.0).contains(p))
                        .ok_or_else(|| {
                            err(format!("percent {percent:?} is not a number from 0 to 100"))
                        })?;
                    (value, percent)
                }
                None => (part, 100.0),
            };
            let value =
                parse_value(value).map_err(|problem| err(format!("{value:?}: {problem}")))?;
            total += percent;
            entries.push((value, percent));
        }
        if entries.is_empty() {
            return Err(err("no value given".to_owned()));
        }
        if total > 100.0 + 1e-9 {
            return Err(err(format!("percents add up to {total}, more than 100")));
        }
        Ok(Mix { entries })
    }

    /// The value for the request whose position in the sequence is `ticket`; `None` when the
    /// ticket falls in the share no entry claims (the caller's default applies).
    pub fn pick(&self, ticket: u64) -> Option<T> {
        if let [(value, percent)] = self.entries.as_slice() {
            if *percent >= 100.0 {
                return Some(value.clone());
            }
        }
        let point = (ticket.wrapping_mul(WEYL_STEP) as f64 / u64::MAX as f64) * 100.0;
        let mut cumulative = 0.0;
        for (value, percent) in &self.entries {
            cumulative += percent;
            if point < cumulative {
                return Some(value.clone());
            }
        }
        None
    }
}

/// Hands out the sequence positions [`Mix::pick`] maps to values.
#[derive(Debug, Default)]
pub struct Tickets(AtomicU64);

impl Tickets {
    pub fn next(&self) -> u64 {
        self.0.fetch_add(1, Ordering::Relaxed)
    }
}

/// Longest delay a request may ask for, so a typo cannot park a connection for hours.
pub const MAX_DELAY: Duration = Duration::from_secs(60);
/// Largest body a request may ask for.
pub const MAX_SIZE: usize = 64 * 1024 * 1024;

pub fn parse_delay(value: &str) -> Result<Duration, String> {
    let delay = humantime::parse_duration(value)
        .map_err(|e| format!("{e} (expected a duration such as 250us, 10ms or 1s)"))?;
    if delay > MAX_DELAY {
        return Err(format!("longer than the {}s limit", MAX_DELAY.as_secs()));
    }
    Ok(delay)
}

pub fn parse_size(value: &str) -> Result<usize, String> {
    let size = value
        .parse::<bytesize::ByteSize>()
        .map_err(|e| format!("{e} (expected a size such as 0, 1024 or 4KiB)"))?
        .as_u64();
    usize::try_from(size)
        .ok()
        .filter(|s| *s <= MAX_SIZE)
        .ok_or_else(|| format!("larger than the {} MiB limit", MAX_SIZE >> 20))
}

pub fn parse_status(value: &str) -> Result<http::StatusCode, String> {
    value
        .parse::<u16>()
        .ok()
        .and_then(|code| http::StatusCode::from_u16(code).ok())
        .filter(|code| code.as_u16() >= 200)
        .ok_or_else(|| "expected an HTTP status code from 200 to 999".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_follow_the_declared_percents() {
        let mix = Mix::parse("status", "503:20,404:5", parse_status).unwrap();
        let picks: Vec<_> = (0..10_000).map(|t| mix.pick(t)).collect();
        let count = |code: u16| {
            picks
                .iter()
                .filter(|p| p.map(|s| s.as_u16()) == Some(code))
                .count()
        };
        assert!((1990..=2010).contains(&count(503)), "{}", count(503));
        assert!((490..=510).contains(&count(404)), "{}", count(404));
        assert_eq!(
            picks.iter().filter(|p| p.is_none()).count(),
            10_000 - count(503) - count(404)
        );
    }

    #[test]
    fn a_bare_value_applies_to_every_request() {
        let mix = Mix::parse("delay", "10ms", parse_delay).unwrap();
        assert!((0..100).all(|t| mix.pick(t) == Some(Duration::from_millis(10))));
    }

    #[test]
    fn bad_specs_name_the_knob_and_the_problem() {
        let e = Mix::parse("status", "503:60,404:50", parse_status).unwrap_err();
        assert!(e.to_string().contains("more than 100"), "{e}");
        let e = Mix::parse("status", "99", parse_status).unwrap_err();
        assert!(e.to_string().starts_with("status=\"99\""), "{e}");
        let e = Mix::parse("delay", "2h", parse_delay).unwrap_err();
        assert!(e.to_string().contains("limit"), "{e}");
        assert!(Mix::parse("size", "1KiB:abc", parse_size).is_err());
    }
}
