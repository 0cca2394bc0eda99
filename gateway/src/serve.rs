//! Serving: the proxy's accept loop (HTTP/1.1, a connection cap, a header deadline), the
//! metrics and probe endpoints, and draining on shutdown.

use crate::backends::Backends;
use crate::config::{Args, ConfigError, Source};
use crate::metrics::Metrics;
use crate::proxy::Proxy;
use axum::http::StatusCode;
use axum::routing::get;
use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
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
    /// Connections one client address may hold at once; more are answered 503 and closed.
    pub max_connections_per_client: usize,
    /// A request's headers must arrive within this.
    pub header_timeout: Duration,
    /// A write to a client may wait this long for the client to read; past it the
    /// connection is ended (a stream nobody reads holds it no longer).
    pub write_timeout: Duration,
    /// After shutdown, requests in flight may finish for this long.
    pub drain_timeout: Duration,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            max_connections: 4096,
            max_connections_per_client: 1024,
            header_timeout: Duration::from_secs(10),
            write_timeout: Duration::from_secs(30),
            drain_timeout: Duration::from_secs(30),
        }
    }
}

/// A client connection whose writes fail once the client has read nothing for the write
/// timeout: hyper then ends the connection and drops the response, and with it the
/// upstream request. A response that is slow to come (a long run) waits for no write and
/// is not timed; only a client that does not read is.
struct WriteTimeout {
    io: tokio::net::TcpStream,
    timeout: Duration,
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl WriteTimeout {
    /// Called when a write could not proceed: pending until the timeout, then an error.
    fn stalled(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Error> {
        let timeout = self.timeout;
        let sleep = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "the client read nothing for {} ms (--write-timeout-ms)",
                    timeout.as_millis()
                ),
            )),
            Poll::Pending => Poll::Pending,
        }
    }

    fn timed<T>(&mut self, cx: &mut Context<'_>, r: Poll<std::io::Result<T>>) -> Poll<std::io::Result<T>> {
        match r {
            Poll::Ready(r) => {
                self.stalled = None;
                Poll::Ready(r)
            }
            Poll::Pending => self.stalled(cx).map(Err),
        }
    }
}

impl tokio::io::AsyncRead for WriteTimeout {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for WriteTimeout {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write(cx, buf);
        self.timed(cx, r)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.timed(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let r = Pin::new(&mut self.io).poll_flush(cx);
        self.timed(cx, r)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let r = Pin::new(&mut self.io).poll_shutdown(cx);
        self.timed(cx, r)
    }
}

/// Connections per client address, so that one client (its unread streams, its idle
/// connections) holds at most its share of the gateway's.
#[derive(Debug, Default)]
struct Shares {
    held: Mutex<HashMap<IpAddr, usize>>,
}

/// One connection counted against its client's share until dropped.
struct Share {
    shares: Arc<Shares>,
    ip: IpAddr,
}

impl Shares {
    fn take(self: &Arc<Self>, ip: IpAddr, max: usize) -> Option<Share> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let n = held.entry(ip).or_default();
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(Share {
            shares: self.clone(),
            ip,
        })
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        let mut held = self.shares.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = held.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.ip);
            }
        }
    }
}

/// Refusals of clients over their share being answered at once; past this they are closed
/// unanswered (each is small and bounded by the header deadline).
const MAX_REFUSALS: usize = 64;

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
    let shares = Arc::new(Shares::default());
    let refusals = Arc::new(tokio::sync::Semaphore::new(MAX_REFUSALS));
    let per_client = opts.max_connections_per_client.max(1);
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
        let (tcp, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(accepted) => accepted,
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
        let io = hyper_util::rt::TokioIo::new(WriteTimeout {
            io: tcp,
            timeout: opts.write_timeout,
            stalled: None,
        });
        let Some(share) = shares.take(peer.ip(), per_client) else {
            // Over its share: a 503 saying so, on a connection that holds no permit.
            drop(permit);
            let Ok(refusal) = refusals.clone().try_acquire_owned() else {
                continue;
            };
            tracing::debug!(client = %peer.ip(), "client over its connection share");
            let conn = builder.serve_connection(
                io,
                hyper::service::service_fn(move |_| async move {
                    let msg = format!(
                        "this client already holds {per_client} connections (--max-connections-per-client); \
                     close one or retry"
                    );
                    let mut r = crate::proxy::json_error(StatusCode::SERVICE_UNAVAILABLE, &msg);
                    r.headers_mut()
                        .insert(http::header::CONNECTION, http::HeaderValue::from_static("close"));
                    Ok::<_, Infallible>(r)
                }),
            );
            let deadline = opts.header_timeout + opts.write_timeout;
            tokio::spawn(async move {
                let _ = tokio::time::timeout(deadline, conn).await;
                drop(refusal);
            });
            continue;
        };
        let p = proxy.clone();
        let svc = hyper::service::service_fn(move |req| {
            let p = p.clone();
            async move { Ok::<_, Infallible>(p.handle(req).await) }
        });
        let conn = graceful.watch(builder.serve_connection(io, svc));
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "client connection ended");
            }
            drop(share);
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
        max_connections_per_client: args.max_connections_per_client,
        header_timeout: Duration::from_millis(args.header_timeout_ms),
        write_timeout: Duration::from_millis(args.write_timeout_ms.max(1)),
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
