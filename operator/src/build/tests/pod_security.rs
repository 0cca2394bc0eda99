//! The Pod Security Standards' "restricted" profile (Kubernetes `latest`), as the checks
//! Pod Security admission runs on a pod spec, so builder tests can hold every rendered pod
//! to all of them. The e2e tests (`operator_e2e`) check the same against a real API server.

use serde_json::Value;

/// Volume types "restricted" admits.
const VOLUME_TYPES: [&str; 8] = [
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];
/// Sysctls "baseline" admits.
const SAFE_SYSCTLS: [&str; 9] = [
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
];
/// SELinux types "baseline" admits (besides none).
const SELINUX_TYPES: [&str; 4] = [
    "container_t",
    "container_init_t",
    "container_kvm_t",
    "container_engine_t",
];
const APPARMOR_ANNOTATION: &str = "container.apparmor.security.beta.kubernetes.io/";

/// Every way `template` (a pod template: `metadata` and `spec`) breaks the "restricted"
/// profile (which includes "baseline"), one line each; empty when Pod Security admits it.
pub fn restricted_violations(template: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let pod = &template["spec"];
    let psc = &pod["securityContext"];
    let containers: Vec<&Value> = ["initContainers", "containers", "ephemeralContainers"]
        .iter()
        .flat_map(|k| pod[*k].as_array().into_iter().flatten())
        .collect();
    let name = |c: &Value| c["name"].as_str().unwrap_or("?").to_owned();

    // baseline
    for host in ["hostNetwork", "hostPID", "hostIPC"] {
        if pod[host] == true {
            out.push(format!("{host}: true"));
        }
    }
    for (i, volume) in pod["volumes"].as_array().into_iter().flatten().enumerate() {
        let kinds: Vec<&String> = volume
            .as_object()
            .into_iter()
            .flat_map(|o| o.keys())
            .filter(|k| *k != "name")
            .collect();
        if kinds.len() != 1 || !VOLUME_TYPES.contains(&kinds[0].as_str()) {
            out.push(format!("volumes[{i}] of type {kinds:?}"));
        }
    }
    for sysctl in psc["sysctls"].as_array().into_iter().flatten() {
        let n = sysctl["name"].as_str().unwrap_or_default();
        if !SAFE_SYSCTLS.contains(&n) {
            out.push(format!("sysctl {n}"));
        }
    }
    let annotations = template["metadata"]["annotations"].as_object();
    for (key, value) in annotations.into_iter().flatten() {
        let value = value.as_str().unwrap_or_default();
        if key.starts_with(APPARMOR_ANNOTATION) && value != "runtime/default" && !value.starts_with("localhost/") {
            out.push(format!("annotation {key}: {value}"));
        }
    }
    let contexts = std::iter::once(("pod".to_owned(), psc)).chain(
        containers
            .iter()
            .map(|c| (format!("container {}", name(c)), &c["securityContext"])),
    );
    for (who, sc) in contexts {
        if sc["windowsOptions"]["hostProcess"] == true {
            out.push(format!("{who}: windowsOptions.hostProcess"));
        }
        if let Some(t) = sc["appArmorProfile"]["type"].as_str()
            && !matches!(t, "RuntimeDefault" | "Localhost")
        {
            out.push(format!("{who}: appArmorProfile {t}"));
        }
        let se = &sc["seLinuxOptions"];
        if se["user"].is_string() || se["role"].is_string() {
            out.push(format!("{who}: seLinuxOptions user/role"));
        }
        if let Some(t) = se["type"].as_str()
            && !t.is_empty()
            && !SELINUX_TYPES.contains(&t)
        {
            out.push(format!("{who}: seLinuxOptions.type {t}"));
        }
        // restricted: never uid 0, never runAsNonRoot false.
        if sc["runAsUser"] == 0 {
            out.push(format!("{who}: runAsUser 0"));
        }
        if sc["runAsNonRoot"] == false {
            out.push(format!("{who}: runAsNonRoot false"));
        }
        if let Some(t) = sc["seccompProfile"]["type"].as_str()
            && !matches!(t, "RuntimeDefault" | "Localhost")
        {
            out.push(format!("{who}: seccompProfile {t}"));
        }
    }

    let pod_non_root = psc["runAsNonRoot"] == true;
    let pod_seccomp = psc["seccompProfile"]["type"].is_string();
    for c in &containers {
        let who = format!("container {}", name(c));
        let sc = &c["securityContext"];
        if sc["privileged"] == true {
            out.push(format!("{who}: privileged"));
        }
        if sc["procMount"].as_str().is_some_and(|m| m != "Default") {
            out.push(format!("{who}: procMount {}", sc["procMount"]));
        }
        for (j, port) in c["ports"].as_array().into_iter().flatten().enumerate() {
            if port["hostPort"].as_i64().is_some_and(|p| p != 0) {
                out.push(format!("{who}: ports[{j}].hostPort"));
            }
        }
        // restricted
        if sc["allowPrivilegeEscalation"] != false {
            out.push(format!("{who}: allowPrivilegeEscalation is not false"));
        }
        if !pod_non_root && sc["runAsNonRoot"] != true {
            out.push(format!("{who}: runAsNonRoot is not true (nor the pod's)"));
        }
        if !pod_seccomp && !sc["seccompProfile"]["type"].is_string() {
            out.push(format!("{who}: no seccompProfile (nor the pod's)"));
        }
        let caps = &sc["capabilities"];
        if !caps["drop"].as_array().is_some_and(|d| d.iter().any(|c| c == "ALL")) {
            out.push(format!("{who}: capabilities.drop lacks ALL"));
        }
        for cap in caps["add"].as_array().into_iter().flatten() {
            if cap != "NET_BIND_SERVICE" {
                out.push(format!("{who}: capabilities.add {cap}"));
            }
        }
    }
    out
}
