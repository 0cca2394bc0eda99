//! Who may reach a pool's executors: the NetworkPolicy peers for the executor and metrics
//! ports, which must never admit everyone by accident.

use std::collections::BTreeMap;

use k8s_openapi::api::networking::v1::NetworkPolicyPeer;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::invalid::InvalidSpec;
use crate::crd::Access;

/// The default client peer: pods labelled `role=sandbox-user` in the pool's namespace.
pub fn default_clients() -> Vec<NetworkPolicyPeer> {
    vec![NetworkPolicyPeer {
        pod_selector: Some(LabelSelector {
            match_labels: Some(BTreeMap::from([("role".to_owned(), "sandbox-user".to_owned())])),
            ..Default::default()
        }),
        ..Default::default()
    }]
}

/// An empty peer is rejected by the API server, and one with an empty selector (or an
/// everything `ipBlock`) admits every pod in the namespace or cluster, which a pool must ask
/// for explicitly with `allowAll`.
fn check_peers(field: &str, peers: &[NetworkPolicyPeer], allow_all: bool) -> Result<(), InvalidSpec> {
    let empty = |s: &Option<LabelSelector>| {
        s.as_ref().is_some_and(|s| {
            s.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
                && s.match_expressions.as_ref().is_none_or(Vec::is_empty)
        })
    };
    for (i, peer) in peers.iter().enumerate() {
        if peer.pod_selector.is_none() && peer.namespace_selector.is_none() && peer.ip_block.is_none() {
            return Err(InvalidSpec::new(
                format!("{field}[{i}]"),
                "must set podSelector, namespaceSelector or ipBlock",
            ));
        }
        let everything = empty(&peer.pod_selector)
            || empty(&peer.namespace_selector)
            || peer
                .ip_block
                .as_ref()
                .is_some_and(|b| matches!(b.cidr.as_str(), "0.0.0.0/0" | "::/0"));
        if everything && !allow_all {
            return Err(InvalidSpec::new(
                format!("{field}[{i}]"),
                "admits every pod (an empty selector or an everything ipBlock); set spec.access.allowAll: true if that is meant",
            ));
        }
    }
    Ok(())
}

/// Who may call the executors, and scrape them: `spec.access` with its defaults, checked.
pub(super) struct ResolvedAccess {
    /// Peers allowed on the executor ports.
    pub clients: Vec<NetworkPolicyPeer>,
    /// Peers allowed on the metrics port.
    pub metrics_clients: Vec<NetworkPolicyPeer>,
    /// Serve the HTTP port too.
    pub http: bool,
}

pub(super) fn resolve_access(spec: Option<&Access>) -> Result<ResolvedAccess, InvalidSpec> {
    let access = spec.cloned().unwrap_or_default();
    let allow_all = access.allow_all.unwrap_or(false);
    let clients = access.clients.unwrap_or_else(default_clients);
    check_peers("spec.access.clients", &clients, allow_all)?;
    let metrics_clients = access.metrics_clients.unwrap_or_default();
    check_peers("spec.access.metricsClients", &metrics_clients, allow_all)?;
    Ok(ResolvedAccess {
        clients,
        metrics_clients,
        http: access.http.unwrap_or(false),
    })
}
