//! Starting a host, in three steps and a record: validate (no I/O), connect (pools and
//! schema), build the hosted workers; then record this instance's settings (OPT-4) and
//! start the workers. A failure at any step has started nothing and written nothing.

use tokio_util::sync::CancellationToken;

use crate::builder::RelayerBuilder;
use crate::connect::connect;
use crate::error::StartError;
use crate::host::{RelayerHost, Started};
use crate::instance_id::{default_instance_id, lease_owner};
use crate::leader_election::Electorate;
use crate::settings_record::SettingsRecord;
use crate::validate::validate;
use crate::workers::{self, WorkerContext};

impl RelayerBuilder {
    /// Checks the whole setup, then starts the configured workers as tokio tasks.
    ///
    /// Checked first, with no database: the instance id; transport names are unique; a
    /// dispatcher or sweeper has a transport; options that must fit together do (TRN-5);
    /// one subscription per queue; dead-letter policies fit the subscriptions and
    /// transports (DLP-6); every pool size set fits a pool the host opens. Then the
    /// database: it answers, and the namespace's schema is present and current. On any
    /// failure nothing was started and nothing was written. Then this instance records its
    /// settings fingerprints, compares them with the other live instances' (OPT-4), and
    /// starts the workers.
    pub async fn start(self) -> Result<RelayerHost, StartError> {
        // The default identity is made here, not among the checks: it reads the host name.
        let instance_id = self.instance_id.clone().unwrap_or_else(default_instance_id);
        let setup = validate(self, instance_id)?;
        let lease_owner = lease_owner(&setup.instance_id);
        let connected = connect(&setup).await?;
        let shutdown = CancellationToken::new();
        let context = WorkerContext {
            setup: &setup,
            connected: &connected,
            electorate: Electorate {
                lease_owner: &lease_owner,
                database: &setup.database,
                namespace: &setup.namespace,
                shutdown: &shutdown,
            },
        };
        let mut hosted = workers::build(&context)?;
        let settings = std::mem::take(&mut hosted.settings);
        let record = SettingsRecord::record(
            connected.maintenance.clone(),
            &setup.namespace,
            &setup.instance_id,
            settings,
        )
        .await?;
        let options = setup.options();
        let shutdown_bound = crate::host::shutdown_bound(shutdown_waits(&setup));
        Ok(RelayerHost::run(Started {
            database: setup.database.target(),
            namespace: setup.namespace,
            instance_id: setup.instance_id,
            lease_owner,
            options,
            transports: connected.transports,
            hosted,
            record,
            shutdown,
            shutdown_bound,
        }))
    }
}

/// The longest each of `setup`'s workers may take to stop once cancelled: a consumer its
/// `shutdown_grace` (handlers in flight), a led pass its lease, the dispatcher's batches in
/// flight their claim.
fn shutdown_waits(setup: &crate::validate::Setup) -> Vec<std::time::Duration> {
    let mut waits = Vec::new();
    waits.extend(setup.dispatcher.as_ref().map(|d| d.claim_duration()));
    waits.extend(setup.sweeper.as_ref().map(|s| s.options().lease_duration()));
    waits.extend(setup.cleanup.as_ref().map(|c| c.options().lease_duration()));
    #[cfg(feature = "dead-letters")]
    waits.extend(setup.dead_letters.as_ref().map(|(_, led)| led.options().lease_duration()));
    #[cfg(feature = "consumer")]
    waits.extend(setup.consumers.iter().map(|spec| spec.subscription.options().shutdown_grace()));
    waits
}
