//! `relayer-chaos-host`: the child process of the SIGKILL scenario (`tests/sigkill.rs`).
//!
//! It starts a relayer host through the facade's public builder — a dispatcher (LISTEN,
//! unordered loops and the lane loop) and the recovery sweeper, both sending to relayer's
//! PostgreSQL queue — on the namespace the environment names (see
//! [`relayer_scenarios::host_process`]), prints `started`, and runs until it is killed.
//! Timings are short so that a kill every few hundred milliseconds still leaves work
//! half done: claims and the sweeper's lease last one second.
#![allow(clippy::print_stdout, clippy::print_stderr)] // stdout is the protocol with the parent.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use relayer::{DispatcherOptions, Namespace, Relayer, SweeperOptions};
use relayer_scenarios::QueueProbe;
use relayer_scenarios::host_process::{HOLD, PREFIX, SCHEMA, STARTED, URL};

fn main() -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("relayer-chaos-host: no runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("relayer-chaos-host: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), String> {
    let variable = |name: &str| std::env::var(name).map_err(|_| format!("{name} is not set"));
    let (url, schema, prefix) = (variable(URL)?, variable(SCHEMA)?, variable(PREFIX)?);
    let config: tokio_postgres::Config = url.parse().map_err(|e| format!("{URL}: {e}"))?;
    let namespace = Namespace::new(schema.as_str(), prefix.as_str()).map_err(|e| e.to_string())?;

    // The queue transport has a pool of its own (LIF-2b).
    let queue_pool = relayer::postgres::connect_pool(config.clone(), 2).await.map_err(|e| e.to_string())?;
    let mut queue = QueueProbe::new(queue_pool, &namespace);
    if std::env::var_os(HOLD).is_some() {
        queue = queue.hold_first_lane_send();
    }
    let ms = Duration::from_millis;
    let dispatcher = DispatcherOptions::builder()
        .batch_size(20)
        .claim_duration(Duration::from_secs(1))
        .retry_base(ms(50))
        .retry_max(ms(200))
        .poll_interval(ms(100))
        .max_backoff(ms(500))
        .build()
        .map_err(|e| e.to_string())?;
    let sweeper = SweeperOptions::builder()
        .batch_size(50)
        .recovery_delay(Duration::ZERO)
        .sweep_interval(ms(200))
        .lease_duration(Duration::from_secs(1))
        .max_backoff(Duration::from_secs(1))
        .build()
        .map_err(|e| e.to_string())?;
    let _host = Relayer::builder(config, namespace)
        .transport(Arc::new(queue))
        .dispatcher(dispatcher)
        .sweeper(sweeper)
        .start()
        .await
        .map_err(|e| relayer::core::error_chain(&e))?;
    println!("{STARTED}");
    // Until SIGKILL: no shutdown, ever, so leases and claims are left to expire (LIF-3).
    std::future::pending::<()>().await;
    Ok(())
}
