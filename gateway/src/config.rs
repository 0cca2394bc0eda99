//! Gateway configuration: command-line flags with environment fallbacks.

use std::net::SocketAddr;
use std::time::Duration;

/// The gateway's flags.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "sandpool-gateway", about = "HTTP front door of a Sandpool pool", version)]
pub struct Args {
    /// Where clients connect (HTTP/1.1).
    #[arg(long, env = "SANDPOOL_GATEWAY_LISTEN", default_value = "0.0.0.0:8080")]
    pub listen: SocketAddr,
    /// Where `/metrics`, `/healthz` and `/readyz` are served.
    #[arg(long, env = "SANDPOOL_GATEWAY_METRICS_LISTEN", default_value = "0.0.0.0:9090")]
    pub metrics_listen: SocketAddr,
    /// A static backend, `NAME=HOST:PORT` (NAME: the executor's name, which its session
    /// ids carry); repeatable. Exclusive with --service.
    #[arg(long = "backend", env = "SANDPOOL_GATEWAY_BACKENDS", value_delimiter = ',')]
    pub backends: Vec<String>,
    /// The pool's Service whose EndpointSlices name the backends. Exclusive with --backend.
    #[arg(long, env = "SANDPOOL_GATEWAY_SERVICE")]
    pub service: Option<String>,
    /// The Service's namespace (default: $POD_NAMESPACE, then the client's own).
    #[arg(long, env = "SANDPOOL_GATEWAY_NAMESPACE")]
    pub namespace: Option<String>,
    /// The EndpointSlice port that serves the executors' HTTP API.
    #[arg(long, env = "SANDPOOL_GATEWAY_PORT_NAME", default_value = "http")]
    pub port_name: String,
    /// Other backends a stateless request may be sent to after one refused it unrun.
    #[arg(long, env = "SANDPOOL_GATEWAY_RETRIES", default_value_t = 2)]
    pub retries: usize,
    /// Request bodies up to this size are kept for a retry; larger ones are streamed
    /// through and never retried.
    #[arg(long, env = "SANDPOOL_GATEWAY_MAX_RETRY_BODY_BYTES", default_value_t = 1 << 20)]
    pub max_retry_body_bytes: usize,
    /// A backend must accept a connection within this, ms.
    #[arg(long, env = "SANDPOOL_GATEWAY_CONNECT_TIMEOUT_MS", default_value_t = 2000)]
    pub connect_timeout_ms: u64,
    /// A backend that failed to connect is skipped for this long, ms.
    #[arg(long, env = "SANDPOOL_GATEWAY_DOWN_MS", default_value_t = 2000)]
    pub down_ms: u64,
    /// A client's request headers must arrive within this (also an idle keep-alive
    /// connection's next request), ms.
    #[arg(long, env = "SANDPOOL_GATEWAY_HEADER_TIMEOUT_MS", default_value_t = 10_000)]
    pub header_timeout_ms: u64,
    /// A body kept for retry must arrive within this, ms (bodies streamed through are
    /// timed by the executor).
    #[arg(long, env = "SANDPOOL_GATEWAY_BODY_TIMEOUT_MS", default_value_t = 60_000)]
    pub body_timeout_ms: u64,
    /// Client connections served at once; more wait in the kernel's accept queue.
    #[arg(long, env = "SANDPOOL_GATEWAY_MAX_CONNECTIONS", default_value_t = 4096)]
    pub max_connections: usize,
    /// Client connections one client address may hold at once (a share of
    /// --max-connections); more are answered 503 and closed.
    #[arg(long, env = "SANDPOOL_GATEWAY_MAX_CONNECTIONS_PER_CLIENT", default_value_t = 1024)]
    pub max_connections_per_client: usize,
    /// A response write may wait this long for the client to read, ms; past it the
    /// connection is ended (a stream nobody reads holds its connection no longer).
    #[arg(long, env = "SANDPOOL_GATEWAY_WRITE_TIMEOUT_MS", default_value_t = 30_000)]
    pub write_timeout_ms: u64,
    /// Idle keep-alive connections to backends are closed after this, ms.
    #[arg(long, env = "SANDPOOL_GATEWAY_POOL_IDLE_TIMEOUT_MS", default_value_t = 60_000)]
    pub pool_idle_timeout_ms: u64,
    /// On SIGTERM, requests in flight may finish for this long, ms.
    #[arg(long, env = "SANDPOOL_GATEWAY_DRAIN_TIMEOUT_MS", default_value_t = 30_000)]
    pub drain_timeout_ms: u64,
    /// Log as JSON lines.
    #[arg(long, env = "SANDPOOL_GATEWAY_LOG_JSON")]
    pub log_json: bool,
}

/// Flags that do not make a gateway.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("give backends either with --backend or with --service, not both")]
    BothSources,
    #[error("no backends: give --backend NAME=HOST:PORT (repeatable) or --service")]
    NoSource,
    #[error("--backend {0:?}: expected NAME=HOST:PORT")]
    BadBackend(String),
}

/// Where the backends come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Fixed (name, `host:port`) pairs.
    Static(Vec<(String, String)>),
    /// The ready endpoints of a Service.
    Service {
        name: String,
        namespace: Option<String>,
        port_name: String,
    },
}

/// How the proxy behaves (the parts of [`Args`] it needs).
#[derive(Debug, Clone)]
pub struct ProxyOptions {
    pub retries: usize,
    pub max_retry_body_bytes: usize,
    pub connect_timeout: Duration,
    pub down_for: Duration,
    pub body_timeout: Duration,
    pub pool_idle_timeout: Duration,
}

impl Default for ProxyOptions {
    fn default() -> Self {
        ProxyOptions {
            retries: 2,
            max_retry_body_bytes: 1 << 20,
            connect_timeout: Duration::from_secs(2),
            down_for: Duration::from_secs(2),
            body_timeout: Duration::from_secs(60),
            pool_idle_timeout: Duration::from_secs(60),
        }
    }
}

/// Parses `NAME=HOST:PORT`.
pub fn parse_backend(s: &str) -> Result<(String, String), ConfigError> {
    let bad = || ConfigError::BadBackend(s.to_owned());
    let (name, addr) = s.trim().split_once('=').ok_or_else(bad)?;
    let (host, port) = addr.rsplit_once(':').ok_or_else(bad)?;
    if name.is_empty() || host.is_empty() || port.parse::<u16>().is_err() {
        return Err(bad());
    }
    Ok((name.to_owned(), addr.to_owned()))
}

impl Args {
    /// The backend source the flags name: exactly one of --backend and --service.
    pub fn source(&self) -> Result<Source, ConfigError> {
        let backends: Vec<&String> = self.backends.iter().filter(|b| !b.trim().is_empty()).collect();
        let service = self.service.as_ref().filter(|s| !s.is_empty());
        match (backends.is_empty(), service) {
            (false, Some(_)) => Err(ConfigError::BothSources),
            (true, None) => Err(ConfigError::NoSource),
            (false, None) => Ok(Source::Static(
                backends
                    .into_iter()
                    .map(|b| parse_backend(b))
                    .collect::<Result<_, _>>()?,
            )),
            (true, Some(name)) => Ok(Source::Service {
                name: name.clone(),
                namespace: self
                    .namespace
                    .clone()
                    .filter(|n| !n.is_empty())
                    .or_else(|| std::env::var("POD_NAMESPACE").ok().filter(|n| !n.is_empty())),
                port_name: self.port_name.clone(),
            }),
        }
    }

    pub fn proxy_options(&self) -> ProxyOptions {
        let ms = Duration::from_millis;
        ProxyOptions {
            retries: self.retries,
            max_retry_body_bytes: self.max_retry_body_bytes,
            connect_timeout: ms(self.connect_timeout_ms),
            down_for: ms(self.down_ms),
            body_timeout: ms(self.body_timeout_ms),
            pool_idle_timeout: ms(self.pool_idle_timeout_ms),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn backends_are_name_equals_address() {
        assert_eq!(
            parse_backend("exec-0=127.0.0.1:8000").ok(),
            Some(("exec-0".into(), "127.0.0.1:8000".into()))
        );
        assert_eq!(parse_backend("a=[::1]:80").ok(), Some(("a".into(), "[::1]:80".into())));
        for bad in ["127.0.0.1:8000", "=h:1", "a=h", "a=h:x", "a=:1"] {
            assert!(parse_backend(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn exactly_one_source() {
        let a = Args::parse_from(["g", "--backend", "a=h:1", "--backend", "b=h:2"]);
        assert_eq!(
            a.source().ok(),
            Some(Source::Static(vec![
                ("a".into(), "h:1".into()),
                ("b".into(), "h:2".into())
            ]))
        );
        let a = Args::parse_from(["g", "--backend", "a=h:1", "--service", "s"]);
        assert!(matches!(a.source(), Err(ConfigError::BothSources)));
        let a = Args::parse_from(["g"]);
        assert!(matches!(a.source(), Err(ConfigError::NoSource)));
        let a = Args::parse_from(["g", "--service", "pool", "--namespace", "ns"]);
        assert_eq!(
            a.source().ok(),
            Some(Source::Service {
                name: "pool".into(),
                namespace: Some("ns".into()),
                port_name: "http".into()
            })
        );
    }
}
