//! The binary as an operator meets it, against a real PostgreSQL (OBS-3): which database
//! it connects to when several places name one, secrets never echoed, the database's text
//! shown with its control characters escaped, and actions that need `--yes` without a
//! terminal.
#![allow(clippy::unwrap_used)]

mod common;

use std::process::{Command, Stdio};

use common::{Ran, count, dead_letter, relayer, relayer_with_url, send_to_queue, setup};
use relayer::{Envelope, MessageId, SendOutcome, Transport};
use relayer_test_support::TestDb;

/// Runs the binary with `args`, no `--database-url`, and exactly the database variables
/// `env` (the others removed).
async fn with_env(db: &TestDb, env: &[(&str, &str)], args: &[&str]) -> Ran {
    let mut command = Command::new(env!("CARGO_BIN_EXE_relayer"));
    command
        .args(["--schema", db.schema()])
        .args(args)
        .env("USER", "ops-test")
        .env_remove("RELAYER_LOG")
        .env_remove("DATABASE_URL")
        .env_remove("RELAYER_DATABASE_URL")
        .envs(env.iter().copied())
        .stdin(Stdio::null());
    let output = tokio::task::spawn_blocking(move || command.output().unwrap()).await.unwrap();
    Ran {
        success: output.status.success(),
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

const SECRET: &str = "s3cret-token";

/// OBS-3: `--database-url`, then `DATABASE_URL`, then `RELAYER_DATABASE_URL`: each alone
/// is used; both variables set and different are warned about, naming them and never
/// their values, and `DATABASE_URL` wins.
#[tokio::test]
async fn database_url_wins_over_relayer_database_url_and_a_conflict_is_warned_obs_3() {
    let (db, _client) = setup().await;
    let elsewhere = format!("postgres://ops:{SECRET}@127.0.0.1:1/nowhere");
    let url = db.url();

    let only_relayer =
        with_env(&db, &[("RELAYER_DATABASE_URL", &url)], &["schema", "status", "--json"]).await;
    assert_eq!(only_relayer.json()["state"], "current", "{}", only_relayer.stderr);

    let both = with_env(
        &db,
        &[("DATABASE_URL", &url), ("RELAYER_DATABASE_URL", &elsewhere)],
        &["schema", "status", "--json"],
    )
    .await;
    assert_eq!(both.json()["state"], "current", "DATABASE_URL wins: {}", both.stderr);
    assert!(
        both.stderr
            .contains("DATABASE_URL and RELAYER_DATABASE_URL are both set and differ; using DATABASE_URL"),
        "{}",
        both.stderr
    );
    assert!(!both.stderr.contains(SECRET) && !both.stdout.contains(SECRET), "{both:?}");
}

/// OBS-3: a URL's password never appears in what the binary prints — not when the server
/// is unreachable, not when the URL is malformed, not from `run`'s configuration.
#[tokio::test]
async fn a_url_password_is_never_echoed_obs_3() {
    let db = TestDb::new().await;
    for url in [
        format!("postgres://ops:{SECRET}@127.0.0.1:1/app"),
        format!("postgres://ops:{SECRET}@db:port/app"),
        format!("host=127.0.0.1 port=1 user=ops password={SECRET} dbname=app"),
        format!("host=127.0.0.1 password='{SECRET}"),
        format!("postgres://ops:{SECRET}@127.0.0.1:1/app?sslmode=verify"),
    ] {
        let ran = relayer_with_url(&url, &db, &["status"]).await;
        assert!(!ran.success, "{url}");
        assert!(!ran.stderr.contains(SECRET) && !ran.stdout.contains(SECRET), "{url}: {ran:?}");
        let ran = with_env(&db, &[("DATABASE_URL", &url)], &["schema", "status"]).await;
        assert!(!ran.stderr.contains(SECRET) && !ran.stdout.contains(SECRET), "{url}: {ran:?}");
    }
    let config = std::env::temp_dir().join(format!("relayer-secret-{}.toml", relayer::core::Uuid::new_v4()));
    std::fs::write(&config, format!("database_url = \"postgres://ops:{SECRET}@db:port/app\"\n[cleanup]\n"))
        .unwrap();
    let ran = with_env(&db, &[], &["config", "check", config.to_str().unwrap()]).await;
    let _ = std::fs::remove_file(&config);
    assert!(!ran.success && ran.stderr.contains("database_url: "), "{ran:?}");
    assert!(!ran.stderr.contains(SECRET), "{ran:?}");
}

/// OBS-3: a body and headers holding an ANSI escape sequence, a carriage return and a C1
/// code are shown escaped by `dead-letters show`, never sent raw to the terminal; JSON keeps
/// the stored text.
#[tokio::test]
async fn control_characters_in_bodies_and_headers_are_shown_escaped_obs_3() {
    let (db, client) = setup().await;
    let pool = relayer_postgres::connect_pool(db.config(), 1).await.unwrap();
    let transport = relayer::queue::PgQueueTransport::new(pool, db.namespace());
    let id = MessageId::new();
    let envelope = Envelope {
        id,
        body: b"clear\x1b[2Jscreen\rover\xc2\x9bwritten".to_vec(),
        headers: [("note".to_owned(), "bell\x07tab\there".to_owned())].into(),
        created_at: relayer::Timestamp::from_system_time(std::time::SystemTime::now()),
        trace_context: None,
        lane: None,
        attempts: 0,
    };
    assert_eq!(transport.send("orders", &[envelope]).await.unwrap(), [SendOutcome::Accepted]);
    dead_letter(&client, &db, "orders", "orders.dead", "handler").await;

    let shown = relayer(&db, &["dead-letters", "show", &id.to_string()]).await;
    let text = shown.ok();
    assert!(!text.chars().any(|c| c.is_control() && c != '\n'), "{text:?}");
    for escaped in ["clear\\u{1b}[2Jscreen\\rover\\u{9b}written", "bell\\u0007tab\\there"] {
        assert!(text.contains(escaped), "{escaped} missing from {text}");
    }
    let json = relayer(&db, &["dead-letters", "show", &id.to_string(), "--json"]).await.json();
    assert_eq!(json["queue"]["body"], "clear\x1b[2Jscreen\rover\u{9b}written");
}

/// OBS-3: without a terminal, redrive and purge (and lane actions) are refused without
/// `--yes`, naming it, and change nothing; a dry run needs none.
#[tokio::test]
async fn actions_without_a_terminal_need_yes_obs_3() {
    let (db, client) = setup().await;
    send_to_queue(&db, "orders", 2).await;
    dead_letter(&client, &db, "orders", "orders.dead", "handler").await;
    for args in [
        &["dead-letters", "purge", "--queue", "orders.dead"][..],
        &["dead-letters", "redrive", "--queue", "orders.dead"],
        &["lanes", "release", "account-1"],
        &["lanes", "skip", "account-1"],
    ] {
        let ran = relayer(&db, args).await;
        assert!(!ran.success, "{args:?}: {ran:?}");
        assert!(
            ran.stderr.contains("standard input is not a terminal: add --yes"),
            "{args:?}: {}",
            ran.stderr
        );
    }
    assert_eq!(count(&client, &db, "queue", "dead_lettered_at IS NOT NULL").await, 2, "nothing changed");
    let dry = relayer(&db, &["dead-letters", "purge", "--queue", "orders.dead", "--dry-run"]).await;
    assert!(dry.ok().contains("dry run: would purge 2"), "{dry:?}");
    let purged = relayer(&db, &["dead-letters", "purge", "--queue", "orders.dead", "--yes"]).await;
    assert!(purged.ok().contains("purged 2 dead letter(s)"), "{purged:?}");
}
