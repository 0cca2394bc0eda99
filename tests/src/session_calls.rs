//! gRPC session calls as a named caller, for the session tests (`executor_pause`,
//! `executor_snapshot`, `session_attacks`): each sends its request as `who`
//! ([`crate::as_caller`]) and answers the reply or the status.

use crate::as_caller as as_;
use sandpool_proto::v1 as pb;

/// An executor's gRPC client.
pub type Client = pb::executor_client::ExecutorClient<tonic::transport::Channel>;

/// A new `language` session of `who`; its id.
pub async fn create(c: &mut Client, who: &str, language: &str) -> String {
    let req = pb::CreateSessionRequest {
        language: language.into(),
        ..Default::default()
    };
    c.create_session(as_(who, req))
        .await
        .expect("create")
        .into_inner()
        .session_id
}

/// `cmd` run in session `id` as a shell command.
pub async fn try_command(
    c: &mut Client,
    who: &str,
    id: &str,
    cmd: &str,
) -> Result<pb::RunInSessionResponse, tonic::Status> {
    let req = pb::RunInSessionRequest {
        session_id: id.into(),
        input: Some(pb::run_in_session_request::Input::Command(cmd.into())),
        ..Default::default()
    };
    c.run_in_session(as_(who, req)).await.map(|r| r.into_inner())
}

/// The command's stdout, asserting it ran (the end of its stderr in the message if not).
pub async fn command(c: &mut Client, who: &str, id: &str, cmd: &str) -> String {
    let r = try_command(c, who, id, cmd).await.expect("run");
    let res = r.result.clone().unwrap_or_default();
    let err = String::from_utf8_lossy(&res.stderr);
    let tail: String = err.chars().skip(err.chars().count().saturating_sub(300)).collect();
    assert_eq!(
        r.verdict,
        pb::Verdict::Ok as i32,
        "{cmd:.200}: exit {}: {tail}",
        res.exit_code
    );
    String::from_utf8_lossy(&res.stdout).into_owned()
}

/// Pauses session `id` in `mode`.
pub async fn pause_in(
    c: &mut Client,
    who: &str,
    id: &str,
    mode: pb::PauseMode,
) -> Result<pb::PauseSessionResponse, tonic::Status> {
    let req = pb::PauseSessionRequest {
        session_id: id.into(),
        mode: mode as i32,
    };
    c.pause_session(as_(who, req)).await.map(|r| r.into_inner())
}

/// Pauses session `id`, its files only.
pub async fn pause(c: &mut Client, who: &str, id: &str) -> Result<pb::PauseSessionResponse, tonic::Status> {
    pause_in(c, who, id, pb::PauseMode::Filesystem).await
}

/// Resumes paused session `id`.
pub async fn resume(c: &mut Client, who: &str, id: &str) -> Result<pb::ResumeSessionResponse, tonic::Status> {
    let req = pb::ResumeSessionRequest { session_id: id.into() };
    c.resume_session(as_(who, req)).await.map(|r| r.into_inner())
}

/// Closes session `id`.
pub async fn close(c: &mut Client, who: &str, id: &str) -> Result<(), tonic::Status> {
    let req = pb::CloseSessionRequest { session_id: id.into() };
    c.close_session(as_(who, req)).await.map(drop)
}

/// Snapshots live session `id`.
pub async fn snapshot(c: &mut Client, who: &str, id: &str) -> Result<pb::SnapshotSessionResponse, tonic::Status> {
    let req = pb::SnapshotSessionRequest { session_id: id.into() };
    c.snapshot_session(as_(who, req)).await.map(|r| r.into_inner())
}

/// A new session from snapshot `snap`.
pub async fn from_snapshot(c: &mut Client, who: &str, snap: &str) -> Result<pb::CreateSessionResponse, tonic::Status> {
    let req = pb::CreateSessionRequest {
        from_snapshot: snap.into(),
        ..Default::default()
    };
    c.create_session(as_(who, req)).await.map(|r| r.into_inner())
}

/// `n` copies of live session `id`.
pub async fn fork(c: &mut Client, who: &str, id: &str, n: u32) -> Result<pb::ForkSessionResponse, tonic::Status> {
    let req = pb::ForkSessionRequest {
        session_id: id.into(),
        n,
    };
    c.fork_session(as_(who, req)).await.map(|r| r.into_inner())
}
