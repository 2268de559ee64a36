//! The lab's events (a component started, a component failed and why) as a tracing layer:
//! the lab emits them under [`meshbench_lab::LAB_EVENTS`], and the job that is running
//! receives them as lines. Only one job runs at a time, so every lab event is that job's.

use std::fmt::Write as _;

use tokio::sync::broadcast;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::Layer;

/// One event of the lab, as a watcher shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LabEvent {
    /// `info` or `warn`.
    pub level: &'static str,
    pub text: String,
}

/// Events a lab can emit between two reads; older ones are dropped for a slow reader.
const BACKLOG: usize = 1024;

/// The layer, and the handle jobs subscribe with. Cloning shares the channel.
#[derive(Debug, Clone)]
pub struct LabEvents {
    sender: broadcast::Sender<LabEvent>,
}

impl Default for LabEvents {
    fn default() -> Self {
        LabEvents {
            sender: broadcast::channel(BACKLOG).0,
        }
    }
}

impl LabEvents {
    pub fn new() -> Self {
        LabEvents::default()
    }

    pub fn subscribe(&self) -> broadcast::Receiver<LabEvent> {
        self.sender.subscribe()
    }

    /// The layer to install with the process's tracing subscriber.
    pub fn layer<S>(&self) -> impl Layer<S> + Send + Sync + 'static
    where
        S: Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    {
        use tracing_subscriber::filter::filter_fn;
        let layer = EventLayer {
            sender: self.sender.clone(),
        };
        layer.with_filter(filter_fn(|meta| {
            meta.target() == meshbench_lab::LAB_EVENTS && *meta.level() <= Level::INFO
        }))
    }
}

struct EventLayer {
    sender: broadcast::Sender<LabEvent>,
}

impl<S: Subscriber> Layer<S> for EventLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        if self.sender.receiver_count() == 0 {
            return;
        }
        let mut fields = Fields::default();
        event.record(&mut fields);
        let level = if *event.metadata().level() <= Level::WARN {
            "warn"
        } else {
            "info"
        };
        // Nobody listening is not an error: no job runs.
        let _ = self.sender.send(LabEvent {
            level,
            text: fields.line(),
        });
    }
}

/// `message: component (role), key value ...`
#[derive(Default)]
struct Fields {
    message: String,
    component: String,
    role: String,
    rest: String,
}

impl Fields {
    fn line(&self) -> String {
        let mut line = self.message.clone();
        if !self.component.is_empty() {
            let _ = write!(line, ": {}", self.component);
            if !self.role.is_empty() {
                let _ = write!(line, " ({})", self.role);
            }
        }
        line + &self.rest
    }
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.record_str(field, &format!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "message" => self.message = value.to_owned(),
            "component" => self.component = value.to_owned(),
            "role" => self.role = value.to_owned(),
            name => {
                let _ = write!(self.rest, ", {name} {value}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    #[test]
    fn lab_events_reach_a_subscriber_and_other_events_do_not() {
        let events = LabEvents::new();
        let mut receiver = events.subscribe();
        let subscriber = tracing_subscriber::registry().with(events.layer());
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(target: meshbench_lab::LAB_EVENTS, component = "server-sidecar", role = "sidecar", pid = 42, "component started");
            tracing::info!("unrelated");
            tracing::warn!(target: meshbench_lab::LAB_EVENTS, component = "ca", role = "control-plane", error = "not ready in 20 s", "component failed");
        });
        let first = receiver.try_recv().unwrap();
        assert_eq!(first.level, "info");
        assert_eq!(
            first.text,
            "component started: server-sidecar (sidecar), pid 42"
        );
        let second = receiver.try_recv().unwrap();
        assert_eq!(second.level, "warn");
        assert_eq!(
            second.text,
            "component failed: ca (control-plane), error not ready in 20 s"
        );
        assert!(receiver.try_recv().is_err());
    }
}
