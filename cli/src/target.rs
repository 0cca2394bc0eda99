//! Where requests go: a remote executor, or one embedded in this process.

use sandpool_executor::config::ExecutorArgs;
use sandpool_executor::{Engine, service};
use sandpool_proto::v1 as pb;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

/// The bearer token sent with every call (`--token-file`, or `SANDPOOL_TOKEN`).
static TOKEN: OnceLock<Option<MetadataValue<Ascii>>> = OnceLock::new();

/// Reads the token the executors want: the file's content (trimmed), or `env_value`.
pub fn set_token(file: Option<&std::path::Path>, env_value: Option<String>) -> anyhow::Result<()> {
    let token = match file {
        Some(p) => Some(
            std::fs::read_to_string(p)
                .map_err(|e| anyhow::anyhow!("--token-file {}: {e}", p.display()))?
                .trim()
                .to_owned(),
        ),
        None => env_value.map(|t| t.trim().to_owned()),
    }
    .filter(|t| !t.is_empty());
    let value = match token {
        Some(t) => Some(
            format!("Bearer {t}")
                .parse()
                .map_err(|_| anyhow::anyhow!("the token has characters a header cannot carry"))?,
        ),
        None => None,
    };
    let _ = TOKEN.set(value);
    Ok(())
}

/// The priority every request asks for (`--priority`, `SANDPOOL_PRIORITY`; docs/tenants.md).
static PRIORITY: OnceLock<pb::Priority> = OnceLock::new();

/// Sets the priority requests carry; an unknown name is refused, naming the flag.
pub fn set_priority(name: Option<&str>) -> anyhow::Result<()> {
    let p = match name.map(str::trim).filter(|n| !n.is_empty()) {
        None => pb::Priority::Unspecified,
        Some(n) => sandpool_executor::tenants::Priority::parse(n)
            .ok_or_else(|| anyhow::anyhow!("--priority: {n:?} is not one of interactive, normal, batch"))?
            .to_proto(),
    };
    let _ = PRIORITY.set(p);
    Ok(())
}

/// The priority requests carry (unspecified: the tenant's default).
pub fn priority() -> i32 {
    PRIORITY.get().copied().unwrap_or(pb::Priority::Unspecified) as i32
}

/// Adds `authorization: Bearer <token>` to every call when a token is set.
#[derive(Debug, Clone, Copy)]
pub struct Bearer;

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(Some(v)) = TOKEN.get() {
            req.metadata_mut().insert("authorization", v.clone());
        }
        Ok(req)
    }
}

/// A gRPC client of the executors, sending the token.
pub type Client = pb::executor_client::ExecutorClient<InterceptedService<Channel, Bearer>>;

/// A client on `ch` that sends the token and takes responses of any size.
pub fn client(ch: Channel) -> Client {
    pb::executor_client::ExecutorClient::with_interceptor(ch, Bearer).max_decoding_message_size(usize::MAX)
}

/// A remote endpoint or an embedded engine.
pub enum Target {
    Remote(Client),
    Embedded(Arc<Engine>),
}

/// Adds `http://` to bare `host:port` endpoints.
pub fn endpoint_uri(e: &str) -> String {
    if e.contains("://") {
        e.to_owned()
    } else {
        format!("http://{e}")
    }
}

/// The executor URIs an `--endpoint` names, in gRPC's target syntax:
/// `dns:///host:port` (every address the name resolves to, e.g. a headless
/// Service's pods), `ipv4:a:port,b:port`, a comma-separated list, or one
/// `host:port` / `http://host:port`.
pub async fn endpoint_uris(spec: &str) -> anyhow::Result<Vec<String>> {
    let spec = spec.trim();
    if let Some(rest) = spec.strip_prefix("dns:") {
        // dns:///name:port or dns:name:port; an authority (dns://server/name) is not supported.
        let name = rest
            .strip_prefix("///")
            .or_else(|| (!rest.starts_with('/')).then_some(rest));
        let Some(name) = name.filter(|n| !n.is_empty()) else {
            anyhow::bail!("--endpoint {spec:?}: expected dns:///host:port");
        };
        let mut addrs: Vec<std::net::SocketAddr> = tokio::net::lookup_host(name)
            .await
            .map_err(|e| anyhow::anyhow!("--endpoint {spec:?}: resolving {name}: {e}"))?
            .collect();
        addrs.sort();
        addrs.dedup();
        return Ok(addrs.iter().map(|a| format!("http://{a}")).collect());
    }
    let list = spec
        .strip_prefix("ipv4:")
        .or_else(|| spec.strip_prefix("ipv6:"))
        .unwrap_or(spec);
    let uris: Vec<String> = list
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(endpoint_uri)
        .collect();
    if uris.is_empty() {
        anyhow::bail!("--endpoint: empty");
    }
    Ok(uris)
}

/// How long a single `--endpoint` may refuse connections before the command gives up.
const CONNECT_PATIENCE: Duration = Duration::from_secs(15);

/// Channels to the executors an `--endpoint` names.
pub struct Channels {
    /// For unary calls: the one executor, or a load balancer over all of them.
    pub balanced: Channel,
    /// One per executor, for long-lived streams: a balancer places each stream
    /// once, often all of them on whichever executor it connected to first.
    pub each: Vec<Channel>,
    /// The executors' URIs, in the order of `each`.
    pub uris: Vec<String>,
}

/// Connects to the executors `spec` names (see [`endpoint_uris`]).
pub async fn channels(spec: &str) -> anyhow::Result<Channels> {
    channels_for(&endpoint_uris(spec).await?).await
}

async fn channels_for(uris: &[String]) -> anyhow::Result<Channels> {
    if let [uri] = uris {
        // One executor: connect now, so a wrong address fails here, plainly; but not at the
        // first refusal: a pod that has just started is let through by the NetworkPolicy a
        // moment later, and a Service's pods may still be starting.
        let endpoint = Channel::from_shared(uri.clone())?;
        let started = std::time::Instant::now();
        let mut pause = Duration::from_millis(100);
        let ch = loop {
            match endpoint.connect().await {
                Ok(ch) => break ch,
                Err(e) if started.elapsed() + pause < CONNECT_PATIENCE => {
                    tracing::info!("connecting to {uri}: {e}; trying again in {pause:?}");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(2));
                }
                Err(e) => anyhow::bail!("connecting to {uri}: {e} (for {:.0?})", started.elapsed()),
            }
        };
        return Ok(Channels {
            balanced: ch.clone(),
            each: vec![ch],
            uris: uris.to_vec(),
        });
    }
    let endpoints = uris
        .iter()
        .map(|u| tonic::transport::Endpoint::from_shared(u.clone()).map_err(|e| anyhow::anyhow!("{u}: {e}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    tracing::info!(executors = uris.len(), "spreading over {}", uris.join(", "));
    Ok(Channels {
        each: endpoints.iter().map(|e| e.connect_lazy()).collect(),
        balanced: Channel::balance_list(endpoints.into_iter()),
        uris: uris.to_vec(),
    })
}

/// The executors streams go to. Built from a `dns:///` endpoint, it is resolved again when a
/// stream is reopened, so pods that replaced a deleted or updated one are found.
pub struct Executors {
    /// The endpoint to resolve again; None for a fixed list.
    spec: Option<String>,
    clients: Vec<(String, Client)>,
    resolved: std::time::Instant,
    wrap: fn(Channel) -> Client,
}

impl Executors {
    /// A list that never changes (e.g. an embedded executor).
    pub fn fixed(clients: Vec<Client>) -> Self {
        Self {
            spec: None,
            clients: clients.into_iter().map(|c| (String::new(), c)).collect(),
            resolved: std::time::Instant::now(),
            wrap: client,
        }
    }

    /// The executors `channels` (from [`channels`] on `spec`) reach; `wrap` makes a channel a client.
    pub fn new(spec: &str, channels: &Channels, wrap: fn(Channel) -> Client) -> Self {
        Self {
            spec: spec.trim().starts_with("dns:").then(|| spec.to_owned()),
            clients: channels
                .uris
                .iter()
                .cloned()
                .zip(channels.each.iter().cloned().map(wrap))
                .collect(),
            resolved: std::time::Instant::now(),
            wrap,
        }
    }

    /// The client for stream `k` (streams go round the executors).
    pub fn for_stream(&self, k: usize) -> Client {
        self.clients[k % self.clients.len()].1.clone()
    }

    pub fn is_empty(&self) -> bool {
        self.clients.is_empty()
    }

    /// How many executors there are now.
    pub fn len(&self) -> usize {
        self.clients.len()
    }

    /// The address stream `k` goes to.
    pub fn uri_for_stream(&self, k: usize) -> &str {
        &self.clients[k % self.clients.len()].0
    }

    /// Whether the list can change: a `dns:` endpoint.
    pub fn resolves(&self) -> bool {
        self.spec.is_some()
    }

    /// Resolves a `dns:` endpoint again (at most once a second), keeping the connections of
    /// addresses still there. A failed or empty lookup keeps the list it had. True when the
    /// list changed.
    pub async fn refresh(&mut self) -> bool {
        let Some(spec) = &self.spec else { return false };
        if self.resolved.elapsed() < std::time::Duration::from_secs(1) {
            return false;
        }
        self.resolved = std::time::Instant::now();
        let uris = match endpoint_uris(spec).await {
            Ok(u) if !u.is_empty() => u,
            Ok(_) => return false,
            Err(e) => {
                tracing::warn!("resolving {spec} again: {e:#}");
                return false;
            }
        };
        if uris.iter().eq(self.clients.iter().map(|(u, _)| u)) {
            return false;
        }
        let mut next = Vec::with_capacity(uris.len());
        for uri in uris {
            let kept = self.clients.iter().position(|(u, _)| *u == uri);
            let c = match kept {
                Some(i) => self.clients.swap_remove(i).1,
                None => match tonic::transport::Endpoint::from_shared(uri.clone()) {
                    Ok(e) => (self.wrap)(e.connect_lazy()),
                    Err(_) => continue,
                },
            };
            next.push((uri, c));
        }
        if next.is_empty() {
            return false;
        }
        let gone: Vec<&str> = self.clients.iter().map(|(u, _)| u.as_str()).collect();
        tracing::info!(?gone, executors = next.len(), "{spec} resolved again");
        self.clients = next;
        true
    }
}

impl Target {
    /// Connects to `endpoint`, or builds an embedded executor from `args`.
    pub async fn new(endpoint: Option<&str>, args: &ExecutorArgs) -> anyhow::Result<Self> {
        Ok(match endpoint {
            Some(e) => {
                let ch = channels(e).await?.balanced;
                Target::Remote(client(ch))
            }
            None => Target::Embedded(Arc::new(args.build_engine().await?)),
        })
    }

    /// Executes one request.
    pub async fn execute(&self, req: pb::ExecuteRequest) -> Result<pb::ExecuteResponse, tonic::Status> {
        match self {
            Target::Remote(c) => Ok(c.clone().execute(req).await?.into_inner()),
            Target::Embedded(e) => e.execute(req, None).await.map_err(service::status),
        }
    }

    /// The executor's capabilities.
    pub async fn capabilities(&self) -> Result<pb::Capabilities, tonic::Status> {
        match self {
            Target::Remote(c) => Ok(c
                .clone()
                .get_capabilities(pb::GetCapabilitiesRequest {})
                .await?
                .into_inner()),
            Target::Embedded(e) => Ok(e.capabilities()),
        }
    }
}

/// A verdict's proto name, or UNKNOWN for a value this CLI does not know.
pub fn verdict_name(v: i32) -> &'static str {
    pb::Verdict::try_from(v).map(|v| v.as_str_name()).unwrap_or("UNKNOWN")
}

#[cfg(test)]
mod tests {
    use super::endpoint_uris;

    #[tokio::test]
    async fn endpoints_in_grpc_target_syntax() {
        let one = endpoint_uris("127.0.0.1:50051").await.unwrap();
        assert_eq!(one, ["http://127.0.0.1:50051"]);
        let list = endpoint_uris("ipv4:127.0.0.1:1,127.0.0.2:2").await.unwrap();
        assert_eq!(list, ["http://127.0.0.1:1", "http://127.0.0.2:2"]);
        let plain = endpoint_uris("a:1, http://b:2").await.unwrap();
        assert_eq!(plain, ["http://a:1", "http://b:2"]);
        // dns:/// resolves to every address (an IP literal resolves to itself, with no lookup).
        let dns = endpoint_uris("dns:///127.0.0.3:7").await.unwrap();
        assert_eq!(dns, ["http://127.0.0.3:7"]);
        assert!(endpoint_uris("dns://8.8.8.8/pool:1").await.is_err());
        assert!(endpoint_uris(" , ").await.is_err());
    }
}
