//! The operator's HTTP endpoint: `/metrics`, `/healthz` (liveness), `/readyz` (readiness).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

/// State the endpoints read.
pub struct Health {
    /// Metrics to expose.
    pub registry: Registry,
    /// Set once the operator can talk to the API server and the CRD is installed.
    pub ready: AtomicBool,
}

/// The router; split from [`serve`] so it can be tested without a socket.
pub fn router(health: Arc<Health>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(health)
}

/// Serves the router on `listener` until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    health: Arc<Health>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "serving /metrics, /healthz and /readyz");
    }
    axum::serve(listener, router(health))
        .with_graceful_shutdown(shutdown)
        .await
}

async fn metrics(State(health): State<Arc<Health>>) -> impl IntoResponse {
    let mut text = String::new();
    match prometheus_client::encoding::text::encode(&mut text, &health.registry) {
        Ok(()) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        ),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain")],
            "cannot encode metrics".to_owned(),
        ),
    }
}

async fn readyz(State(health): State<Arc<Health>>) -> impl IntoResponse {
    if health.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "starting")
    }
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    use super::*;
    use crate::metrics::Metrics;

    async fn get(health: &Arc<Health>, path: &str) -> (StatusCode, String) {
        let response = router(health.clone())
            .oneshot(Request::get(path).body(Body::empty()).expect("request builds"))
            .await
            .expect("router answers");
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .expect("body reads");
        (status, String::from_utf8_lossy(&bytes).into_owned())
    }

    #[tokio::test]
    async fn readiness_follows_startup_and_metrics_are_served() {
        let metrics = Metrics::default();
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        metrics.reconciles.inc();
        let health = Arc::new(Health {
            registry,
            ready: AtomicBool::new(false),
        });
        assert_eq!(get(&health, "/healthz").await.0, StatusCode::OK);
        assert_eq!(get(&health, "/readyz").await.0, StatusCode::SERVICE_UNAVAILABLE);
        health.ready.store(true, Ordering::Relaxed);
        assert_eq!(get(&health, "/readyz").await.0, StatusCode::OK);
        let (status, text) = get(&health, "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert!(text.contains("sandpool_operator_reconciles_total 1"), "{text}");
    }
}
