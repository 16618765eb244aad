//! OBS-1: every worker logs under its own target (`relayer::<worker>`), and each pass runs in
//! a span recording its outcome, its report (the pass's counts) and its duration. A small
//! capturing layer records what the loop emits; no mocking library.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use relayer_core::{PassBackoff, async_trait};
use relayer_worker::{Leadership, Pass, PassLoop, PassOutcome, WorkerEvent, WorkerKind};
use tokio_util::sync::CancellationToken;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, SubscriberExt};

/// A span as captured: target, name and the fields recorded on it so far.
#[derive(Clone, Debug, Default)]
struct Captured {
    target: String,
    name: String,
    fields: HashMap<String, String>,
}

/// Records every span and its fields.
#[derive(Clone, Default)]
struct Capture {
    spans: Arc<Mutex<HashMap<u64, Captured>>>,
}

struct Fields<'a>(&'a mut HashMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _: Context<'_, S>) {
        let mut span = Captured {
            target: attrs.metadata().target().to_owned(),
            name: attrs.metadata().name().to_owned(),
            fields: HashMap::new(),
        };
        attrs.record(&mut Fields(&mut span.fields));
        self.spans.lock().unwrap().insert(id.into_u64(), span);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        if let Some(span) = self.spans.lock().unwrap().get_mut(&id.into_u64()) {
            values.record(&mut Fields(&mut span.fields));
        }
    }
}

/// A pass that reports a fixed count.
struct Counting;

#[derive(Clone, Debug)]
struct Counts(u64);

impl fmt::Display for Counts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sent={}", self.0)
    }
}

#[async_trait]
impl Pass for Counting {
    type Report = Counts;
    type Error = std::io::Error;

    async fn run_pass(&self, _: &CancellationToken) -> Result<PassOutcome<Counts>, std::io::Error> {
        Ok(PassOutcome::Led(Counts(7)))
    }
}

#[tokio::test]
async fn each_worker_has_its_target_and_each_pass_emits_a_span_with_its_counts_obs_1() {
    let capture = Capture::default();
    let _default = tracing::subscriber::set_default(tracing_subscriber::registry().with(capture.clone()));
    let kinds = [
        WorkerKind::Dispatcher,
        WorkerKind::Sweeper,
        WorkerKind::Cleanup,
        WorkerKind::DeadLetter,
        WorkerKind::Consumer,
    ];
    for kind in kinds {
        let backoff = PassBackoff::new(Duration::from_secs(60), Duration::from_secs(60)).unwrap();
        let pass_loop = PassLoop::new(kind, Counting, backoff, Leadership::EveryInstance);
        let mut events = pass_loop.subscribe();
        let mut handle = pass_loop.spawn(CancellationToken::new());
        loop {
            if let WorkerEvent::PassSucceeded { .. } = events.recv().await.unwrap() {
                break;
            }
        }
        handle.shutdown().await;
    }
    let spans = capture.spans.lock().unwrap();
    for kind in kinds {
        let target = format!("relayer::{}", kind.name());
        let pass = spans
            .values()
            .find(|span| span.target == target && span.name == "pass")
            .unwrap_or_else(|| panic!("no pass span under {target}: {spans:?}"));
        assert_eq!(pass.fields.get("report").map(String::as_str), Some("sent=7"), "{pass:?}");
        assert_eq!(pass.fields.get("outcome").map(String::as_str), Some("led"), "{pass:?}");
        assert_eq!(pass.fields.get("number").map(String::as_str), Some("1"), "{pass:?}");
        assert!(pass.fields.contains_key("duration_ms"), "{pass:?}");
    }
}
