//! The largest value every numeric field of a spec may take, and the YAML a spec may use.
//! A spec comes from a user's file or from `meshbench serve`'s API, so the same bounds hold
//! for both: they are checked where a spec is validated ([`crate::parse_spec`]) and where the
//! command line or a request overrides a field ([`crate::Profile::set_duration`]). Each is far
//! beyond what the studies ran (E1's largest point: 12,800 rps over 6,400 connections for 5
//! minutes; E3: 10,000 requests) and small enough that no product of them overflows.

use std::time::Duration;

/// A cell's measured duration (E1 and E2 ran 5 and 10 minutes).
pub const MAX_DURATION: Duration = Duration::from_secs(24 * 3600);
/// Warm-up and cool-down around each cell.
pub const MAX_WARMUP: Duration = Duration::from_secs(3600);
/// Each request's timeout, the gap between E3's groups, and the sampling interval.
pub const MAX_SHORT_DURATION: Duration = Duration::from_secs(600);
/// A constant rate, and the capacity search's rates.
pub const MAX_RPS: f64 = 1_000_000.0;
/// Connections of a load point, and users of E4's model (each user has a connection).
pub const MAX_CONNECTIONS: u64 = 65_536;
/// Requests of a sequential point, requests per user, and E3's group size.
pub const MAX_REQUESTS: u64 = 10_000_000;
/// Repetitions of a load point (E2 ran 8).
pub const MAX_REPETITIONS: u32 = 1_000;
/// Cells of one run: scenarios x placements x points x repetitions (or capacity steps).
pub const MAX_CELLS: usize = 100_000;

/// Why a YAML text is refused before it is parsed into values: anchors and aliases, whose
/// expansion is unbounded (a 12 KB "billion laughs" spec asked for hundreds of MiB), and
/// text that is not YAML at all. `Err((line, problem))`, lines counted from 1.
pub fn plain_yaml(text: &str) -> Result<(), (usize, String)> {
    for event in saphyr_parser::Parser::new_from_str(text) {
        let (event, span) = event.map_err(|e| (e.marker().line(), e.info().to_owned()))?;
        use saphyr_parser::Event as E;
        let anchored = match event {
            E::Alias(_) => {
                return Err((
                    span.start.line(),
                    "YAML aliases (*name) are not accepted in a spec: write the value out".into(),
                ))
            }
            E::Scalar(_, _, anchor, _)
            | E::SequenceStart(anchor, _)
            | E::MappingStart(anchor, _) => anchor != 0,
            _ => false,
        };
        if anchored {
            return Err((
                span.start.line(),
                "YAML anchors (&name) are not accepted in a spec: write each value out".into(),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anchors_and_aliases_are_refused_at_their_line() {
        assert!(plain_yaml("a: 1\nb: [x, 'y &z', \"*w\"]\n# &c *d\n").is_ok());
        let (line, problem) = plain_yaml("a: 1\nb: &x [1, 2]\nc: 3\n").unwrap_err();
        assert_eq!(line, 2, "{problem}");
        assert!(problem.contains("anchors"), "{problem}");
        // An alias to an anchor the parser never saw is still an alias.
        let (line, problem) = plain_yaml("a: 1\n\nc: *x\n").unwrap_err();
        assert_eq!(line, 3, "{problem}");
        let (line, _) = plain_yaml("a: [1, 2\nb: 3\n").unwrap_err();
        assert!(line >= 1);
    }

    /// Nodes in a parsed value: what alias expansion would multiply.
    fn nodes(value: &serde_yaml_ng::Value) -> usize {
        use serde_yaml_ng::Value as V;
        1 + match value {
            V::Sequence(items) => items.iter().map(nodes).sum(),
            V::Mapping(map) => map.iter().map(|(k, v)| nodes(k) + nodes(v)).sum(),
            V::Tagged(tagged) => nodes(&tagged.value),
            _ => 0,
        }
    }

    proptest::proptest! {
        /// Whatever the text, the scan ends without a panic, and a text it passes parses into
        /// no more nodes than it has characters: nothing was expanded.
        #[test]
        fn any_text_is_scanned_safely(text in "[a-z:&*\\[\\]{}, \n'\"#-]{0,80}") {
            if plain_yaml(&text).is_ok() {
                if let Ok(value) = serde_yaml_ng::from_str::<serde_yaml_ng::Value>(&text) {
                    proptest::prop_assert!(nodes(&value) <= text.len() + 1);
                }
            }
        }
    }
}
