//! The pool's gateway (`sandpool-gateway`): one HTTP address in front of the executors. It
//! spreads SandboxFusion/Piston requests over them and sends E2B session calls to the pod
//! that holds the session, learning the pods from the pool's EndpointSlices.
//!
//! Its own objects, all named `<pool>-gateway`: Deployment, ClusterIP Service,
//! ServiceAccount with a Role that may only list and watch EndpointSlices, and a
//! NetworkPolicy that lets the pool's clients in and the gateway out only to the pool's
//! executors, DNS and the API server. The pool's own NetworkPolicy admits the gateway pods
//! on the HTTP port ([`super::network_policy`]).

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EnvVar, EnvVarSource, HTTPGetAction, ObjectFieldSelector,
    PodSecurityContext, PodSpec, PodTemplateSpec, Probe, SeccompProfile, SecurityContext, Service, ServiceAccount,
    ServicePort, ServiceSpec,
};
use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::labels::{self, HTTP_PORT, METRICS_PORT};
use crate::resolve::{ResolvedGateway, ResolvedPool};

/// The gateway binary's path in the operator image.
pub const GATEWAY_COMMAND: &str = "/sandpool-gateway";
/// The gateway's container name.
pub const GATEWAY_CONTAINER: &str = "gateway";
/// The distroless `nonroot` user the operator image runs as.
pub const GATEWAY_UID: i64 = 65532;

/// Every object of a pool's gateway.
#[derive(Debug, Clone, PartialEq)]
pub struct GatewayChildren {
    /// Identity of the gateway pods (they need a token for the EndpointSlice watch).
    pub service_account: ServiceAccount,
    /// May list and watch EndpointSlices in the pool's namespace, nothing else.
    pub role: Role,
    /// Binds the Role to the ServiceAccount.
    pub role_binding: RoleBinding,
    /// Who may reach the gateway and what it may reach; applied before the Deployment.
    pub network_policy: NetworkPolicy,
    /// The address clients call: `http://<pool>-gateway:8080`.
    pub service: Service,
    /// The gateway pods.
    pub deployment: Deployment,
}

/// The gateway's objects, or `None` when the pool has no gateway.
pub fn gateway(pool: &ResolvedPool) -> Option<GatewayChildren> {
    let gateway = pool.gateway.as_ref()?;
    Some(GatewayChildren {
        service_account: gateway_service_account(pool),
        role: gateway_role(pool),
        role_binding: gateway_role_binding(pool),
        network_policy: gateway_network_policy(pool, gateway),
        service: gateway_service(pool),
        deployment: gateway_deployment(pool, gateway),
    })
}

/// The gateway's command line (after the command).
pub fn gateway_args(pool: &ResolvedPool) -> Vec<String> {
    [
        "--listen",
        &format!("0.0.0.0:{HTTP_PORT}"),
        "--metrics-listen",
        &format!("0.0.0.0:{METRICS_PORT}"),
        // The pool's headless Service, whose EndpointSlices name the executor pods.
        "--service",
        &pool.name,
        "--port-name",
        "http",
    ]
    .map(str::to_owned)
    .to_vec()
}

fn meta(pool: &ResolvedPool) -> ObjectMeta {
    ObjectMeta {
        name: Some(pool.gateway_name()),
        namespace: Some(pool.namespace.clone()),
        labels: Some(labels::gateway_labels(&pool.name)),
        owner_references: pool.owner.clone().map(|o| vec![o]),
        ..Default::default()
    }
}

fn selector(pool: &ResolvedPool) -> LabelSelector {
    LabelSelector {
        match_labels: Some(labels::gateway_selector_labels(&pool.name)),
        ..Default::default()
    }
}

/// No token by default: only the gateway pod asks for one (`automountServiceAccountToken`
/// on its spec), so nothing else that might use this ServiceAccount gets one.
fn gateway_service_account(pool: &ResolvedPool) -> ServiceAccount {
    ServiceAccount {
        metadata: meta(pool),
        automount_service_account_token: Some(false),
        ..Default::default()
    }
}

/// List and watch EndpointSlices: all the gateway asks the API server (no `get`, no Pods,
/// no Secrets). The operator must itself hold these verbs to grant them.
fn gateway_role(pool: &ResolvedPool) -> Role {
    Role {
        metadata: meta(pool),
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec!["discovery.k8s.io".to_owned()]),
            resources: Some(vec!["endpointslices".to_owned()]),
            verbs: ["list", "watch"].map(str::to_owned).to_vec(),
            ..Default::default()
        }]),
    }
}

fn gateway_role_binding(pool: &ResolvedPool) -> RoleBinding {
    RoleBinding {
        metadata: meta(pool),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".to_owned(),
            kind: "Role".to_owned(),
            name: pool.gateway_name(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".to_owned(),
            name: pool.gateway_name(),
            namespace: Some(pool.namespace.clone()),
            ..Default::default()
        }]),
    }
}

/// Ingress: the pool's clients on the HTTP port, its metrics clients on the metrics port
/// (an empty list gives no rule, as for the pool). Egress: the pool's executor pods on the
/// HTTP port, the cluster DNS, and the API server; nothing else.
///
/// The API server is not a pod, so no selector names it, and its address differs per
/// cluster (and per control-plane node). Policies see the connection after the
/// `kubernetes` Service's translation, so the rule allows its ports (443 and 6443 unless
/// the operator's `--gateway-api-server-ports` says otherwise) to any address: the
/// narrowest rule that works on every cluster without the operator knowing its addresses.
fn gateway_network_policy(pool: &ResolvedPool, gateway: &ResolvedGateway) -> NetworkPolicy {
    let mut ingress = Vec::new();
    if !pool.clients.is_empty() {
        ingress.push(NetworkPolicyIngressRule {
            from: Some(pool.clients.clone()),
            ports: Some(vec![tcp(HTTP_PORT)]),
        });
    }
    if !pool.metrics_clients.is_empty() {
        ingress.push(NetworkPolicyIngressRule {
            from: Some(pool.metrics_clients.clone()),
            ports: Some(vec![tcp(METRICS_PORT)]),
        });
    }
    let executors = NetworkPolicyEgressRule {
        to: Some(vec![NetworkPolicyPeer {
            pod_selector: Some(LabelSelector {
                match_labels: Some(labels::selector_labels(&pool.name)),
                ..Default::default()
            }),
            ..Default::default()
        }]),
        ports: Some(vec![tcp(HTTP_PORT)]),
    };
    let dns = NetworkPolicyEgressRule {
        to: Some(vec![dns_peer()]),
        ports: Some(vec![port("UDP", 53), port("TCP", 53)]),
    };
    let api_server = NetworkPolicyEgressRule {
        to: None,
        ports: Some(gateway.api_server_ports.iter().map(|p| tcp(*p)).collect()),
    };
    NetworkPolicy {
        metadata: meta(pool),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(selector(pool)),
            policy_types: Some(vec!["Ingress".to_owned(), "Egress".to_owned()]),
            ingress: Some(ingress),
            egress: Some(vec![executors, dns, api_server]),
        }),
    }
}

/// The cluster DNS pods: `k8s-app=kube-dns` in `kube-system` (CoreDNS and kube-dns both
/// carry that label).
pub fn dns_peer() -> NetworkPolicyPeer {
    NetworkPolicyPeer {
        namespace_selector: Some(LabelSelector {
            match_labels: Some(BTreeMap::from([(
                "kubernetes.io/metadata.name".to_owned(),
                "kube-system".to_owned(),
            )])),
            ..Default::default()
        }),
        pod_selector: Some(LabelSelector {
            match_labels: Some(BTreeMap::from([("k8s-app".to_owned(), "kube-dns".to_owned())])),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A ClusterIP Service: unlike the pool's headless one, clients get one address and the
/// gateways do the spreading.
fn gateway_service(pool: &ResolvedPool) -> Service {
    let port = |name: &str, number: i32| ServicePort {
        name: Some(name.to_owned()),
        port: number,
        target_port: Some(IntOrString::String(name.to_owned())),
        protocol: Some("TCP".to_owned()),
        ..Default::default()
    };
    Service {
        metadata: meta(pool),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".to_owned()),
            selector: Some(labels::gateway_selector_labels(&pool.name)),
            ports: Some(vec![port("http", HTTP_PORT), port("metrics", METRICS_PORT)]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn gateway_deployment(pool: &ResolvedPool, gateway: &ResolvedGateway) -> Deployment {
    let pod = PodSpec {
        service_account_name: Some(pool.gateway_name()),
        // The EndpointSlice watch needs the token; the Role allows nothing more.
        automount_service_account_token: Some(true),
        enable_service_links: Some(false),
        host_network: Some(false),
        host_pid: Some(false),
        host_ipc: Some(false),
        // A proxied request lasts as long as the run behind it; give the gateway the
        // executors' grace so a rollout does not cut runs the executors would finish.
        termination_grace_period_seconds: Some(pool.runs_termination_grace_seconds()),
        security_context: Some(PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(GATEWAY_UID),
            run_as_group: Some(GATEWAY_UID),
            seccomp_profile: Some(runtime_default()),
            ..Default::default()
        }),
        // The pool's pull secrets: the operator's image usually sits in the same registry as
        // the executor's, and a secret that does not cover it costs nothing.
        image_pull_secrets: (!pool.image_pull_secrets.is_empty()).then(|| pool.image_pull_secrets.clone()),
        containers: vec![gateway_container(pool, gateway)],
        ..Default::default()
    };
    Deployment {
        metadata: meta(pool),
        spec: Some(DeploymentSpec {
            replicas: Some(gateway.replicas),
            selector: selector(pool),
            // Surge before stopping an old pod, so the address never has no gateway behind it.
            strategy: Some(DeploymentStrategy {
                type_: Some("RollingUpdate".to_owned()),
                rolling_update: Some(RollingUpdateDeployment {
                    max_surge: Some(IntOrString::Int(1)),
                    max_unavailable: Some(IntOrString::Int(0)),
                }),
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels::gateway_labels(&pool.name)),
                    annotations: Some(BTreeMap::from([(
                        "kubectl.kubernetes.io/default-container".to_owned(),
                        GATEWAY_CONTAINER.to_owned(),
                    )])),
                    ..Default::default()
                }),
                spec: Some(pod),
            },
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn gateway_container(pool: &ResolvedPool, gateway: &ResolvedGateway) -> Container {
    let container_port = |name: &str, number: i32| ContainerPort {
        name: Some(name.to_owned()),
        container_port: number,
        protocol: Some("TCP".to_owned()),
        ..Default::default()
    };
    Container {
        name: GATEWAY_CONTAINER.to_owned(),
        image: Some(gateway.image.clone()),
        image_pull_policy: Some("IfNotPresent".to_owned()),
        // The operator image's entrypoint is the operator; the gateway is beside it.
        command: Some(vec![GATEWAY_COMMAND.to_owned()]),
        args: Some(gateway_args(pool)),
        // The gateway watches EndpointSlices in its own namespace.
        env: Some(vec![EnvVar {
            name: "POD_NAMESPACE".to_owned(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: "metadata.namespace".to_owned(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }]),
        ports: Some(vec![
            container_port("http", HTTP_PORT),
            container_port("metrics", METRICS_PORT),
        ]),
        resources: Some(gateway.resources.clone()),
        // Ready once it knows at least one executor; alive while it answers at all.
        readiness_probe: Some(http_probe("/readyz", 5, 2)),
        liveness_probe: Some(http_probe("/healthz", 10, 3)),
        termination_message_policy: Some("FallbackToLogsOnError".to_owned()),
        security_context: Some(SecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(GATEWAY_UID),
            run_as_group: Some(GATEWAY_UID),
            privileged: Some(false),
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".to_owned()]),
                add: None,
            }),
            seccomp_profile: Some(runtime_default()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn http_probe(path: &str, period: i32, failures: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.to_owned()),
            port: IntOrString::String("metrics".to_owned()),
            scheme: Some("HTTP".to_owned()),
            ..Default::default()
        }),
        period_seconds: Some(period),
        failure_threshold: Some(failures),
        ..Default::default()
    }
}

fn runtime_default() -> SeccompProfile {
    SeccompProfile {
        type_: "RuntimeDefault".to_owned(),
        ..Default::default()
    }
}

fn tcp(number: i32) -> NetworkPolicyPort {
    port("TCP", number)
}

fn port(protocol: &str, number: i32) -> NetworkPolicyPort {
    NetworkPolicyPort {
        protocol: Some(protocol.to_owned()),
        port: Some(IntOrString::Int(number)),
        end_port: None,
    }
}
