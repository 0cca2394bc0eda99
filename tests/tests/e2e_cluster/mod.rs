//! Shared by the Kubernetes end-to-end tests (`operator_e2e`, `chart_e2e`): the test cluster
//! that `scripts/cluster.sh up` starts (real etcd, kube-apiserver, kube-controller-manager and
//! kube-scheduler, kwok nodes), namespaces, Helm releases, and the operator binary running
//! out of cluster with a chart ServiceAccount's token.
//!
//! Without a cluster these tests FAIL, because a Kubernetes test that silently passes proves
//! nothing: run `scripts/cluster.sh up && eval "$(scripts/cluster.sh env)"` first
//! (`scripts/test.sh` does), or set `SANDPOOL_E2E_SKIP=1` to skip them on purpose.

#![allow(dead_code)] // Each test binary uses a different part of this module.

use std::future::Future;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use serde_json::{Value, json};

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// The running test cluster, as `scripts/cluster.sh env` describes it.
#[derive(Clone, Debug)]
pub struct Cluster {
    /// The cluster's state directory.
    pub dir: PathBuf,
    /// Admin kubeconfig (system:masters).
    pub kubeconfig: PathBuf,
    pub kubectl: PathBuf,
    pub helm: PathBuf,
    /// The API server's audit log: one JSON event per write.
    pub audit_log: PathBuf,
}

/// The test cluster, or `None` when `SANDPOOL_E2E_SKIP=1` says to skip. Panics (fails the
/// test) when there is no cluster and skipping was not asked for.
pub fn cluster() -> Option<Cluster> {
    let Some(dir) = std::env::var_os("SANDPOOL_E2E_CLUSTER").filter(|d| !d.is_empty()) else {
        if std::env::var("SANDPOOL_E2E_SKIP").is_ok_and(|v| v == "1") {
            eprintln!("Kubernetes e2e skipped: SANDPOOL_E2E_SKIP=1");
            return None;
        }
        panic!(
            "no test cluster: SANDPOOL_E2E_CLUSTER is not set. Start one with \
             `scripts/cluster.sh up && eval \"$(scripts/cluster.sh env)\"` (scripts/test.sh does this), \
             or set SANDPOOL_E2E_SKIP=1 to skip the Kubernetes e2e tests on purpose"
        );
    };
    let dir = PathBuf::from(dir);
    let var = |name: &str| {
        PathBuf::from(std::env::var_os(name).unwrap_or_else(|| {
            panic!("{name} is not set: eval \"$(scripts/cluster.sh env)\" sets it with SANDPOOL_E2E_CLUSTER")
        }))
    };
    let cluster = Cluster {
        kubeconfig: dir.join("admin.kubeconfig"),
        kubectl: var("SANDPOOL_E2E_KUBECTL"),
        helm: var("SANDPOOL_E2E_HELM"),
        audit_log: var("SANDPOOL_E2E_AUDIT_LOG"),
        dir,
    };
    assert!(
        cluster.kubeconfig.exists(),
        "{} is missing: is the test cluster still up? (scripts/cluster.sh up)",
        cluster.kubeconfig.display()
    );
    Some(cluster)
}

impl Cluster {
    /// A client with the admin kubeconfig.
    pub async fn admin(&self) -> Client {
        client_from(&self.kubeconfig).await
    }

    /// Runs `kubectl` with `kubeconfig` (the admin's unless given); returns its output.
    pub fn kubectl_as(&self, kubeconfig: &Path, args: &[&str]) -> Output {
        Command::new(&self.kubectl)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(args)
            .output()
            .expect("kubectl runs")
    }

    /// Runs `kubectl` as admin and returns its stdout; panics with stderr if it fails.
    pub fn kubectl(&self, args: &[&str]) -> String {
        let out = self.kubectl_as(&self.kubeconfig, args);
        assert!(
            out.status.success(),
            "kubectl {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs `helm` against the cluster and returns its output.
    pub fn helm_output(&self, args: &[&str]) -> Output {
        Command::new(&self.helm)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            // Helm's caches and repository config stay out of $HOME.
            .env("HELM_CACHE_HOME", self.dir.join("helm/cache"))
            .env("HELM_CONFIG_HOME", self.dir.join("helm/config"))
            .env("HELM_DATA_HOME", self.dir.join("helm/data"))
            .output()
            .expect("helm runs")
    }

    /// Runs `helm`; panics with its stderr if it fails.
    pub fn helm(&self, args: &[&str]) -> String {
        let out = self.helm_output(args);
        assert!(
            out.status.success(),
            "helm {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Installs the SandboxPool CRD (as an upgrade would: server-side apply) and waits until
    /// it is served. Helm installs it too, but only when it is absent, and tests run at once.
    pub async fn ensure_crd(&self) {
        let crd = repo_root().join("manifests/crd.yaml");
        self.kubectl(&[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=sandpool-e2e",
            "-f",
            crd.to_str().expect("utf-8 path"),
        ]);
        let crds: Api<CustomResourceDefinition> = Api::all(self.admin().await);
        wait_for(
            "the SandboxPool CRD to be established",
            Duration::from_secs(60),
            || async {
                crds.get_opt("sandboxpools.sandpool.dev")
                    .await
                    .ok()
                    .flatten()
                    .and_then(|c| c.status)
                    .and_then(|s| s.conditions)
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Established" && c.status == "True"))
            },
        )
        .await;
    }

    /// Creates a namespace with `labels` (deleted again on drop).
    pub async fn namespace(&self, name: &str, labels: Value) -> TestNamespace {
        let client = self.admin().await;
        let api: Api<Namespace> = Api::all(client.clone());
        // A leftover of an earlier, interrupted run would make every check below ambiguous.
        if api.get_opt(name).await.expect("namespace reads").is_some() {
            let _ = api.delete(name, &DeleteParams::default()).await;
            wait_for(
                &format!("leftover namespace {name} to go"),
                Duration::from_secs(120),
                || async { api.get_opt(name).await.is_ok_and(|n| n.is_none()) },
            )
            .await;
        }
        let ns: Namespace =
            serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).expect("namespace");
        api.create(&PostParams::default(), &ns)
            .await
            .expect("namespace creates");
        TestNamespace {
            name: name.to_owned(),
            kubectl: self.kubectl.clone(),
            kubeconfig: self.kubeconfig.clone(),
        }
    }

    /// Writes a kubeconfig that authenticates as ServiceAccount `sa` in `namespace` with a
    /// fresh TokenRequest token (what a pod of that ServiceAccount would get).
    pub fn service_account_kubeconfig(&self, namespace: &str, sa: &str, path: &Path) {
        let token = self.kubectl(&["create", "token", sa, "-n", namespace, "--duration=2h"]);
        let server = self.kubectl(&[
            "config",
            "view",
            "--minify",
            "-o",
            "jsonpath={.clusters[0].cluster.server}",
        ]);
        let ca = self.dir.join("pki/ca.crt");
        let config = json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "e2e", "cluster": {"server": server, "certificate-authority": ca}}],
            "users": [{"name": sa, "user": {"token": token.trim()}}],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": sa, "namespace": namespace}}],
            "current-context": "e2e",
        });
        std::fs::write(path, serde_json::to_vec_pretty(&config).expect("json")).expect("kubeconfig writes");
    }

    /// The audit events (writes only, see scripts/cluster.sh) logged so far.
    pub fn audit_events(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.audit_log).expect("audit log reads");
        text.lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }
}

/// A client for the kubeconfig at `path`.
pub async fn client_from(path: &Path) -> Client {
    let kubeconfig = Kubeconfig::read_from(path).expect("kubeconfig reads");
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig is usable");
    Client::try_from(config).expect("client builds")
}

/// A namespace for one test; deleted (in the background) when dropped.
pub struct TestNamespace {
    pub name: String,
    kubectl: PathBuf,
    kubeconfig: PathBuf,
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        let _ = Command::new(&self.kubectl)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(["delete", "namespace", &self.name, "--wait=false", "--ignore-not-found"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// Polls `check` every 250 ms until it holds; panics naming `what` after `timeout`.
pub async fn wait_for<F, Fut>(what: &str, timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !check().await {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The operator binary, running out of cluster as a chart ServiceAccount. Killed on drop.
pub struct Operator {
    child: Option<Child>,
    pub identity: String,
    pub metrics_port: u16,
    pub log: PathBuf,
}

impl Operator {
    /// Starts `sandpool-operator run` with `kubeconfig`, watching `namespace` (all namespaces
    /// when `None`), competing for the Lease in `lease_namespace` as `identity`.
    pub fn start(
        kubeconfig: &Path,
        namespace: Option<&str>,
        lease_namespace: &str,
        identity: &str,
        logs: &Path,
    ) -> Self {
        Self::start_with_env(kubeconfig, namespace, lease_namespace, identity, logs, &[])
    }

    /// [`Operator::start`] with extra environment, e.g. the chart's settings for its
    /// Deployment (`SANDPOOL_DEFAULT_ISOLATION`, ...); the arguments above still win.
    pub fn start_with_env(
        kubeconfig: &Path,
        namespace: Option<&str>,
        lease_namespace: &str,
        identity: &str,
        logs: &Path,
        env: &[(String, String)],
    ) -> Self {
        let metrics_port = sandpool_tests::free_port();
        let log = logs.join(format!("operator-{identity}.log"));
        let log_file = std::fs::File::create(&log).expect("log file");
        let child = Command::new(sandpool_tests::binary("sandpool-operator"))
            .arg("run")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .args(["--namespace", namespace.unwrap_or("")])
            .args(["--lease-namespace", lease_namespace, "--identity", identity])
            .args(["--http-listen", &format!("127.0.0.1:{metrics_port}")])
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", "info,sandpool_operator=debug")
            .env("NO_COLOR", "1")
            .env_remove("WATCH_NAMESPACE")
            .env_remove("POD_NAMESPACE")
            .env_remove("POD_NAME")
            .stdout(log_file.try_clone().expect("log file"))
            .stderr(log_file)
            .spawn()
            .expect("sandpool-operator starts");
        Self {
            child: Some(child),
            identity: identity.to_owned(),
            metrics_port,
            log,
        }
    }

    /// The operator's log so far (for assertion messages).
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Whether the process still runs.
    pub fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }

    /// SIGKILL, as a node failure would: no lease release.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// `/metrics` as text, or `None` if it does not answer.
    pub fn metrics(&self) -> Option<String> {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", self.metrics_port)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        stream
            .write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
            .ok()?;
        let mut text = String::new();
        stream.read_to_string(&mut text).ok()?;
        text.split_once("\r\n\r\n").map(|(_, body)| body.to_owned())
    }

    /// The value of one sample (`name{labels}` exactly as exported), 0 when absent.
    pub fn metric(&self, sample: &str) -> f64 {
        let text = self.metrics().unwrap_or_default();
        text.lines()
            .find_map(|line| line.strip_prefix(sample).and_then(|rest| rest.strip_prefix(' ')))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0)
    }

    /// Sum of every sample of a metric family (`name` followed by `{` or a space).
    pub fn metric_sum(&self, name: &str) -> f64 {
        let text = self.metrics().unwrap_or_default();
        text.lines()
            .filter(|line| {
                line.strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
            })
            .filter_map(|line| line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
            .sum()
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SIGTERM first, so it releases its lease like a pod being stopped.
            let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
