//! The pool's headless Service.

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::child_meta;
use crate::labels::{self, GRPC_PORT, HTTP_PORT, METRICS_PORT};
use crate::resolve::ResolvedPool;

/// A headless Service named after the pool: DNS returns every ready pod, so gRPC clients
/// (`dns:///` with round-robin) spread runs across pods instead of pinning one connection.
pub fn service(pool: &ResolvedPool) -> Service {
    let mut ports = vec![port("grpc", GRPC_PORT)];
    if pool.http {
        ports.push(port("http", HTTP_PORT));
    }
    // Named so a ServiceMonitor can find it; the NetworkPolicy decides who may scrape.
    ports.push(port("metrics", METRICS_PORT));
    Service {
        metadata: child_meta(pool),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".to_owned()),
            selector: Some(labels::selector_labels(&pool.name)),
            ports: Some(ports),
            publish_not_ready_addresses: Some(false),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn port(name: &str, number: i32) -> ServicePort {
    ServicePort {
        name: Some(name.to_owned()),
        port: number,
        target_port: Some(IntOrString::String(name.to_owned())),
        protocol: Some("TCP".to_owned()),
        ..Default::default()
    }
}
