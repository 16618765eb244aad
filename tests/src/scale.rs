//! How big a run is: counts read from the environment, so CI runs a scenario small and
//! `cargo xtask chaos` runs it at scale through the same test.

/// The number of SIGKILLs of the SIGKILL scenario.
pub const KILLS_VARIABLE: &str = "RELAYER_CHAOS_KILLS";
/// The number of server restarts of the restart scenario.
pub const RESTARTS_VARIABLE: &str = "RELAYER_CHAOS_RESTARTS";

/// The count `variable` holds, `default` when it is not set.
///
/// # Panics
///
/// When it is set to something other than a number, naming the variable and the value.
pub fn count_from_env(variable: &str, default: u32) -> u32 {
    match std::env::var(variable) {
        Err(_) => default,
        Ok(value) => match value.trim().parse() {
            Ok(count) => count,
            Err(_) => panic!("{variable} must be a count, got {value:?}"),
        },
    }
}
