//! The names an outbox is known by outside its tables: the LISTEN/NOTIFY channel writers
//! wake dispatchers on (OUT-4), and the advisory-lock resource of a lane's writers (LAN-1c).

use relayer_core::Namespace;

/// The LISTEN/NOTIFY channel of a namespace's outbox (OUT-4).
///
/// `relayer_` followed by 16 hex digits of SHA-1 over the schema and prefix: short,
/// deterministic, the same in every process and well within PostgreSQL's 63-byte limit
/// whatever the namespace.
pub fn notify_channel(namespace: &Namespace) -> String {
    channel("outbox-channel", namespace)
}

/// `relayer_` + 16 hex digits of SHA-1(`relayer:` + `kind:{schema}.{prefix}`).
pub(crate) fn channel(kind: &str, namespace: &Namespace) -> String {
    // advisory_lock_key is the first 8 bytes of SHA-1("relayer:" + resource).
    let key =
        relayer_core::advisory_lock_key(&format!("{kind}:{}.{}", namespace.schema(), namespace.prefix()));
    format!("relayer_{:016x}", u64::from_be_bytes(key.to_be_bytes()))
}

/// `lane:{schema}.{prefix}:`: a lane's writer-lock resource is this plus its key (LAN-1c).
/// Everything that inserts lane rows takes the same lock.
pub(crate) fn lane_lock_prefix(namespace: &Namespace) -> String {
    format!("lane:{}.{}:", namespace.schema(), namespace.prefix())
}
