//! Serving: the proxy's accept loop (HTTP/1.1, a connection cap, a header deadline), the
//! metrics and probe endpoints, and draining on shutdown.

use crate::backends::Backends;
use crate::config::{Args, ConfigError, Source};
use crate::metrics::Metrics;
use crate::proxy::Proxy;
use axum::http::StatusCode;
use axum::routing::get;
use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// What stops a gateway from starting or serving.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("connecting to the Kubernetes API (for --service): {0}")]
    Kube(#[from] kube::Error),
    #[error("serving metrics: {0}")]
    Metrics(std::io::Error),
}

/// How the proxy's listener treats clients.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Client connections served at once; more wait in the kernel's accept queue.
    pub max_connections: usize,
    /// A request's headers must arrive within this.
    pub header_timeout: Duration,
    /// After shutdown, requests in flight may finish for this long.
    pub drain_timeout: Duration,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            max_connections: 4096,
            header_timeout: Duration::from_secs(10),
            drain_timeout: Duration::from_secs(30),
        }
    }
}

/// Serves `proxy` on `listener` until `shutdown` resolves, then lets the requests in
/// flight finish for up to the drain timeout.
pub async fn serve_proxy(
    listener: tokio::net::TcpListener,
    proxy: Arc<Proxy>,
    opts: ServeOptions,
    shutdown: impl Future<Output = ()>,
) {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "gateway listening");
    }
    let permits = Arc::new(tokio::sync::Semaphore::new(opts.max_connections.max(1)));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(opts.header_timeout);
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
            _ = &mut shutdown => break,
        };
        let tcp = tokio::select! {
            r = listener.accept() => match r {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    // Out of descriptors, or the like: pause rather than spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let _ = tcp.set_nodelay(true);
        let p = proxy.clone();
        let svc = hyper::service::service_fn(move |req| {
            let p = p.clone();
            async move { Ok::<_, Infallible>(p.handle(req).await) }
        });
        let conn = graceful.watch(builder.serve_connection(hyper_util::rt::TokioIo::new(tcp), svc));
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "client connection ended");
            }
            drop(permit);
        });
    }
    drop(listener);
    tracing::info!(timeout_ms = opts.drain_timeout.as_millis() as u64, "draining");
    if tokio::time::timeout(opts.drain_timeout, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("drain timeout: closing connections with requests still in flight");
    }
}

/// `/metrics`, `/healthz` (always 200) and `/readyz` (200 once a backend is known and
/// while not draining).
pub fn metrics_router(metrics: Arc<Metrics>, backends: Arc<Backends>, draining: Arc<AtomicBool>) -> axum::Router {
    axum::Router::new()
        .route(
            "/metrics",
            get(move || {
                let m = metrics.clone();
                async move {
                    (
                        [(
                            axum::http::header::CONTENT_TYPE,
                            "application/openmetrics-text; version=1.0.0; charset=utf-8",
                        )],
                        m.text(),
                    )
                }
            }),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move || {
                let (b, d) = (backends.clone(), draining.clone());
                async move {
                    if d.load(Ordering::Relaxed) {
                        (StatusCode::SERVICE_UNAVAILABLE, "draining")
                    } else if b.snapshot().list.is_empty() {
                        (StatusCode::SERVICE_UNAVAILABLE, "no backends known yet")
                    } else {
                        (StatusCode::OK, "ready")
                    }
                }
            }),
        )
}

/// Runs a gateway as `args` say on the given listeners until `shutdown` resolves and the
/// drain ends.
pub async fn run(
    args: Args,
    listener: tokio::net::TcpListener,
    metrics_listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), GatewayError> {
    let source = args.source()?;
    let metrics = Arc::new(Metrics::new());
    let backends = Arc::new(Backends::new(metrics.clone()));
    let discovery = match source {
        Source::Static(list) => {
            backends.replace(list);
            None
        }
        Source::Service {
            name,
            namespace,
            port_name,
        } => {
            let client = kube::Client::try_default().await?;
            let ns = namespace.unwrap_or_else(|| client.default_namespace().to_owned());
            tracing::info!(service = %name, namespace = %ns, port = %port_name, "discovering backends");
            let b = backends.clone();
            Some(tokio::spawn(crate::discovery::watch(client, ns, name, port_name, b)))
        }
    };
    let proxy = Arc::new(Proxy::new(backends.clone(), metrics.clone(), args.proxy_options()));
    let draining = Arc::new(AtomicBool::new(false));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let router = metrics_router(metrics, backends, draining.clone());
    let mut metrics_stop = stop_rx.clone();
    let metrics_task = tokio::spawn(async move {
        axum::serve(metrics_listener, router)
            .with_graceful_shutdown(async move {
                let _ = metrics_stop.wait_for(|s| *s).await;
            })
            .await
    });
    let opts = ServeOptions {
        max_connections: args.max_connections,
        header_timeout: Duration::from_millis(args.header_timeout_ms),
        drain_timeout: Duration::from_millis(args.drain_timeout_ms),
    };
    let flag = draining.clone();
    serve_proxy(listener, proxy, opts, async move {
        shutdown.await;
        // Not ready from the first moment of the drain: no new clients are sent here.
        flag.store(true, Ordering::Relaxed);
    })
    .await;
    let _ = stop_tx.send(true);
    if let Some(d) = discovery {
        d.abort();
    }
    match metrics_task.await {
        Ok(r) => r.map_err(GatewayError::Metrics),
        Err(_) => Ok(()),
    }
}

/// Resolves on SIGTERM or SIGINT.
pub async fn termination_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        std::future::pending::<()>().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => {},
        _ = int.recv() => {},
    }
}
