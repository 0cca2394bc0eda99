//! The MCP server handler: lists the tools and runs them against the executor.
//!
//! Failures a caller can act on (bad arguments, an executor that refuses or is
//! busy, SANDBOX_ERROR) come back as tool results with `isError: true` and a
//! plain message, so a model reads them; only an unknown tool name is a
//! protocol error.

use super::backend::Backend;
use super::session_tools::*;
use super::tools::{RunCodeArgs, RunResult};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, JsonObject, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use sandpool_proto::v1 as pb;
use serde::de::DeserializeOwned;
use std::sync::Arc;
use tonic::Code;

/// What every connection's handler shares: the executor(s) and the tool list.
pub struct State {
    pub backend: Backend,
    pub tools: Vec<Tool>,
}

/// One handler per MCP connection (or per request, for stateless HTTP): cheap to clone.
#[derive(Clone)]
pub struct Handler(pub Arc<State>);

/// Why a tool call failed; rendered as the tool error's text.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error("{0}")]
    Arguments(String),
    #[error("{}", status_text(.0))]
    Executor(tonic::Status),
}

impl From<tonic::Status> for ToolError {
    fn from(s: tonic::Status) -> Self {
        ToolError::Executor(s)
    }
}

/// An executor status as a sentence a model can act on.
fn status_text(s: &tonic::Status) -> String {
    let msg = s.message();
    match s.code() {
        Code::InvalidArgument => format!("invalid argument: {msg}"),
        Code::NotFound => format!("not found: {msg}"),
        Code::Unimplemented => format!("the executor does not offer this (an older version?): {msg}"),
        Code::FailedPrecondition => format!("not available: {msg}"),
        Code::ResourceExhausted => format!("resource exhausted: {msg}"),
        Code::Unavailable => format!("the executor is unavailable: {msg}"),
        Code::DeadlineExceeded => format!("deadline exceeded: {msg}"),
        Code::Unauthenticated | Code::PermissionDenied => {
            format!("the executor refused this server's credentials (set SANDPOOL_TOKEN or --token-file): {msg}")
        }
        c => format!("executor error ({c:?}): {msg}"),
    }
}

/// Parses a tool's arguments; the error names the offending field by its path.
pub fn parse<T: DeserializeOwned>(args: JsonObject) -> Result<T, ToolError> {
    serde_path_to_error::deserialize(serde_json::Value::Object(args)).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        ToolError::Arguments(if path == "." {
            format!("invalid arguments: {inner}")
        } else {
            format!("invalid argument `{path}`: {inner}")
        })
    })
}

/// A structured result; a run that ended in SANDBOX_ERROR (the executor failed,
/// not the program) is a tool error.
fn structured(value: &impl serde::Serialize, verdict: Option<i32>) -> CallToolResult {
    let value = serde_json::to_value(value).unwrap_or_default();
    if verdict == Some(pb::Verdict::SandboxError as i32) {
        CallToolResult::structured_error(value)
    } else {
        CallToolResult::structured(value)
    }
}

impl Handler {
    fn backend(&self) -> &Backend {
        &self.0.backend
    }

    async fn run_code(&self, args: JsonObject) -> Result<CallToolResult, ToolError> {
        let req = parse::<RunCodeArgs>(args)?
            .into_request()
            .map_err(ToolError::Arguments)?;
        let resp = self.backend().execute(req).await?;
        Ok(structured(&RunResult::from_response(&resp), Some(resp.verdict)))
    }

    async fn create_session(&self, args: JsonObject) -> Result<CallToolResult, ToolError> {
        let req = parse::<CreateSessionArgs>(args)?
            .into_request()
            .map_err(ToolError::Arguments)?;
        let resp = self.backend().create_session(req).await?;
        Ok(structured(&SessionCreated::from_response(resp), None))
    }

    async fn run_in_session(&self, args: JsonObject) -> Result<CallToolResult, ToolError> {
        let req = parse::<RunInSessionArgs>(args)?
            .into_request()
            .map_err(ToolError::Arguments)?;
        let resp = self.backend().run_in_session(req).await?;
        Ok(structured(&SessionRunResult::from_response(&resp), Some(resp.verdict)))
    }

    async fn write_file(&self, args: JsonObject) -> Result<CallToolResult, ToolError> {
        let (req, path) = parse::<WriteFileArgs>(args)?
            .into_request()
            .map_err(ToolError::Arguments)?;
        // The request carries the one file as `files[0]`; the executor's errors name fields
        // of the request, and this tool's caller knows them as `path` and `content`.
        let resp = self.backend().put_session_files(req).await.map_err(|s| {
            match (s.code(), s.message().strip_prefix("files[0].")) {
                (Code::InvalidArgument, Some(rest)) => tonic::Status::invalid_argument(rest.to_owned()),
                _ => s,
            }
        })?;
        let written = FileWritten {
            path,
            disk_used_bytes: resp.disk_used_bytes,
        };
        Ok(structured(&written, None))
    }

    async fn read_file(&self, args: JsonObject) -> Result<CallToolResult, ToolError> {
        let args = parse::<ReadFileArgs>(args)?;
        let req = pb::GetSessionFilesRequest {
            session_id: args.session_id,
            paths: vec![args.path.clone()],
        };
        let resp = self.backend().get_session_files(req).await?;
        match resp.files.into_iter().next() {
            Some(f) => Ok(structured(&FileRead::new(f), None)),
            None => {
                let why = resp
                    .errors
                    .into_iter()
                    .next()
                    .map(|e| e.message)
                    .unwrap_or_else(|| "not returned".into());
                Err(ToolError::Arguments(format!("`path` {:?}: {why}", args.path)))
            }
        }
    }

    async fn close_session(&self, args: JsonObject) -> Result<CallToolResult, ToolError> {
        let args = parse::<CloseSessionArgs>(args)?;
        let req = pb::CloseSessionRequest {
            session_id: args.session_id.clone(),
        };
        let resp = self.backend().close_session(req).await?;
        let closed = SessionClosed {
            session_id: args.session_id,
            calls: resp.calls,
        };
        Ok(structured(&closed, None))
    }
}

impl ServerHandler for Handler {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("sandpool", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Runs untrusted code in Sandpool's sandboxes. run_code runs a program once, from nothing; \
                 sessions keep files (and a Python session its variables) between calls.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.0.tools.clone()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.0.tools.iter().find(|t| t.name == name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        let call = async {
            match request.name.as_ref() {
                "run_code" => Some(self.run_code(args).await),
                "create_session" => Some(self.create_session(args).await),
                "run_in_session" => Some(self.run_in_session(args).await),
                "write_file" => Some(self.write_file(args).await),
                "read_file" => Some(self.read_file(args).await),
                "close_session" => Some(self.close_session(args).await),
                _ => None,
            }
        };
        // rmcp only flags a cancelled request; dropping the call is what stops the run
        // (the gRPC call is cancelled, and the executor kills what it started).
        let result = tokio::select! {
            r = call => r.ok_or_else(|| ErrorData::invalid_params(format!("unknown tool `{}`", request.name), None))?,
            () = context.ct.cancelled() => Err(ToolError::Arguments("cancelled by the client".into())),
        };
        Ok(result
            .unwrap_or_else(|e| CallToolResult::error(vec![ContentBlock::text(e.to_string())]))
            .into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(v: serde_json::Value) -> JsonObject {
        match v {
            serde_json::Value::Object(o) => o,
            _ => unreachable!(),
        }
    }

    #[test]
    fn argument_errors_name_the_field() {
        let e = parse::<RunCodeArgs>(obj(serde_json::json!({"language": "python"}))).unwrap_err();
        assert!(e.to_string().contains("missing field `code`"), "{e}");
        let e = parse::<RunCodeArgs>(obj(
            serde_json::json!({"language": "python", "code": "", "limits": {"wall_time_ms": "x"}}),
        ))
        .unwrap_err();
        assert!(e.to_string().contains("`limits.wall_time_ms`"), "{e}");
        let e =
            parse::<RunCodeArgs>(obj(serde_json::json!({"language": "python", "code": "", "lang": 1}))).unwrap_err();
        assert!(e.to_string().contains("unknown field `lang`"), "{e}");
    }
}
