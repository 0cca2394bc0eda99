//! Where requests go: a remote executor, or one embedded in this process.

use sandpool_executor::config::ExecutorArgs;
use sandpool_executor::proto as pb;
use sandpool_executor::{Engine, service};
use std::sync::Arc;
use tonic::transport::Channel;

/// A remote endpoint or an embedded engine.
pub enum Target {
    Remote(pb::executor_client::ExecutorClient<Channel>),
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

impl Target {
    /// Connects to `endpoint`, or builds an embedded executor from `args`.
    pub async fn new(endpoint: Option<&str>, args: &ExecutorArgs) -> anyhow::Result<Self> {
        Ok(match endpoint {
            Some(e) => {
                let ch = Channel::from_shared(endpoint_uri(e))?.connect().await?;
                Target::Remote(pb::executor_client::ExecutorClient::new(ch).max_decoding_message_size(usize::MAX))
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
