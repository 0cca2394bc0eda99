//! `sandpool-operator`: run the controller, print the CRD, or render a pool's objects.

use std::io::Read;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};

use sandpool_operator::config::OperatorConfig;
use sandpool_operator::controller::{self, RunConfig};
use sandpool_operator::crd::IsolationMode;
use sandpool_operator::defaults::{
    DEFAULT_API_SERVER_PORTS, PoolDefaults, default_executor_image, default_operator_image,
};
use sandpool_operator::error_chain;
use sandpool_operator::policy::Policy;

#[derive(Parser)]
#[command(
    name = "sandpool-operator",
    version,
    about = "Kubernetes operator for Sandpool executor pools"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the controller: watch SandboxPools and manage their executors.
    Run(RunArgs),
    /// Print the SandboxPool CustomResourceDefinition as YAML.
    Crd,
    /// Print every object the operator would apply for the pools in a file (no cluster needed).
    Render(RenderArgs),
    /// Print the RBAC rules the operator needs (JSON), as the chart must grant them.
    Rbac,
}

/// What the operator applies to every pool, as `run` and `render` take it.
#[derive(Args, Clone)]
struct ConfigArgs {
    #[command(flatten)]
    defaults: DefaultsArgs,
    #[command(flatten)]
    policy: PolicyArgs,
}

/// Defaults applied to pools that leave these fields unset.
#[derive(Args, Clone)]
struct DefaultsArgs {
    /// Executor image for pools without `spec.image`.
    #[arg(long, env = "SANDPOOL_EXECUTOR_IMAGE", default_value_t = default_executor_image())]
    executor_image: String,
    /// Gateway image for pools without `spec.gateway.image`: the operator's own image, which
    /// carries `/sandpool-gateway`.
    #[arg(long, env = "SANDPOOL_GATEWAY_IMAGE", default_value_t = default_operator_image())]
    gateway_image: String,
    /// Ports (comma-separated) gateways may reach the API server on, as NetworkPolicy sees
    /// them: the API server's own port, not the `kubernetes` Service's. Default 443,6443.
    #[arg(long, env = "SANDPOOL_GATEWAY_API_SERVER_PORTS", value_delimiter = ',', value_parser = clap::value_parser!(u16).range(1..))]
    gateway_api_server_ports: Vec<u16>,
    /// Isolation mode for pools without `spec.isolation.mode`.
    #[arg(long, env = "SANDPOOL_DEFAULT_ISOLATION", default_value = "namespaces", value_parser = parse_isolation)]
    default_isolation: IsolationMode,
    /// RuntimeClass for pools without `spec.isolation.runtimeClassName`.
    #[arg(long, env = "SANDPOOL_DEFAULT_RUNTIME_CLASS")]
    default_runtime_class: Option<String>,
    /// Cluster DNS domain, for `status.endpoint`.
    #[arg(long, env = "SANDPOOL_CLUSTER_DOMAIN", default_value = "cluster.local")]
    cluster_domain: String,
}

/// What pools may use whatever their spec says (docs/operator.md, "Policy").
#[derive(Args, Clone)]
struct PolicyArgs {
    /// Executor images pools may use (comma-separated): exact references, repositories
    /// (their tags and digests), or prefixes ending in `/`; `*` allows any. Default: the
    /// repository of --executor-image only.
    #[arg(long, env = "SANDPOOL_ALLOWED_IMAGES", value_delimiter = ',')]
    allowed_images: Vec<String>,
    /// RuntimeClasses pools may name instead of --default-runtime-class (`*`: any).
    /// With no default, an empty list allows any class.
    #[arg(long, env = "SANDPOOL_ALLOWED_RUNTIME_CLASSES", value_delimiter = ',')]
    allowed_runtime_classes: Vec<String>,
    /// Toleration keys pools may use (exact or prefix ending in `/`; `*`: any but
    /// control-plane). Default: any key but control-plane taints.
    #[arg(long, env = "SANDPOOL_ALLOWED_TOLERATION_KEYS", value_delimiter = ',')]
    allowed_toleration_keys: Vec<String>,
    /// Allow tolerations without a key (tolerating every taint).
    #[arg(long, env = "SANDPOOL_ALLOW_WILDCARD_TOLERATIONS", default_value_t = false, action = clap::ArgAction::Set)]
    allow_wildcard_tolerations: bool,
    /// Node label keys pools may select on (as for tolerations). Default: any key but
    /// control-plane roles.
    #[arg(long, env = "SANDPOOL_ALLOWED_NODE_SELECTOR_KEYS", value_delimiter = ',')]
    allowed_node_selector_keys: Vec<String>,
    /// Namespaces whose pools are managed (comma-separated); default: every watched one.
    #[arg(long, env = "SANDPOOL_MANAGED_NAMESPACES", value_delimiter = ',')]
    managed_namespaces: Vec<String>,
    /// Label selector namespaces must match to have their pools managed (`k=v`, `k!=v`, `k`,
    /// `!k`, comma-separated); needs `get` on namespaces.
    #[arg(long, env = "SANDPOOL_MANAGED_NAMESPACE_SELECTOR")]
    managed_namespace_selector: Option<String>,
}

impl From<PolicyArgs> for Policy {
    fn from(a: PolicyArgs) -> Self {
        let clean = |list: Vec<String>| -> Vec<String> {
            list.into_iter()
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .collect()
        };
        Policy {
            allowed_images: clean(a.allowed_images),
            allowed_runtime_classes: clean(a.allowed_runtime_classes),
            allowed_toleration_keys: clean(a.allowed_toleration_keys),
            allow_wildcard_tolerations: a.allow_wildcard_tolerations,
            allowed_node_selector_keys: clean(a.allowed_node_selector_keys),
            namespaces: clean(a.managed_namespaces),
            namespace_selector: a.managed_namespace_selector.filter(|s| !s.trim().is_empty()),
        }
    }
}

impl From<DefaultsArgs> for PoolDefaults {
    fn from(a: DefaultsArgs) -> Self {
        PoolDefaults {
            executor_image: a.executor_image,
            gateway_image: a.gateway_image,
            api_server_ports: if a.gateway_api_server_ports.is_empty() {
                DEFAULT_API_SERVER_PORTS.to_vec()
            } else {
                a.gateway_api_server_ports.into_iter().map(i32::from).collect()
            },
            isolation: a.default_isolation,
            runtime_class_name: a.default_runtime_class.filter(|s| !s.is_empty()),
            cluster_domain: a.cluster_domain,
        }
    }
}

impl From<ConfigArgs> for OperatorConfig {
    fn from(a: ConfigArgs) -> Self {
        OperatorConfig {
            defaults: a.defaults.into(),
            policy: a.policy.into(),
        }
    }
}

/// 16 reconciles at once: 16 requests in flight at most, well inside what one flow may queue
/// in the API server's `workload-low` priority level (6 queues of 50 by default), where
/// 1,000 at once overflowed; enough to keep the API server busy, which paces a resync anyway.
const DEFAULT_MAX_CONCURRENT_RECONCILES: u16 = 16;

#[derive(Args)]
struct RunArgs {
    /// Namespace to watch; unset watches all namespaces (needs a ClusterRole).
    #[arg(long, env = "WATCH_NAMESPACE")]
    namespace: Option<String>,
    /// Address of /metrics, /healthz and /readyz.
    #[arg(long, env = "SANDPOOL_OPERATOR_HTTP_LISTEN", default_value = "0.0.0.0:8081")]
    http_listen: SocketAddr,
    /// Elect a leader with a Lease so several replicas are safe.
    #[arg(long, env = "SANDPOOL_LEADER_ELECT", default_value_t = true, action = clap::ArgAction::Set)]
    leader_elect: bool,
    /// Namespace of the leader Lease (defaults to the watched namespace, then the kubeconfig context's).
    #[arg(long, env = "POD_NAMESPACE")]
    lease_namespace: Option<String>,
    /// This replica's identity in the Lease (defaults to HOSTNAME, then the host name and pid).
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// Most pools reconciled at once. Each reconcile makes its requests one after another,
    /// so this bounds the operator's requests in flight (and its memory) when every pool is
    /// due at once: after a restart, or a change to all of them (docs/scale.md).
    #[arg(long, env = "SANDPOOL_MAX_CONCURRENT_RECONCILES", default_value_t = DEFAULT_MAX_CONCURRENT_RECONCILES, value_parser = clap::value_parser!(u16).range(1..))]
    max_concurrent_reconciles: u16,
    /// Log format.
    #[arg(long, env = "SANDPOOL_LOG_FORMAT", default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
    #[command(flatten)]
    config: ConfigArgs,
}

#[derive(Args)]
struct RenderArgs {
    /// File with one or more SandboxPool documents (`-` reads standard input).
    #[arg(short = 'f', long = "filename")]
    file: PathBuf,
    /// Namespace for pools that name none.
    #[arg(short, long, default_value = "default")]
    namespace: String,
    #[command(flatten)]
    config: ConfigArgs,
}

fn parse_isolation(s: &str) -> Result<IsolationMode, String> {
    match s {
        "namespaces" => Ok(IsolationMode::Namespaces),
        "restricted" => Ok(IsolationMode::Restricted),
        other => Err(format!("{other:?} is not an isolation mode (namespaces, restricted)")),
    }
}

/// Whether log lines may carry colour: only for a person at a terminal (a pod's log, which
/// `kubectl logs` shows raw, must not), and never with `NO_COLOR` set (no-color.org).
fn log_colour(stdout_is_terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    stdout_is_terminal && no_color.is_none_or(|v| v.is_empty())
}

fn init_tracing(format: &str) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let ansi = log_colour(std::io::stdout().is_terminal(), std::env::var_os("NO_COLOR"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_ansi(ansi);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    // An empty WATCH_NAMESPACE (as a chart renders it for cluster-wide installs) means all.
    let namespace = args.namespace.filter(|ns| !ns.is_empty());
    let leader = if args.leader_elect {
        // Outside a pod (a laptop's kubeconfig) the context's namespace and the host name do.
        let kubeconfig_ns = match (&args.lease_namespace, &namespace) {
            (Some(ns), _) | (None, Some(ns)) if !ns.is_empty() => None,
            _ => Some(
                kube::Config::infer()
                    .await
                    .context("leader election needs a namespace for its Lease: --lease-namespace, --namespace or a kubeconfig")?
                    .default_namespace,
            ),
        };
        let lease_ns = lease_namespace(args.lease_namespace, namespace.as_deref(), kubeconfig_ns)
            .context("leader election needs --lease-namespace (POD_NAMESPACE) or --namespace")?;
        let host = nix::unistd::gethostname().ok().and_then(|h| h.into_string().ok());
        let identity = identity(args.identity, std::env::var("HOSTNAME").ok(), host, std::process::id())
            .context("leader election needs --identity (POD_NAME), HOSTNAME or a host name")?;
        Some((lease_ns, identity))
    } else {
        None
    };
    let config = RunConfig {
        namespace,
        pools: args.config.into(),
        http_listen: args.http_listen,
        leader,
        max_concurrent_reconciles: args.max_concurrent_reconciles,
    };
    controller::run(config).await?;
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Run(args) = cli.command {
        init_tracing(&args.log_format);
        return match run(args).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                // One line with the whole chain, each cause said once (kube's errors quote
                // their sources), not anyhow's multi-line report.
                tracing::error!("{}", error_chain(error.as_ref()));
                ExitCode::FAILURE
            }
        };
    }
    match command(cli.command).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("sandpool-operator: {}", error_chain(error.as_ref()));
            ExitCode::FAILURE
        }
    }
}

/// The subcommands that print what they make (stdout is their output, so no log there).
async fn command(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Run(args) => run(args).await,
        Command::Rbac => {
            println!("{}", sandpool_operator::rbac::rules_json()?);
            Ok(())
        }
        Command::Crd => {
            print!("{}", sandpool_operator::crd::crd_yaml()?);
            Ok(())
        }
        Command::Render(args) => {
            let input = if args.file.as_os_str() == "-" {
                let mut s = String::new();
                std::io::stdin()
                    .read_to_string(&mut s)
                    .context("reading standard input")?;
                s
            } else {
                std::fs::read_to_string(&args.file).with_context(|| format!("reading {}", args.file.display()))?
            };
            let out = sandpool_operator::render::render(&input, &args.config.into(), &args.namespace)?;
            print!("{out}");
            Ok(())
        }
    }
}

/// The Lease's namespace: the flag, else the watched namespace, else the kubeconfig context's.
fn lease_namespace(flag: Option<String>, watched: Option<&str>, kubeconfig: Option<String>) -> Option<String> {
    let some = |ns: &String| !ns.is_empty();
    flag.filter(some)
        .or_else(|| watched.map(str::to_owned).filter(some))
        .or_else(|| kubeconfig.filter(some))
}

/// This replica's name in the Lease: the flag (POD_NAME), else HOSTNAME (a pod's name),
/// else the host name with the pid (two replicas started on one laptop stay apart).
fn identity(flag: Option<String>, hostname_env: Option<String>, host: Option<String>, pid: u32) -> Option<String> {
    let some = |s: &String| !s.is_empty();
    flag.filter(some)
        .or_else(|| hostname_env.filter(some))
        .or_else(|| host.filter(some).map(|h| format!("{h}-{pid}")))
}

#[cfg(test)]
mod leader_args_tests {
    use super::*;

    #[test]
    fn logs_are_coloured_only_at_a_terminal_without_no_color() {
        assert!(log_colour(true, None));
        assert!(!log_colour(false, None), "a pod's log must be plain text");
        assert!(!log_colour(true, Some("1".into())));
        assert!(log_colour(true, Some("".into())), "an empty NO_COLOR is unset");
    }

    #[test]
    fn the_lease_namespace_falls_back_to_the_watched_one_then_the_kubeconfigs() {
        let s = |v: &str| Some(v.to_owned());
        assert_eq!(lease_namespace(s("lease"), Some("watched"), s("ctx")), s("lease"));
        assert_eq!(lease_namespace(None, Some("watched"), s("ctx")), s("watched"));
        assert_eq!(lease_namespace(s(""), None, s("ctx")), s("ctx"));
        assert_eq!(lease_namespace(None, None, None), None);
    }

    #[test]
    fn the_identity_falls_back_to_hostname_then_the_host_name_with_the_pid() {
        let s = |v: &str| Some(v.to_owned());
        assert_eq!(identity(s("pod-a"), s("h"), s("laptop"), 7), s("pod-a"));
        assert_eq!(identity(None, s("pod-b"), s("laptop"), 7), s("pod-b"));
        assert_eq!(identity(None, None, s("laptop"), 7), s("laptop-7"));
        assert_eq!(identity(None, s(""), None, 7), None);
    }
}

#[cfg(test)]
mod run_args_tests {
    use super::*;

    fn run_args(args: &[&str]) -> Result<RunArgs, clap::Error> {
        let argv = ["sandpool-operator", "run"].into_iter().chain(args.iter().copied());
        match Cli::try_parse_from(argv)?.command {
            Command::Run(args) => Ok(args),
            _ => unreachable!("parsed `run`"),
        }
    }

    #[test]
    fn concurrent_reconciles_are_capped_by_default_and_by_the_flag() {
        // The test environment may set the variable; the flag wins over it.
        if std::env::var_os("SANDPOOL_MAX_CONCURRENT_RECONCILES").is_none() {
            assert_eq!(run_args(&[]).map(|a| a.max_concurrent_reconciles).ok(), Some(16));
        }
        let four = run_args(&["--max-concurrent-reconciles", "4"]);
        assert_eq!(four.map(|a| a.max_concurrent_reconciles).ok(), Some(4));
    }

    #[test]
    fn an_unbounded_or_malformed_reconcile_cap_is_refused_naming_the_flag() {
        for bad in ["0", "-1", "many", "70000"] {
            let error = run_args(&[&format!("--max-concurrent-reconciles={bad}")])
                .err()
                .unwrap_or_else(|| panic!("{bad} was accepted"));
            assert!(
                error.to_string().contains("--max-concurrent-reconciles"),
                "{bad}: {error}"
            );
        }
    }
}
