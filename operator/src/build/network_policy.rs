//! The pool's NetworkPolicy: only the pool's clients get in, nothing gets out.

use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::child_meta;
use crate::labels::{self, GRPC_PORT, HTTP_PORT, METRICS_PORT};
use crate::resolve::ResolvedPool;

/// Selects the pool's pods and declares both policy types. Egress has no rules at all, so
/// untrusted code can reach nothing, not even DNS. Ingress admits `spec.access.clients` on
/// the executor ports and `spec.access.metricsClients` on the metrics port.
///
/// Each client peer is copied as one `from` entry, unchanged: a `podSelector` and a
/// `namespaceSelector` in one entry mean "these pods in these namespaces" (AND); splitting
/// them into two entries would mean "these pods here, or anything in those namespaces" (OR).
/// An empty peer list produces no rule rather than a rule with no `from`, which would admit
/// every source.
///
/// A pool with a gateway also admits its own gateway pods (by their selector, in the pool's
/// namespace) on the HTTP port only: the gateway forwards the clients' requests, and must
/// not depend on a label the clients' selector happens to match.
pub fn network_policy(pool: &ResolvedPool) -> NetworkPolicy {
    let mut ingress = Vec::new();
    if !pool.clients.is_empty() {
        let mut ports = vec![tcp(GRPC_PORT)];
        if pool.http {
            ports.push(tcp(HTTP_PORT));
        }
        ingress.push(NetworkPolicyIngressRule {
            from: Some(pool.clients.clone()),
            ports: Some(ports),
        });
    }
    if pool.gateway.is_some() {
        ingress.push(NetworkPolicyIngressRule {
            from: Some(vec![NetworkPolicyPeer {
                pod_selector: Some(LabelSelector {
                    match_labels: Some(labels::gateway_selector_labels(&pool.name)),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            ports: Some(vec![tcp(HTTP_PORT)]),
        });
    }
    if !pool.metrics_clients.is_empty() {
        ingress.push(NetworkPolicyIngressRule {
            from: Some(pool.metrics_clients.clone()),
            ports: Some(vec![tcp(METRICS_PORT)]),
        });
    }
    NetworkPolicy {
        metadata: child_meta(pool),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector {
                match_labels: Some(labels::selector_labels(&pool.name)),
                ..Default::default()
            }),
            policy_types: Some(vec!["Ingress".to_owned(), "Egress".to_owned()]),
            ingress: Some(ingress),
            egress: Some(Vec::new()),
        }),
    }
}

fn tcp(port: i32) -> NetworkPolicyPort {
    NetworkPolicyPort {
        protocol: Some("TCP".to_owned()),
        port: Some(IntOrString::Int(port)),
        end_port: None,
    }
}
