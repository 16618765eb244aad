//! This instance's identity when the builder is given none.

/// A default instance id: `{host}/{pid}/{8 random hex digits}`, unique per start.
pub(crate) fn default_instance_id() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|name| !name.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname").ok().map(|name| name.trim().to_owned())
        })
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "unknown-host".to_owned());
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!("{host}/{}/{}", std::process::id(), &random[..8])
}

/// The lease owner of one start of an instance: `{instance_id}#{8 random hex digits}`.
///
/// Two processes given the same `instance_id` (a copied configuration, a replica set with
/// a fixed id) would otherwise be one owner to the lease table: each would renew the
/// other's lease and both would lead. The per-start nonce keeps them apart; the cost is
/// that a restart under the same id waits for its old lease to expire (or be released at
/// shutdown) like any other contender.
pub(crate) fn lease_owner(instance_id: &str) -> String {
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!("{instance_id}#{}", &random[..8])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_instance_ids_are_unique_per_start_and_name_the_process() {
        let (a, b) = (default_instance_id(), default_instance_id());
        assert_ne!(a, b);
        let pid = format!("/{}/", std::process::id());
        assert!(a.contains(&pid), "{a}");
    }

    #[test]
    fn lease_owners_of_one_instance_id_differ_per_start_ldr_2() {
        let (a, b) = (lease_owner("twin"), lease_owner("twin"));
        assert_ne!(a, b);
        assert!(a.starts_with("twin#") && b.starts_with("twin#"), "{a} {b}");
    }
}
