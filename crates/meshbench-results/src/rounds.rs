//! Rounds until decided: a run's repetitions may go on, round after round, until every finding
//! of its study is decided (held or did not hold), within a most-rounds and a time budget. The
//! spec's or command line's settings, and why the run stopped where it did.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The stopping rule of a run of rounds until decided.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UntilDecided {
    /// The most rounds (repetitions of every cell): also the number of looks the findings'
    /// intervals are valid over.
    pub max_rounds: u32,
    /// Wall-clock time the rounds may take, cells and backgrounds included; a round that would
    /// not fit is not started. Absent: as long as the most rounds take.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_seconds: Option<f64>,
}

/// Why a run of rounds until decided stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum StopReason {
    /// Every finding that could be checked was decided.
    Decided,
    /// The most rounds ran.
    MostRounds,
    /// Another round would not have fitted in the budget.
    Budget,
}

impl StopReason {
    pub fn describe(self) -> &'static str {
        match self {
            StopReason::Decided => "every finding was decided",
            StopReason::MostRounds => "the most rounds ran",
            StopReason::Budget => "another round would not have fitted in the time budget",
        }
    }
}

/// Where a run of rounds until decided stopped, and why.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RoundsStop {
    pub rounds: u32,
    pub reason: StopReason,
    /// Wall-clock seconds the rounds took (this run's, a resumed part's included).
    pub seconds: f64,
}
