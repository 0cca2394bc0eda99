//! The gRPC service `sandpool.v1.Executor`: a thin layer over the [`Engine`](crate::engine::Engine).

use crate::admission::AdmissionError;
use crate::budget::Charge;
use crate::call::{Call, Caller};
use crate::error::ExecError;
use crate::judge::{Judge, stream::judge_stream};
use crate::session::{SessionError, SessionManager};
use crate::tenants::Tenant;
use futures::StreamExt;
use sandpool_proto::v1 as pb;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tonic::{Request, Response, Status};

/// Implements `sandpool.v1.Executor`.
#[derive(Debug, Clone)]
pub struct ExecutorService {
    judge: Judge,
    sessions: Arc<SessionManager>,
}

impl ExecutorService {
    /// Serves `judge`'s engine, sharing `judge` (and its admission gate) with other front
    /// ends, and `sessions` with the caller (which ends every session at shutdown).
    pub fn with_sessions(judge: Judge, sessions: Arc<SessionManager>) -> Self {
        ExecutorService { judge, sessions }
    }
}

impl ExecutorService {
    /// A session call's response, naming the executor that served it (a session a drain
    /// paused elsewhere may answer from here: the gateway and clients follow it).
    fn served<T>(&self, resp: T) -> Response<T> {
        let mut r = Response::new(resp);
        let (name, addr) = self.sessions.served_by();
        for (k, v) in [
            (crate::session::EXECUTOR_HEADER, name),
            (crate::session::EXECUTOR_ADDRESS_HEADER, addr),
        ] {
            if let Ok(v) = v.parse() {
                r.metadata_mut().insert(k, v);
            }
        }
        r
    }
}

/// Maps a session error to its gRPC status.
pub fn session_status(e: SessionError) -> Status {
    match e {
        SessionError::NotFound => Status::not_found(e.to_string()),
        SessionError::Exhausted(m) => Status::resource_exhausted(m),
        SessionError::Reset(_) | SessionError::Paused => Status::failed_precondition(e.to_string()),
        SessionError::Retry(m) => Status::unavailable(m),
        SessionError::Exec(e) => status(e),
    }
}

/// The call's context: its deadline, its tenant (put there by [`crate::auth::interceptor`];
/// anonymous without one), the caller that tenant makes it, and its byte-budget charge (put
/// there by [`crate::budget::grpc`]).
fn call<T>(req: &Request<T>) -> Call {
    let tenant = req
        .extensions()
        .get::<Arc<Tenant>>()
        .cloned()
        .unwrap_or_else(Tenant::anonymous);
    let authorization = req.metadata().get("authorization").map(|v| v.as_bytes());
    Call {
        deadline: deadline(req),
        caller: Caller::of(&tenant, authorization),
        charge: req.extensions().get::<Charge>().cloned(),
        tenant,
        priority: None,
    }
}

/// A rejected stream item's error, as carried in `EvaluateResponse.error`.
pub fn request_error(e: ExecError) -> pb::RequestError {
    let s = status(e);
    pb::RequestError {
        code: s.code() as i32,
        message: s.message().to_owned(),
    }
}

/// Maps an engine error to the gRPC status clients rely on.
pub fn status(e: ExecError) -> Status {
    match &e {
        ExecError::InvalidArgument { .. } => Status::invalid_argument(e.to_string()),
        ExecError::Unavailable(..) => Status::failed_precondition(e.to_string()),
        ExecError::Priority(_) => Status::permission_denied(e.to_string()),
        ExecError::Admission(AdmissionError::QueueFull { .. }) | ExecError::Budget(_) => {
            Status::resource_exhausted(e.to_string())
        }
        ExecError::Admission(AdmissionError::Deadline) | ExecError::DeadlineExceeded => {
            Status::deadline_exceeded(e.to_string())
        }
        ExecError::Admission(AdmissionError::Draining) => Status::unavailable(e.to_string()),
        ExecError::Internal(_) => Status::internal(e.to_string()),
    }
}

/// Parses the `grpc-timeout` header ("100m", "5S", ...) into a deadline.
pub fn deadline<T>(req: &Request<T>) -> Option<tokio::time::Instant> {
    let v = req.metadata().get("grpc-timeout")?.to_str().ok()?;
    let (num, unit) = v.split_at(v.len().checked_sub(1)?);
    let n: u64 = num.parse().ok()?;
    let d = match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    };
    // Answer a little before the deadline: tonic's own timeout layers (here and
    // in tonic clients) would otherwise race us and report CANCELLED.
    let margin = (d / 20).clamp(Duration::from_millis(20), Duration::from_millis(200));
    tokio::time::Instant::now().checked_add(d.saturating_sub(margin))
}

type EvalStream = Pin<Box<dyn futures::Stream<Item = Result<pb::EvaluateResponse, Status>> + Send>>;

#[tonic::async_trait]
impl pb::executor_server::Executor for ExecutorService {
    async fn execute(&self, req: Request<pb::ExecuteRequest>) -> Result<Response<pb::ExecuteResponse>, Status> {
        let call = call(&req);
        let req = req.into_inner();
        let span = tracing::info_span!("execute", language = %req.language, request_id = %req.request_id);
        let _e = span.enter();
        drop(_e);
        let resp = self.judge.engine().execute(req, call).await.map_err(status)?;
        Ok(Response::new(resp))
    }

    async fn get_capabilities(
        &self,
        req: Request<pb::GetCapabilitiesRequest>,
    ) -> Result<Response<pb::Capabilities>, Status> {
        let engine = self.judge.engine();
        let mut caps = engine.capabilities();
        let a = engine.admission();
        let tenant = call(&req).tenant;
        caps.tenant = Some(tenant.to_proto(a.slots(), a.queue_capacity(), self.sessions.max_sessions()));
        Ok(Response::new(caps))
    }

    async fn evaluate(&self, req: Request<pb::EvaluateRequest>) -> Result<Response<pb::EvaluateResponse>, Status> {
        let call = call(&req);
        let req = req.into_inner();
        tracing::debug!(id = %req.id, language = %req.language, "evaluate");
        let resp = self.judge.evaluate(req, call).await.map_err(status)?;
        Ok(Response::new(resp))
    }

    type EvaluateStreamStream = EvalStream;

    async fn evaluate_stream(
        &self,
        req: Request<tonic::Streaming<pb::EvaluateRequest>>,
    ) -> Result<Response<EvalStream>, Status> {
        let call = call(&req);
        // A broken inbound stream ends the input; requests already read are still answered.
        let input = req.into_inner().scan((), |_, item| {
            futures::future::ready(match item {
                Ok(r) => Some(r),
                Err(e) => {
                    // The client's side of the stream broke (it went away without ending it):
                    // its business, not the executor's, so not a warning.
                    tracing::debug!(error = %e, "EvaluateStream input ended by an error");
                    None
                }
            })
        });
        let rx = judge_stream(self.judge.clone(), Box::pin(input), call, request_error);
        let out = tokio_stream::wrappers::ReceiverStream::new(rx).map(Ok);
        Ok(Response::new(Box::pin(out)))
    }

    async fn create_session(
        &self,
        req: Request<pb::CreateSessionRequest>,
    ) -> Result<Response<pb::CreateSessionResponse>, Status> {
        let call = call(&req);
        let resp = self
            .sessions
            .create(req.into_inner(), call)
            .await
            .map_err(session_status)?;
        Ok(Response::new(resp))
    }

    async fn run_in_session(
        &self,
        req: Request<pb::RunInSessionRequest>,
    ) -> Result<Response<pb::RunInSessionResponse>, Status> {
        let c = call(&req);
        let req = req.into_inner();
        // Paused by a drain on another executor: resumed here first.
        self.sessions
            .resume_implicit(&req.session_id, &c)
            .await
            .map_err(session_status)?;
        let resp = self
            .sessions
            .run(req, c.caller.as_bytes())
            .await
            .map_err(session_status)?;
        Ok(self.served(resp))
    }

    async fn put_session_files(
        &self,
        req: Request<pb::PutSessionFilesRequest>,
    ) -> Result<Response<pb::PutSessionFilesResponse>, Status> {
        let c = call(&req);
        let req = req.into_inner();
        self.sessions
            .resume_implicit(&req.session_id, &c)
            .await
            .map_err(session_status)?;
        let resp = self
            .sessions
            .put_files(req, c.caller.as_bytes())
            .await
            .map_err(session_status)?;
        Ok(self.served(resp))
    }

    async fn get_session_files(
        &self,
        req: Request<pb::GetSessionFilesRequest>,
    ) -> Result<Response<pb::GetSessionFilesResponse>, Status> {
        let c = call(&req);
        let req = req.into_inner();
        self.sessions
            .resume_implicit(&req.session_id, &c)
            .await
            .map_err(session_status)?;
        let Call { caller, charge, .. } = c;
        let resp = self
            .sessions
            .get_files(req, caller.as_bytes(), charge)
            .await
            .map_err(session_status)?;
        Ok(self.served(resp))
    }

    async fn close_session(
        &self,
        req: Request<pb::CloseSessionRequest>,
    ) -> Result<Response<pb::CloseSessionResponse>, Status> {
        let c = call(&req);
        let resp = self
            .sessions
            .close_as(req.into_inner(), c)
            .await
            .map_err(session_status)?;
        Ok(Response::new(resp))
    }

    async fn pause_session(
        &self,
        req: Request<pb::PauseSessionRequest>,
    ) -> Result<Response<pb::PauseSessionResponse>, Status> {
        let who = call(&req).caller.into_bytes();
        let resp = self
            .sessions
            .pause(req.into_inner(), &who)
            .await
            .map_err(session_status)?;
        Ok(Response::new(resp))
    }

    async fn resume_session(
        &self,
        req: Request<pb::ResumeSessionRequest>,
    ) -> Result<Response<pb::ResumeSessionResponse>, Status> {
        let c = call(&req);
        let resp = self
            .sessions
            .resume(req.into_inner(), c)
            .await
            .map_err(session_status)?;
        Ok(self.served(resp))
    }

    async fn snapshot_session(
        &self,
        req: Request<pb::SnapshotSessionRequest>,
    ) -> Result<Response<pb::SnapshotSessionResponse>, Status> {
        let who = call(&req).caller.into_bytes();
        let resp = self
            .sessions
            .snapshot(req.into_inner(), &who)
            .await
            .map_err(session_status)?;
        Ok(Response::new(resp))
    }

    async fn delete_snapshot(
        &self,
        req: Request<pb::DeleteSnapshotRequest>,
    ) -> Result<Response<pb::DeleteSnapshotResponse>, Status> {
        let c = call(&req);
        let resp = self
            .sessions
            .delete_snapshot(req.into_inner(), c)
            .await
            .map_err(session_status)?;
        Ok(Response::new(resp))
    }

    async fn fork_session(
        &self,
        req: Request<pb::ForkSessionRequest>,
    ) -> Result<Response<pb::ForkSessionResponse>, Status> {
        let c = call(&req);
        let resp = self.sessions.fork(req.into_inner(), c).await.map_err(session_status)?;
        Ok(Response::new(resp))
    }
}
