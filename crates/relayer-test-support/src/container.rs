//! A `postgres:17` container started with testcontainers, when a Docker engine answers.
//!
//! Each test has its own tokio runtime, and the Docker client's connections belong to the
//! runtime that made them; the container may outlive the test that started it. So the
//! container is started, watched and removed by one thread with a runtime of its own;
//! dropping [`Container`] tells that thread to remove it and waits until it has.

use std::str::FromStr;
use std::time::Duration;

use testcontainers::bollard::Docker;
use testcontainers::core::wait::LogWaitStrategy;
use testcontainers::core::{IntoContainerPort, WaitFor};
use testcontainers::runners::AsyncRunner;
use testcontainers::{GenericImage, ImageExt};
use tokio::sync::oneshot;

/// The server's own words when it is ready; the image's entrypoint prints them twice
/// (once for its initialisation server, once for the real one).
const READY: &str = "database system is ready to accept connections";

/// How long the Docker engine has to answer a ping.
const PING_TIMEOUT: Duration = Duration::from_secs(3);

/// How long pulling and starting the image may take.
const START_TIMEOUT: Duration = Duration::from_secs(300);

/// A running container; dropping it removes the container.
pub(crate) struct Container {
    url: String,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Container {
    /// Starts the container; the error says why it could not (no Docker engine, …).
    pub(crate) async fn start() -> Result<Container, String> {
        docker_answers().await?;
        let (url_tx, url_rx) = oneshot::channel::<Result<String, String>>();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("relayer-test-postgres-container".to_owned())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        let _ = url_tx.send(Err(format!("no runtime: {e}")));
                        return;
                    }
                };
                runtime.block_on(run(url_tx, stop_rx));
            })
            .map_err(|e| format!("cannot spawn the container thread: {e}"))?;
        let mut container = Container { url: String::new(), stop: Some(stop_tx), thread: Some(thread) };
        match url_rx.await {
            Ok(Ok(url)) => {
                container.url = url;
                Ok(container)
            }
            Ok(Err(e)) => Err(e),
            Err(_) => Err("the container thread ended before the container was ready".to_owned()),
        }
    }

    pub(crate) fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn docker_answers() -> Result<(), String> {
    let docker = Docker::connect_with_defaults().map_err(|e| format!("no Docker client: {e}"))?;
    match tokio::time::timeout(PING_TIMEOUT, docker.ping()).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!("no Docker engine answers: {e}")),
        Err(_) => Err("the Docker engine did not answer within 3 s".to_owned()),
    }
}

/// The container thread: start, report the URL, wait for the stop signal, remove.
async fn run(url_tx: oneshot::Sender<Result<String, String>>, stop_rx: oneshot::Receiver<()>) {
    let request = GenericImage::new("postgres", "17")
        .with_exposed_port(5432.tcp())
        .with_wait_for(WaitFor::log(LogWaitStrategy::stdout_or_stderr(READY).with_times(2)))
        .with_env_var("POSTGRES_HOST_AUTH_METHOD", "trust")
        .with_env_var("POSTGRES_PASSWORD", "postgres")
        .with_startup_timeout(START_TIMEOUT);
    let container = match request.start().await {
        Ok(container) => container,
        Err(e) => {
            let _ = url_tx.send(Err(format!("starting the container failed: {e}")));
            return;
        }
    };
    let url = match address(&container).await {
        Ok((host, port)) => format!("postgres://postgres:postgres@{host}:{port}/postgres"),
        Err(e) => {
            let _ = url_tx.send(Err(e));
            let _ = container.rm().await;
            return;
        }
    };
    let ready = wait_until_connectable(&url).await;
    let failed = ready.is_err();
    let _ = url_tx.send(ready.map(|()| url));
    if !failed {
        // Sender dropped (the `Container` is gone in any way) also means stop.
        let _ = stop_rx.await;
    }
    if let Err(e) = container.rm().await {
        eprintln!("relayer-test-support: removing the postgres container failed: {e}");
    }
}

async fn address(container: &testcontainers::ContainerAsync<GenericImage>) -> Result<(String, u16), String> {
    let host = container.get_host().await.map_err(|e| format!("container host: {e}"))?;
    let port = container.get_host_port_ipv4(5432.tcp()).await.map_err(|e| format!("container port: {e}"))?;
    Ok((host.to_string(), port))
}

/// The log line can come before the port is reachable from the host: retry for a while.
async fn wait_until_connectable(url: &str) -> Result<(), String> {
    let config = tokio_postgres::Config::from_str(url).map_err(|e| e.to_string())?;
    let mut last = String::new();
    for _ in 0..60 {
        match crate::client::connect(&config).await {
            Ok(client) => match client.simple_query("SELECT 1").await {
                Ok(_) => return Ok(()),
                Err(e) => last = relayer_core::error_chain(&e),
            },
            Err(e) => last = relayer_core::error_chain(&e),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(format!("the container's server does not answer at {url}: {last}"))
}
