//! `relayer demo-child`: the dispatcher process the demo kills with SIGKILL.
//!
//! It runs a host with a dispatcher over a slow, flaky queue transport and never stops by
//! itself: the parent kills it mid-way, leaving claimed and pending rows behind, exactly
//! as a crashed service would.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use relayer::queue::PgQueueTransport;
use relayer::{DispatcherOptions, Relayer};

use super::transports::SlowFlakyQueue;
use super::{CHILD_CLAIM, database_config};
use crate::args::Args;
use crate::connect::CliResult;

pub(crate) async fn run(args: &Args) -> CliResult {
    let config = database_config(args)?;
    let pool = relayer::postgres::connect_pool(config.clone(), 2).await?;
    let queue = SlowFlakyQueue {
        inner: PgQueueTransport::new(pool, &args.namespace),
        ack_delay: Duration::from_millis(150),
        fail_every: 4,
        sends: AtomicU64::new(0),
    };
    let options = DispatcherOptions::builder()
        .batch_size(50)
        .claim_duration(CHILD_CLAIM)
        .retry_base(Duration::from_millis(500))
        .poll_interval(Duration::from_millis(100))
        .build()?;
    let _host = Relayer::builder(config, args.namespace.clone())
        .transport(Arc::new(queue))
        .dispatcher(options)
        .instance_id(format!("demo-child/{}", std::process::id()))
        .start()
        .await?;
    // Until SIGKILL: no shutdown, no lease release, no completion of what is in flight.
    std::future::pending::<()>().await;
    Ok(())
}
