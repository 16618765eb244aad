//! The protocol between the SIGKILL scenario and its child processes, the
//! `relayer-chaos-host` binary of this crate.
//!
//! The child reads its database, schema and table prefix from the environment, starts a
//! relayer host through the facade's builder — a dispatcher and the recovery sweeper,
//! sending to relayer's PostgreSQL queue through a [`QueueProbe`](crate::QueueProbe) — and
//! runs until it is killed. With [`HOLD`] set, the first send of lane rows that the queue
//! accepted is never reported back: the child prints a [`HELD`] line naming the rows and
//! waits, so the parent can kill a lane owner between its send and the delete of its head.

use uuid::Uuid;

/// The `postgres://` URL of the database.
pub const URL: &str = "RELAYER_CHAOS_URL";
/// The namespace's schema.
pub const SCHEMA: &str = "RELAYER_CHAOS_SCHEMA";
/// The namespace's table prefix.
pub const PREFIX: &str = "RELAYER_CHAOS_PREFIX";
/// When set (to anything), hold the first accepted send of lane rows.
pub const HOLD: &str = "RELAYER_CHAOS_HOLD";
/// The child prints this once its host has started.
pub const STARTED: &str = "started";
/// The child prints this, then the held ids separated by commas.
pub const HELD: &str = "held ";

/// The line announcing held `ids`.
pub fn held_line(ids: &[Uuid]) -> String {
    let ids: Vec<String> = ids.iter().map(Uuid::to_string).collect();
    format!("{HELD}{}", ids.join(","))
}

/// The ids of a [`held_line`]; `None` for any other line.
pub fn parse_held(line: &str) -> Option<Vec<Uuid>> {
    let ids = line.trim().strip_prefix(HELD)?;
    ids.split(',').map(|id| Uuid::parse_str(id).ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_line_round_trips_and_other_lines_are_not_held() {
        let ids = [Uuid::from_u128(1), Uuid::from_u128(u128::MAX)];
        assert_eq!(parse_held(&held_line(&ids)), Some(ids.to_vec()));
        assert_eq!(parse_held(STARTED), None);
        assert_eq!(parse_held("held nonsense"), None);
    }
}
