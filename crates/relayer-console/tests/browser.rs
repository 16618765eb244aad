//! The console in a real browser (OBS-3, DLP-7, LAN-2): headless Chromium over WebDriver
//! against a console serving a namespace whose backlog, parked lane, dead rows and dead
//! letters were made by relayer's own writer, dispatcher, queue and consumer. The pages'
//! counts must match the database; a redrive and a release done by clicking must act and be
//! audited under the configured actor; actions must be refused when off, and a form posted
//! without its CSRF token refused.
#![allow(clippy::unwrap_used)]

mod support;

use relayer_console::{ActorSource, ConsoleSettings};
use support::browser::{Session, browser_or_skip};
use support::http::{form, request};
use support::{LANE, REFUSAL, REJECTION, Scene, serve};

fn settings(actions: bool) -> ConsoleSettings {
    let mut settings = ConsoleSettings::new("127.0.0.1:0".parse().unwrap());
    if actions {
        settings.actions = true;
        settings.actor = Some(ActorSource::Name("browser-test".to_owned()));
    }
    settings
}

/// The number at the start of a cell's text (`≈` aside).
fn number(text: &str) -> i64 {
    text.trim().trim_start_matches('≈').parse().unwrap_or_else(|_| panic!("not a count: {text:?}"))
}

/// OBS-3: every page's counts are the database's, and what the database holds (markup,
/// direction controls) is shown as text, never run.
#[tokio::test]
async fn the_pages_show_the_database_counts_in_a_browser_obs_3() {
    let Some(browser) = browser_or_skip("the_pages_show_the_database_counts_in_a_browser_obs_3") else {
        return;
    };
    let scene = Scene::new().await;
    let (outbox, d1, d2) = (
        scene.count("outbox", "true").await,
        scene.count("outbox", "destination = 'd1'").await,
        scene.count("outbox", "destination = 'd2'").await,
    );
    let parked = scene.count("lanes", "parked_at IS NOT NULL").await;
    let dead = scene.count("dead", "true").await;
    let letters = scene.count("queue", "dead_lettered_at IS NOT NULL").await;
    assert_eq!((outbox, d1, d2, parked, dead, letters), (8, 3, 2, 1, 2, 3), "the scene");
    let served = serve(&scene.db, settings(false));
    let session = Session::start(&browser);

    session.open(&served.url("/"));
    assert_eq!(number(&session.text("#outbox-pending")), outbox);
    assert_eq!(number(&session.text("td.pending[data-destination='d1']")), d1);
    assert_eq!(number(&session.text("td.pending[data-destination='d2']")), d2);
    assert_eq!(number(&session.text("#lanes-parked")), parked);
    assert_eq!(number(&session.text("#dead-rows")), dead);
    assert_eq!(number(&session.text("#dead-letters")), letters);
    assert_eq!(session.attribute("#chart", "data-samples").as_deref(), Some("60"), "the last hour's samples");
    // No live instance registers `nowhere`, nor (its host stopped) `refusing`, whose lane
    // rows wait behind the parked head (TRN-6).
    assert_eq!(session.count("#unserved tbody tr"), 2);
    assert_eq!(number(&session.text("td.unserved[data-transport='nowhere']")), d1 + d2);
    assert_eq!(session.text("#mode"), "read-only");

    session.open(&served.url("/lanes"));
    assert_eq!(session.count("#lanes tbody tr"), usize::try_from(parked).unwrap());
    assert_eq!(session.text("td.lane"), LANE);
    let error = session.text("td.head-error");
    assert!(error.ends_with(REFUSAL), "the head's error, markup shown as text: {error}");
    let behind = scene.count("outbox", &format!("lane = '{LANE}'")).await;
    assert_eq!(number(&session.text("td.waiting")), behind);
    assert_eq!(session.count("a[href*='action=release']"), 0, "no action offered when actions are off");

    session.open(&served.url(&format!("/dead-letters?queue={}", scene.dead_letter_queue)));
    assert_eq!(number(&session.text("#listed-count")), letters);
    assert_eq!(session.count("#letters tbody tr"), usize::try_from(letters).unwrap());
    let summary: i64 = session.texts("#letters-summary td.letters").iter().map(|t| number(t)).sum();
    assert_eq!(summary, letters);
    assert_eq!(session.text("#dead-rows").trim(), dead.to_string());
    session.open(&served.url("/dead-letters?kind=outbox"));
    assert_eq!(session.count("#letters tbody tr"), usize::try_from(dead).unwrap());

    let id = scene.letters[0];
    session.open(&served.url(&format!("/dead-letters/message/{id}")));
    assert_eq!(session.text("#queue-body"), "<order n=\"0\"/> & more", "the body, as text");
    assert!(session.text("#queue-headers").contains("order<script>"), "a header, as text");
    // The rejection's markup is text, and its direction control shows as an escape.
    let fields = session.text("table.fields");
    assert!(fields.contains(&REJECTION.replace('\u{202e}', "\\u{202e}")), "{fields}");
    assert_eq!(session.count("main script"), 0, "no markup from the database is live");
    session.open(&served.url(&format!("/dead-letters/message/{id}?view=hex")));
    assert!(session.text("#queue-body").starts_with("00000000  3c 6f 72 64 65 72"), "the body, as hex");

    session.open(&served.url("/workers"));
    assert_eq!(session.text("h1"), "Workers");
    session.open(&served.url("/doctor"));
    assert_eq!(session.count("#doctor-unavailable"), 1);

    // Off means off: the preview page, and a POST with a valid-looking form, are refused.
    session.open(&served.url(&format!("/actions/preview?action=redrive&id={id}")));
    assert!(session.text("#failure").starts_with("actions are off"), "{}", session.source());
    let posted = request(
        &served.address,
        "POST",
        "/actions/apply",
        &[],
        Some((
            "application/x-www-form-urlencoded",
            &form(&[("action", "redrive"), ("id", &id.to_string()), ("csrf", "x")]),
        )),
    );
    assert_eq!(posted.status, 403, "{}", posted.body);
    assert_eq!(scene.count("queue", "dead_lettered_at IS NOT NULL").await, letters, "nothing moved");
    assert!(scene.audit().await.is_empty(), "nothing audited");
}

/// DLP-7, LAN-2: with actions on, a redrive clicked through its dry run and confirmation
/// returns the message to its queue and writes an audit row naming the actor; a release
/// does the same for the parked lane. A form posted without its CSRF token changes nothing.
#[tokio::test]
async fn a_redrive_and_a_release_clicked_in_a_browser_act_and_are_audited_dlp_7() {
    let Some(browser) =
        browser_or_skip("a_redrive_and_a_release_clicked_in_a_browser_act_and_are_audited_dlp_7")
    else {
        return;
    };
    let scene = Scene::new().await;
    let served = serve(&scene.db, settings(true));
    let session = Session::start(&browser);
    let (first, second) = (scene.letters[0], scene.letters[1]);

    // Without the CSRF token: refused, nothing changed.
    let forged = request(
        &served.address,
        "POST",
        "/actions/apply",
        &[],
        Some((
            "application/x-www-form-urlencoded",
            &form(&[("action", "redrive"), ("id", &second.to_string())]),
        )),
    );
    assert_eq!(forged.status, 403, "{}", forged.body);
    assert!(forged.body.contains("CSRF token is missing"), "{}", forged.body);
    assert_eq!(scene.count("queue", "dead_lettered_at IS NOT NULL").await, 3);

    session.open(&served.url(&format!("/dead-letters/message/{first}")));
    assert_eq!(session.text("#mode"), "actions on · console:browser-test");
    session.click("a.redrive");
    session.wait_for("#confirm-button");
    assert_eq!(session.text("#preview-count"), "1", "the dry run");
    assert_eq!(scene.count("queue", "dead_lettered_at IS NOT NULL").await, 3, "a dry run changes nothing");
    session.click("#confirm-button");
    session.wait_for("#result-count");
    assert_eq!(session.text("#result-count"), "1");
    assert_eq!(session.text("#actor"), "console:browser-test");

    let back = scene
        .count(
            "queue",
            &format!("message_id = '{first}' AND queue = '{}' AND dead_lettered_at IS NULL", scene.queue),
        )
        .await;
    assert_eq!(back, 1, "the message is back on its queue");
    assert_eq!(scene.count("queue", "dead_lettered_at IS NOT NULL").await, 2, "the others stay dead");
    let audit = scene.audit().await;
    assert_eq!(audit.len(), 1, "{audit:?}");
    assert_eq!(audit[0].0, "console:browser-test");
    assert_eq!(audit[0].1, "dead_letter.redrive");
    assert!(audit[0].2.contains(&first.to_string()), "{audit:?}");

    session.open(&served.url("/lanes"));
    session.click("a[href*='action=release']");
    session.wait_for("#confirm-button");
    session.click("#confirm-button");
    session.wait_for("#result-count");
    assert_eq!(scene.count("lanes", "parked_at IS NOT NULL").await, 0, "the lane is released");
    let audit = scene.audit().await;
    assert_eq!(audit.len(), 2, "{audit:?}");
    assert_eq!((audit[1].0.as_str(), audit[1].1.as_str()), ("console:browser-test", "lane.release"));
}
