//! Serving: gRPC (with health, reflection, compression), metrics, and draining on SIGTERM.

use crate::engine::Engine;
use crate::judge::Judge;
use crate::service::ExecutorService;
use crate::session::SessionPolicy;
use crate::tenants::Tenants;
use futures::StreamExt;
use sandpool_proto::v1 as pb;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tonic::codec::CompressionEncoding;
use tonic_health::ServingStatus;

/// Where and how to serve.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub listen: SocketAddr,
    pub metrics_listen: Option<SocketAddr>,
    pub max_request_bytes: usize,
    pub drain_timeout: Duration,
    /// The HTTP API's settings (used when it is served).
    pub http: crate::http::HttpOptions,
    /// Whose bearer tokens `sandpool.v1.Executor` calls (and the HTTP API's, unless
    /// `http.tenants` says otherwise) must carry; open: no auth.
    pub tenants: Arc<Tenants>,
    /// gRPC connections served at once; more wait to be accepted.
    pub grpc_max_connections: usize,
    /// A gRPC connection whose client has not sent its side of the HTTP/2 handshake within this is closed.
    pub grpc_silent_timeout: Duration,
    /// A call's request (not EvaluateStream's) must have arrived whole within this.
    pub grpc_body_timeout: Duration,
    /// Calls in flight at once on one gRPC connection.
    pub grpc_max_streams: u32,
    /// "host:port" session create responses name (None: the bound gRPC address).
    pub advertise: Option<String>,
    /// Sessions' cap, defaults and ceilings.
    pub sessions: SessionPolicy,
    /// Where paused sessions are kept, and their TTL (None: sessions cannot be paused).
    pub session_store: Option<(sandpool_store::StoreConfig, Duration)>,
}

impl ServeOptions {
    /// Defaults for an in-process server on `listen` with `sessions`: no token, no metrics.
    pub fn local(listen: SocketAddr, sessions: SessionPolicy) -> Self {
        let max_request_bytes = 64 << 20;
        ServeOptions {
            listen,
            metrics_listen: None,
            max_request_bytes,
            drain_timeout: Duration::from_secs(5),
            http: crate::http::HttpOptions::new(max_request_bytes),
            tenants: Tenants::open(),
            grpc_max_connections: 1024,
            grpc_silent_timeout: Duration::from_secs(10),
            grpc_body_timeout: Duration::from_secs(60),
            grpc_max_streams: 1024,
            advertise: None,
            sessions,
            session_store: None,
        }
    }
}

/// Errors serving.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("binding {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
    #[error("gRPC server: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
}

/// How often a tenants file is re-read for changes.
const TENANTS_RELOAD_EVERY: Duration = Duration::from_secs(2);

/// Health service name for liveness probes: SERVING unless a run, a run slot or blocking-pool
/// work is stuck (see [`crate::watchdog`]).
pub const LIVENESS: &str = "liveness";

/// Rewrites tonic's OUT_OF_RANGE for oversize requests into RESOURCE_EXHAUSTED naming the limit.
fn oversize_to_resource_exhausted(
    limit: usize,
) -> impl Fn(http::Response<tonic::body::Body>) -> http::Response<tonic::body::Body> + Clone {
    move |mut resp| {
        let h = resp.headers();
        let oversize = h.get("grpc-status").is_some_and(|v| v == "11")
            && h.get("grpc-message")
                .and_then(|m| m.to_str().ok())
                .is_some_and(|m| m.contains("too%20large") || m.contains("too large"));
        if oversize {
            let msg = format!("request larger than this executor's limit of {limit} bytes (--max-request-bytes)");
            let h = resp.headers_mut();
            h.insert("grpc-status", http::HeaderValue::from_static("8"));
            if let Ok(v) = http::HeaderValue::from_str(&msg.replace(' ', "%20")) {
                h.insert("grpc-message", v);
            }
        }
        resp
    }
}

/// An executor serving gRPC in this process on a free loopback port, for the
/// CLI's embedded mode and the benchmarks: they talk to it exactly as to a
/// remote one. Dropping it (or [`Loopback::stop`]) drains and stops the server.
pub struct Loopback {
    /// A connected channel to the server.
    pub channel: tonic::transport::Channel,
    /// The gRPC address, for clients of their own.
    pub addr: SocketAddr,
    /// The HTTP API's address, when started with [`Loopback::start_with_http`].
    pub http: Option<SocketAddr>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Result<(), ServeError>>>,
}

impl Loopback {
    /// Serves `engine` (its sessions under `sessions`) on 127.0.0.1:0 and connects to it.
    pub async fn start(engine: Arc<Engine>, sessions: SessionPolicy) -> Result<Self, ServeError> {
        Self::serve(engine, sessions, false).await
    }

    /// [`Loopback::start`], and the HTTP API on another free loopback port ([`Loopback::http`]).
    pub async fn start_with_http(engine: Arc<Engine>, sessions: SessionPolicy) -> Result<Self, ServeError> {
        Self::serve(engine, sessions, true).await
    }

    async fn serve(engine: Arc<Engine>, sessions: SessionPolicy, with_http: bool) -> Result<Self, ServeError> {
        let any: SocketAddr = ([127, 0, 0, 1], 0).into();
        let bind = || async {
            let l = tokio::net::TcpListener::bind(any)
                .await
                .map_err(|e| ServeError::Bind(any, e))?;
            let addr = l.local_addr().map_err(|e| ServeError::Bind(any, e))?;
            Ok::<_, ServeError>((l, addr))
        };
        let (listener, addr) = bind().await?;
        let (http_listener, http) = match with_http {
            true => bind().await.map(|(l, a)| (Some(l), Some(a)))?,
            false => (None, None),
        };
        let opts = ServeOptions::local(addr, sessions);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let served = serve_with_http(engine, listener, http_listener, opts, async move {
                let _ = stopped.await;
            })
            .await;
            if let Err(e) = &served {
                tracing::error!(error = %e, "embedded executor failed");
            }
            served
        });
        let channel = tonic::transport::Endpoint::try_from(format!("http://{addr}"))?
            .connect()
            .await?;
        Ok(Loopback {
            channel,
            addr,
            http,
            stop: Some(stop),
            task: Some(task),
        })
    }

    /// Stops the server and waits until its in-flight runs are done.
    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
    }
}

impl Drop for Loopback {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// Serves gRPC on `listener` and, when given, the SandboxFusion-compatible HTTP
/// API on `http`; both judge through one [`Judge`] and stop on `shutdown`.
pub async fn serve_with_http(
    engine: Arc<Engine>,
    listener: tokio::net::TcpListener,
    http: Option<tokio::net::TcpListener>,
    opts: ServeOptions,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let judge = Judge::new(engine.clone());
    let (http_stop_tx, http_stop_rx) = tokio::sync::watch::channel(false);
    let (health, health_svc) = tonic_health::server::health_reporter();
    let ready = if engine.any_language_available() {
        ServingStatus::Serving
    } else {
        ServingStatus::NotServing
    };
    if ready == ServingStatus::NotServing {
        tracing::error!("no language works in this sandbox; reporting NOT_SERVING");
    }
    health.set_service_status("", ready).await;
    health.set_service_status("sandpool.v1.Executor", ready).await;
    health.set_service_status(LIVENESS, ServingStatus::Serving).await;
    engine
        .watchdog()
        .spawn_liveness(health.clone(), LIVENESS, engine.metrics().not_serving.clone());

    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()?;

    let bound = listener.local_addr().map_err(|e| ServeError::Bind(opts.listen, e))?;
    let advertise = opts
        .advertise
        .clone()
        .unwrap_or_else(|| crate::config::advertise_address(None, None, bound));
    let sessions = crate::session::SessionManager::start(engine.clone(), opts.sessions, advertise);
    sessions.follow_tenants(opts.tenants.clone());
    if let Some((cfg, ttl)) = opts.session_store.clone() {
        sessions.use_store(cfg, ttl);
    }
    if let Some(http) = http {
        let (judge, mut stop) = (judge.clone(), http_stop_rx);
        let mut http_opts = opts.http.clone();
        http_opts.tenants.get_or_insert_with(|| opts.tenants.clone());
        http_opts.sessions.get_or_insert_with(|| sessions.clone());
        tokio::spawn(async move {
            let stopped = async move {
                let _ = stop.wait_for(|s| *s).await;
            };
            if let Err(e) = crate::http::serve_on(judge, http, http_opts, stopped).await {
                tracing::error!(error = %e, "HTTP server failed");
            }
        });
    }
    let svc = pb::executor_server::ExecutorServer::new(ExecutorService::with_sessions(judge, sessions.clone()))
        .accept_compressed(CompressionEncoding::Gzip)
        .accept_compressed(CompressionEncoding::Zstd)
        .send_compressed(CompressionEncoding::Gzip)
        .send_compressed(CompressionEncoding::Zstd)
        .max_decoding_message_size(opts.max_request_bytes)
        .max_encoding_message_size(usize::MAX);
    // Only the Executor service wants the token: health (kubelet probes) and reflection stay open.
    let svc = tonic::service::interceptor::InterceptedService::new(svc, crate::auth::interceptor(opts.tenants.clone()));
    if !opts.tenants.is_open() {
        let names: Vec<String> = opts.tenants.table().tenants().map(|t| t.name.to_string()).collect();
        tracing::info!(tenants = ?names, "callers must present a tenant's bearer token");
    }
    {
        let metrics = engine.metrics().clone();
        // Each tenant's admission series exist from the start (and from a reload that adds it).
        let known = |tenants: &crate::tenants::Tenants, metrics: &crate::metrics::Metrics| {
            let table = tenants.table();
            let open = tenants.is_open().then_some(crate::tenants::ANONYMOUS);
            metrics.tenants_known(table.tenants().map(|t| &*t.name).chain(open));
        };
        known(&opts.tenants, &metrics);
        let tenants = Arc::downgrade(&opts.tenants);
        opts.tenants.watch(TENANTS_RELOAD_EVERY, move |ok| {
            if ok {
                if let Some(tenants) = tenants.upgrade() {
                    known(&tenants, &metrics);
                }
                metrics.tenants_reloads.inc();
            } else {
                metrics.tenants_reload_errors.inc();
            }
        });
    }

    if let Some(addr) = opts.metrics_listen {
        let engine = engine.clone();
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| ServeError::Bind(addr, e))?;
        tokio::spawn(async move {
            let app = axum::Router::new().route(
                "/metrics",
                axum::routing::get(move || {
                    let engine = engine.clone();
                    async move {
                        (
                            [(
                                http::header::CONTENT_TYPE,
                                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                            )],
                            engine.metrics_text(),
                        )
                    }
                }),
            );
            if let Err(e) = axum::serve(listener, app).await {
                tracing::error!(error = %e, "metrics server failed");
            }
        });
        tracing::info!(%addr, "serving metrics");
    }

    let addr = listener.local_addr().map_err(|e| ServeError::Bind(opts.listen, e))?;
    tracing::info!(%addr, "serving gRPC");
    let (drained_tx, drained_rx) = tokio::sync::oneshot::channel::<()>();
    // Set once the drain has paused the live sessions: until then both ports keep accepting,
    // so a session's next call reaches it here (and runs, or is refused unrun once the
    // session is in the store) rather than another executor that cannot find it yet.
    let (stored_tx, mut stored_rx) = tokio::sync::watch::channel(false);
    let drain_engine = engine.clone();
    let drain_health = health.clone();
    let on_shutdown = async move {
        shutdown.await;
        tracing::info!("shutting down: NOT_SERVING, finishing in-flight runs");
        drain_engine.admission().drain();
        drain_health.set_service_status("", ServingStatus::NotServing).await;
        drain_health
            .set_service_status("sandpool.v1.Executor", ServingStatus::NotServing)
            .await;
        let _ = drained_tx.send(());
        let _ = stored_rx.wait_for(|s| *s).await;
        let _ = http_stop_tx.send(true);
    };
    let server = tonic::transport::Server::builder()
        // Peers that vanish (a killed client, a dropped route) are noticed and their
        // connection permits freed; a client's calls in flight are bounded per connection.
        .http2_keepalive_interval(Some(GRPC_KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(GRPC_KEEPALIVE_TIMEOUT))
        .tcp_keepalive(Some(GRPC_KEEPALIVE_INTERVAL))
        .max_concurrent_streams(Some(opts.grpc_max_streams))
        .layer(tower::util::MapResponseLayer::new(oversize_to_resource_exhausted(
            opts.max_request_bytes,
        )))
        .layer(crate::budget::grpc::BudgetLayer::new(
            engine.budget().clone(),
            opts.grpc_body_timeout,
        ))
        .add_service(health_svc)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(svc)
        .serve_with_incoming_shutdown(
            // Without TCP_NODELAY a response's frames meet Nagle and the client's
            // delayed ACK: about one small call in fifteen waited 40 ms on loopback.
            capped(
                tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
                opts.grpc_max_connections,
                opts.grpc_silent_timeout,
            ),
            on_shutdown,
        );
    tokio::pin!(server);
    let admission = engine.admission().clone();
    let drain = async {
        let _ = drained_rx.await;
        // Admission drained first (no new run or session starts), then every live
        // session paused into the store (each waits for its call in progress), then the
        // other runs; all within the one drain timeout.
        let deadline = tokio::time::Instant::now() + opts.drain_timeout;
        if sessions.policy().pause_on_drain {
            sessions.pause_for_drain(deadline).await;
        }
        let _ = stored_tx.send(true);
        tokio::time::timeout_at(deadline, runs_finished(&admission))
            .await
            .is_ok()
    };
    tokio::pin!(drain);
    tokio::select! {
        r = &mut server => match r {
            Err(e) => {
                sessions.close_all().await;
                return Err(e.into());
            }
            // Every client gone before the drain ended: the sessions are still paused.
            Ok(()) => {
                drain.await;
            }
        },
        idle = &mut drain => {
            if idle {
                // The server's own graceful shutdown also waits for every client to close its
                // connection, and an idle pooled connection may never do so: once no run is
                // left, give the last responses a moment to go out, then stop.
                let _ = tokio::time::timeout(DRAIN_FLUSH, &mut server).await;
                tracing::info!("drained: no runs left");
            } else {
                tracing::warn!("drain timeout reached; exiting with runs in flight");
            }
        }
    }
    // Sessions end with the server: their processes killed, their work dirs gone.
    sessions.close_all().await;
    Ok(())
}

/// HTTP/2 PING every this often on an open gRPC connection (and TCP keepalive).
const GRPC_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
/// A PING unanswered for this long closes the connection.
const GRPC_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// How long a drained server keeps serving, after its last run ended, for the responses
/// still on their way out.
const DRAIN_FLUSH: Duration = Duration::from_secs(1);

/// Resolves once no request is in progress: not merely no slot busy, since an Evaluate
/// gives its slot back between its runs and must still finish.
async fn runs_finished(admission: &crate::admission::Admission) {
    while admission.requests() > 0 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What a gRPC client sends first: the HTTP/2 preface (24 bytes) and its
/// SETTINGS frame's header (9). Until all of it arrived the connection is
/// still in its handshake, and the handshake has a deadline: one byte and
/// then silence held a connection permit forever.
const HANDSHAKE_BYTES: usize = 24 + 9;

/// A connection that holds one of the server's connection permits while open, and is
/// dropped if its client has not finished its side of the handshake in time
/// (a permit held by a silent or trickling socket).
struct Counted {
    tcp: tokio::net::TcpStream,
    _permit: tokio::sync::OwnedSemaphorePermit,
    /// Until the handshake's bytes arrived: when they must have.
    silent_until: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
    /// Bytes received so far, counted up to [`HANDSHAKE_BYTES`].
    received: usize,
}

impl tonic::transport::server::Connected for Counted {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;
    fn connect_info(&self) -> Self::ConnectInfo {
        self.tcp.connect_info()
    }
}

impl tokio::io::AsyncRead for Counted {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        use std::future::Future;
        use std::task::Poll;
        let me = &mut *self;
        let before = buf.filled().len();
        match std::pin::Pin::new(&mut me.tcp).poll_read(cx, buf) {
            Poll::Ready(Ok(())) if buf.filled().len() > before => {
                if me.silent_until.is_some() {
                    me.received += buf.filled().len() - before;
                    if me.received >= HANDSHAKE_BYTES {
                        me.silent_until = None;
                    }
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending => {
                let expired = me.silent_until.as_mut().is_some_and(|t| t.as_mut().poll(cx).is_ready());
                if expired {
                    let why = "the client did not finish the HTTP/2 handshake in time";
                    return Poll::Ready(Err(std::io::Error::new(std::io::ErrorKind::TimedOut, why)));
                }
                Poll::Pending
            }
            other => other,
        }
    }
}

impl tokio::io::AsyncWrite for Counted {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.tcp).poll_write(cx, buf)
    }
    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }
    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.tcp).poll_flush(cx)
    }
    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}

/// Accepts at most `max` connections at once; the rest wait in the kernel's accept queue,
/// holding no descriptor of ours.
/// A connection whose client has not sent its handshake within `silent` is dropped.
fn capped(
    incoming: tonic::transport::server::TcpIncoming,
    max: usize,
    silent: Duration,
) -> impl futures::Stream<Item = Result<Counted, std::io::Error>> + Send + 'static {
    let permits = Arc::new(tokio::sync::Semaphore::new(max.max(1)));
    futures::stream::unfold((incoming, permits), move |(mut incoming, permits)| async move {
        let permit = permits.clone().acquire_owned().await.ok()?;
        let next = incoming.next().await?;
        let conn = next.map(|tcp| Counted {
            tcp,
            _permit: permit,
            silent_until: Some(Box::pin(tokio::time::sleep(silent))),
            received: 0,
        });
        Some((conn, (incoming, permits)))
    })
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

#[cfg(test)]
mod drain_tests {
    use super::*;
    use crate::admission::Admission;

    /// An Evaluate between two of its runs holds no slot and waits in no queue: the drain
    /// must still wait for it, or the server would stop under it.
    #[tokio::test]
    async fn drain_waits_for_a_request_between_its_runs() {
        let admission = Admission::new(1, 1);
        let request = admission.request();
        let slot = admission.acquire(None).await.expect("slot");
        drop(slot);
        assert_eq!((admission.busy(), admission.queued()), (0, 0));
        let waited = tokio::time::timeout(Duration::from_millis(300), runs_finished(&admission)).await;
        assert!(waited.is_err(), "the drain ended while a request was still in progress");
        drop(request);
        tokio::time::timeout(Duration::from_secs(5), runs_finished(&admission))
            .await
            .expect("the drain ends once the request is done");
    }
}
