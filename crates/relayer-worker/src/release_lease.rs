//! Handing a lease over when a worker stops (LIF-1), through any store source.

use relayer_core::session::StoreSource;
use relayer_core::store::HoldLease;
use relayer_core::{Namespace, error_chain};

/// Releases `owner`'s lease on `job` when a leased worker stops (LIF-1), on a session of its
/// own from `source`, so another instance leads on its next turn instead of after expiry.
///
/// Best effort, and never an error: shutdown goes on whatever happens, and a lease that
/// could not be released simply expires. The outcome is logged under `relayer::lease`
/// with the worker's `namespace`.
pub async fn release_lease_at_shutdown<S>(source: &S, namespace: &Namespace, job: &str, owner: &str)
where
    S: StoreSource,
    S::Session: HoldLease,
{
    let released = match source.open().await {
        Ok(session) => session.release(job, owner).await,
        Err(error) => Err(error),
    };
    match released {
        Ok(true) => tracing::info!(target: "relayer::lease", %namespace, job, owner, "released the lease"),
        Ok(false) => {}
        // It expires by itself; another instance waits out the rest of it.
        Err(error) => {
            let cause = error_chain(&error);
            tracing::warn!(target: "relayer::lease", %namespace, job, owner, %cause,
                "could not release the lease; it will expire");
        }
    }
}
