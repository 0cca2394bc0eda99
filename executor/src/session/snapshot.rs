//! Snapshots and forks (docs/sessions.md, "Snapshots and forks"): a live session's /work
//! archived as a pause archives it ([`SessionManager::archive`]), then kept in the store as a
//! snapshot that new sessions start from, or extracted at once into n fresh seats (a fork).
//! Restoring goes through [`SessionManager::open`] as a resume does; only the id is new.

use super::caps::Creating;
use super::pause::{Record, Stored, record, record_mode, store_error};
use super::record::{Extras, Kind, Session};
use super::registry::random_hex;
use super::{SessionError, SessionManager};
use crate::admission::Ticket;
use crate::call::Call;
use crate::error::ExecError;
use futures::StreamExt;
use sandpool_proto::v1 as pb;
use sandpool_store::{BlobKey, PutOptions};
use std::sync::Arc;

/// What every snapshot id starts with (E2B's create tells a snapshot from a template by it).
pub const SNAPSHOT_PREFIX: &str = "snap-";

/// Hex digits after [`SNAPSHOT_PREFIX`] (128 random bits).
const SNAPSHOT_HEX: usize = 32;

/// Refuses an id [`SessionManager::snapshot`] never makes (`snap-` and 32 lowercase hex
/// digits), naming `field`: a made-up id with path characters, or of any length, never
/// reaches the store.
fn check_snapshot_id(field: &'static str, id: &str) -> Result<(), SessionError> {
    let ok = id
        .strip_prefix(SNAPSHOT_PREFIX)
        .is_some_and(|h| h.len() == SNAPSHOT_HEX && h.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')));
    if ok {
        return Ok(());
    }
    let shown: String = id.chars().take(80).collect();
    Err(ExecError::invalid(
        field,
        format!("{shown:?} is not a snapshot id ({SNAPSHOT_PREFIX} and {SNAPSHOT_HEX} hex digits, as SnapshotSession answers)"),
    )
    .into())
}

/// The most copies one fork starts.
pub const MAX_FORK: u32 = 64;

impl SessionManager {
    /// Saves `auth`'s live session as a snapshot; the session goes on (a Python session's
    /// interpreter restarts at its next call, since the archive is taken in its seat).
    pub async fn snapshot(
        &self,
        req: pb::SnapshotSessionRequest,
        auth: &[u8],
    ) -> Result<pb::SnapshotSessionResponse, SessionError> {
        let _in_progress = self.engine.admission().request();
        let s = self.find(&req.session_id, auth)?;
        let (store, ttl) = self.store().await?;
        let snapshot_id = format!("{SNAPSHOT_PREFIX}{}", random_hex()?);
        let key = BlobKey::snapshot(&s.tenant, &snapshot_id).map_err(store_error)?;
        let (archive, mut rec) = self.archive_live(&s).await?;
        rec.source = Some(rec.id.clone());
        rec.id = snapshot_id.clone();
        let record = serde_json::to_value(&rec).map_err(|e| ExecError::Internal(format!("record: {e}")))?;
        // Not the session's own (`session: None`): a snapshot outlives its session, until
        // DeleteSnapshot or its TTL.
        let opts = PutOptions {
            mode: rec.mode,
            ttl,
            session: None,
            record: Some(record),
        };
        let meta = store.put(&key, opts, archive.as_slice()).await.map_err(store_error)?;
        tracing::info!(session = %&s.id[..8], snapshot = %snapshot_id, bytes = meta.size, "session snapshotted");
        Ok(pb::SnapshotSessionResponse {
            snapshot_id,
            stored_bytes: meta.size,
        })
    }

    /// `call`'s snapshots whose TTL has not passed, by id, with when each was taken; only
    /// those taken of session `source` where it is given. None without a store.
    pub async fn list_snapshots(
        &self,
        call: &Call,
        source: Option<&str>,
    ) -> Result<Vec<(String, std::time::SystemTime)>, SessionError> {
        let mut out: Vec<_> = self
            .owned_in_store(call, sandpool_store::Kind::Snapshot)
            .await?
            .into_iter()
            .filter(|(_, _, rec)| source.is_none_or(|src| rec.source.as_deref() == Some(src)))
            .map(|(id, meta, _)| (id, meta.created()))
            .collect();
        out.sort();
        Ok(out)
    }

    /// Deletes `ticket`'s `auth`'s snapshot.
    pub async fn delete_snapshot(
        &self,
        req: pb::DeleteSnapshotRequest,
        call: Call,
    ) -> Result<pb::DeleteSnapshotResponse, SessionError> {
        let ticket = self.engine.ticket(&call, 0, "priority")?;
        let auth = call.caller.into_bytes();
        let (store, key, _) = self
            .owned_snapshot("snapshot_id", &req.snapshot_id, &ticket, &auth)
            .await?;
        store.delete(&key).await.map_err(store_error)?;
        Ok(pb::DeleteSnapshotResponse {})
    }

    /// The store, key and record of `id` if it is a snapshot `ticket`'s `auth` owns; else
    /// NOT_FOUND. An id no snapshot can have is INVALID_ARGUMENT naming `field`, before the
    /// store is asked anything.
    async fn owned_snapshot(
        &self,
        field: &'static str,
        id: &str,
        ticket: &Ticket,
        auth: &[u8],
    ) -> Result<(Arc<sandpool_store::Store>, BlobKey, Record), SessionError> {
        check_snapshot_id(field, id)?;
        let (store, _) = self.store().await?;
        // Another tenant's key is another key: its snapshot is not found.
        let key = BlobKey::snapshot(&ticket.tenant.name, id).map_err(|_| SessionError::NotFound)?;
        let meta = store.head(&key).await.map_err(store_error)?;
        let rec = Record::owned(&meta, id, ticket, auth)?;
        Ok((store.clone(), key, rec))
    }

    /// A new session from snapshot `req.from_snapshot` (see `CreateSessionRequest`).
    pub(super) async fn create_from_snapshot(
        &self,
        req: &pb::CreateSessionRequest,
        ticket: &Ticket,
        auth: Vec<u8>,
        extras: Extras,
    ) -> Result<Arc<Session>, SessionError> {
        let (store, key, rec) = self
            .owned_snapshot("from_snapshot", &req.from_snapshot, ticket, &auth)
            .await?;
        let kind = rec.kind()?;
        let (lang, _) = self.engine.language(&rec.language, "language")?;
        if !req.language.is_empty() && self.engine.language(&req.language, "language")?.0.name != lang.name {
            return Err(ExecError::invalid(
                "language",
                format!("the snapshot is a {} session's; leave language empty", rec.language),
            )
            .into());
        }
        let _creating: Creating<'_> = self.admit(ticket)?;
        // Fetched under the run slot its extraction takes, as a resume's archive is.
        let archive = Stored::Blob { store, key };
        self.open(
            kind,
            rec.language.clone(),
            rec.totals(),
            rec.call_limits(),
            Vec::new(),
            auth,
            ticket,
            extras,
            Some((None, archive)),
        )
        .await
    }

    /// Starts `req.n` copies of `call`'s live session: all of them or none.
    pub async fn fork(&self, req: pb::ForkSessionRequest, call: Call) -> Result<pb::ForkSessionResponse, SessionError> {
        let _in_progress = self.engine.admission().request();
        let auth = call.caller.into_bytes();
        if req.n == 0 || req.n > MAX_FORK {
            return Err(ExecError::invalid("n", format!("{} copies: ask for 1 to {MAX_FORK}", req.n)).into());
        }
        let s = self.find(&req.session_id, &auth)?;
        let ticket = s.ticket.clone();
        // Every copy counted against the caps before anything runs: one refused, none start.
        let mut admitted: Vec<Creating<'_>> = Vec::with_capacity(req.n as usize);
        for _ in 0..req.n {
            admitted.push(self.admit(&ticket).map_err(|e| match e {
                SessionError::Exhausted(m) => SessionError::Exhausted(format!("n = {}: {m}", req.n)),
                other => other,
            })?);
        }
        let (archive, _) = self.archive_live(&s).await?;
        let archive = Arc::new(archive);
        let extras = Extras {
            metadata: s.metadata.clone(),
            template: s.template.clone(),
            home: s.home,
            auto_resume: s.auto_resume,
            access_token: s.access_token.is_some(),
            ..Extras::default()
        };
        let opens = (0..req.n).map(|_| {
            self.open(
                s.kind,
                s.language.clone(),
                s.totals,
                s.call_limits,
                Vec::new(),
                auth.clone(),
                &ticket,
                extras.clone(),
                Some((None, Stored::Bytes(archive.clone()))),
            )
        });
        // All at once: each extraction waits for a run slot (`open`), so they spread over the
        // slots; each grows its seat's memory share only to what its files take, and gives
        // it back when tar ends (`pause::extract`).
        let results: Vec<_> = futures::stream::iter(opens).buffered(req.n as usize).collect().await;
        drop(admitted);
        let mut opened = Vec::new();
        let mut failed = None;
        for r in results {
            match r {
                Ok(c) => opened.push(c),
                Err(e) => failed = failed.or(Some(e)),
            }
        }
        if let Some(e) = failed {
            // All or nothing: the copies that started are ended.
            let all: Vec<(Arc<Session>, &'static str)> = opened.into_iter().map(|c| (c, "fork failed")).collect();
            self.end_all(&all).await;
            return Err(e);
        }
        tracing::info!(session = %&s.id[..8], copies = opened.len(), "session forked");
        Ok(pb::ForkSessionResponse {
            sessions: opened.iter().map(|c| self.created(c)).collect(),
        })
    }

    /// What a create answers of session `s`.
    pub(super) fn created(&self, s: &Session) -> pb::CreateSessionResponse {
        pb::CreateSessionResponse {
            session_id: s.id.clone(),
            executor_address: self.advertise.clone(),
            language: s.language.clone(),
            session_limits: Some(s.totals.to_proto()),
            call_limits: Some(crate::limits::to_proto(s.call_limits)),
            executor: Some(self.engine.info("")),
        }
    }

    /// The archive of live session `s`'s /work and its record, taken with its call state held.
    async fn archive_live(&self, s: &Arc<Session>) -> Result<(Vec<u8>, Record), SessionError> {
        let mut closed = s.closed.subscribe();
        let mut st = tokio::select! {
            st = s.state.lock() => st,
            _ = closed.wait_for(|c| *c) => return Err(self.not_live(&s.id, &s.owner)),
        };
        if *s.closed.borrow() {
            return Err(self.not_live(&s.id, &s.owner));
        }
        // A Python session's copies keep its interpreter's names too (full mode); the source
        // reloads its own save at its next call (the driver's STATE_OUT).
        let mode = match s.kind {
            Kind::Python => pb::PauseMode::Full,
            _ => pb::PauseMode::Filesystem,
        };
        let (archive, _saved) = self.archive(s, &mut st, mode).await?;
        let rec = record(s, &st, record_mode(mode), false);
        Ok((archive, rec))
    }
}
