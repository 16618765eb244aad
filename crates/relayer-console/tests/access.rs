//! Who may reach the console and act through it (OBS-3), over plain HTTP: the access token
//! (bearer header or login cookie), the actor header an action needs, and a console that
//! refuses to start when its settings or database say it must not.
#![allow(clippy::unwrap_used)]

mod support;

use relayer_console::{ActorSource, Console, ConsoleSettings};
use relayer_test_support::TestDb;
use support::http::{form, request};
use support::{Scene, serve};

const TOKEN: &str = "0123456789abcdef-token";

/// OBS-3: with an access token, a request without it gets the login page; the bearer
/// header or the login cookie lets it in. An action needs the configured actor header.
#[tokio::test]
async fn the_token_guards_every_page_and_an_action_needs_its_actor_header_obs_3() {
    let scene = Scene::new().await;
    let mut settings = ConsoleSettings::new("127.0.0.1:0".parse().unwrap());
    settings.access_token = Some(TOKEN.to_owned());
    settings.actions = true;
    settings.actor = Some(ActorSource::Header("X-Forwarded-User".to_owned()));
    let served = serve(&scene.db, settings);
    let bearer = format!("Bearer {TOKEN}");

    let anonymous = request(&served.address, "GET", "/", &[], None);
    assert_eq!(anonymous.status, 401);
    assert!(anonymous.body.contains("name=\"token\""), "the login form: {}", anonymous.body);
    let wrong =
        request(&served.address, "GET", "/", &[("Authorization", "Bearer nope-nope-nope-nope")], None);
    assert_eq!(wrong.status, 401);
    assert_eq!(request(&served.address, "GET", "/", &[("Authorization", &bearer)], None).status, 200);
    let signed_in = request(
        &served.address,
        "POST",
        "/login",
        &[],
        Some(("application/x-www-form-urlencoded", &form(&[("token", TOKEN)]))),
    );
    assert_eq!(signed_in.status, 303);
    let cookie = format!("relayer_console={TOKEN}");
    assert_eq!(request(&served.address, "GET", "/lanes", &[("Cookie", &cookie)], None).status, 200);

    let id = scene.letters[0].to_string();
    let preview = format!("/actions/preview?action=purge&id={id}");
    let nobody = request(&served.address, "GET", &preview, &[("Authorization", &bearer)], None);
    assert_eq!(nobody.status, 403);
    assert!(nobody.body.contains("no X-Forwarded-User header"), "{}", nobody.body);
    let alice = request(
        &served.address,
        "GET",
        &preview,
        &[("Authorization", &bearer), ("X-Forwarded-User", "alice")],
        None,
    );
    assert_eq!(alice.status, 200, "{}", alice.body);
    assert!(alice.body.contains("console:alice"), "{}", alice.body);
    assert_eq!(scene.count("queue", "dead_lettered_at IS NOT NULL").await, 3, "a preview changes nothing");
}

/// OBS-3: beyond loopback without TLS and a token, or without a database, the console does
/// not start, and says why.
#[tokio::test]
async fn a_console_that_must_not_serve_refuses_to_start_obs_3() {
    let db = TestDb::new().await;
    let open = ConsoleSettings::new("0.0.0.0:0".parse().unwrap());
    let refused = Console::new(open, db.config(), db.namespace().clone()).bind().await.err().unwrap();
    assert!(
        refused.to_string().starts_with("console.listen: 0.0.0.0:0 is not a loopback address"),
        "{refused}"
    );

    let mut nowhere = db.config();
    nowhere.port(1);
    let local = ConsoleSettings::new("127.0.0.1:0".parse().unwrap());
    let refused = Console::new(local, nowhere, db.namespace().clone()).bind().await.err().unwrap();
    assert!(refused.to_string().starts_with("console: connecting to PostgreSQL"), "{refused}");
}
