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
}
