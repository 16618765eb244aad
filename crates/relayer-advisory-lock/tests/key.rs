//! LDR-3: the advisory-lock key is pinned, and it is the key PostgreSQL shows in `pg_locks`.

mod common;

use relayer_core::{DistributedLock, advisory_lock_key};
use relayer_test_support::TestDb;

/// (resource, first 8 bytes of SHA-1("relayer:" + resource) in hex, key).
///
/// Computed independently of this crate with
/// `python3 -c 'import hashlib,struct; d=hashlib.sha1(b"relayer:"+r.encode()).digest();
/// print(d[:8].hex(), struct.unpack(">q", d[:8])[0])'`. A change here lets two replicas of
/// different versions lead at once during a rolling deploy.
const VECTORS: &[(&str, &str, i64)] = &[
    ("sweeper", "1d2f672dd1802a57", 2103012997491337815),
    ("cleanup", "8babcb85e9d5a4e9", -8382382505405864727),
    ("migrate:public.relayer_", "fb52c35633323e12", -336992247105831406),
    ("dead-letters", "881d25027e8b645e", -8638707817583516578),
    ("outbox-dispatcher", "ed701c99ad7891c6", -1337537642963103290),
    ("", "839d42fd4d406f17", -8962934027707191529),
    ("é-ünïcødé/锁", "551d6d27b7822c63", 6133178284898397283),
    ("Größe", "79e06bc48cf17345", 8782137765294863173),
    ("日本語のリソース", "46d52f25fdc0c056", 5104037592911888470),
    ("🔒", "6d206e9deb66ea43", 7863406573927197251),
];

fn from_hex(hex: &str) -> [u8; 8] {
    let mut bytes = [0u8; 8];
    for (i, byte) in bytes.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("hex digit pair");
    }
    bytes
}

/// LDR-3: the Rust derivation matches the pinned vectors, ASCII and not.
#[test]
fn key_vectors_are_pinned() {
    for &(resource, hex, key) in VECTORS {
        assert_eq!(advisory_lock_key(resource), key, "{resource:?}");
        assert_eq!(i64::from_be_bytes(from_hex(hex)), key, "{resource:?}: hex and key disagree");
    }
}

/// LDR-3: PostgreSQL reads the same 8 bytes as the same signed key (the documented SQL form
/// for other implementations: `('x' || hex)::bit(64)::bigint`).
#[tokio::test]
async fn postgres_reads_the_pinned_bytes_as_the_pinned_key() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    for &(resource, hex, key) in VECTORS {
        let in_sql: i64 = client
            .query_one("SELECT ('x' || $1)::bit(64)::bigint", &[&hex])
            .await
            .expect("hex to bigint")
            .get(0);
        assert_eq!(in_sql, key, "{resource:?}");
    }
}

/// LDR-3: a held lock shows in `pg_locks` as `advisory`, on the lock's own session, and the key
/// reassembled from `classid`/`objid` is `advisory_lock_key(resource)` — for ASCII and
/// non-ASCII names, positive and negative keys.
#[tokio::test]
async fn held_lock_shows_in_pg_locks_with_its_key() {
    let db = TestDb::new().await;
    let client = db.connect().await;
    let lock = common::lock(&db, "keys");
    for &(name, _, _) in VECTORS {
        let resource = common::resource(&db, name);
        let key = advisory_lock_key(&resource);
        let guard = lock.try_lock(&resource).await.expect("try_lock").expect("free resource");

        let rows = client
            .query(
                "SELECT l.mode, l.objsubid::int4, (l.classid::int8 << 32) | l.objid::int8, a.application_name \
                 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
                 WHERE l.locktype = 'advisory' AND l.granted AND a.application_name = $1",
                &[&common::app_name(&db, "keys")],
            )
            .await
            .expect("pg_locks");
        assert_eq!(rows.len(), 1, "{resource:?}: one advisory lock held by the lock's sessions");
        let (mode, objsubid, shown): (String, i32, i64) = (rows[0].get(0), rows[0].get(1), rows[0].get(2));
        assert_eq!(mode, "ExclusiveLock");
        assert_eq!(objsubid, 1, "the bigint form of the advisory functions");
        assert_eq!(shown, key, "{resource:?}");

        guard.release().await.expect("release");
        assert!(common::holders(&client, key).await.is_empty(), "{resource:?} released");
    }
}
