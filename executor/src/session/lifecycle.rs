//! A session's life past its end and while paused, as E2B's lifecycle has it: paused instead
//! of ended when its end comes ([`super::Extras::pause_on_timeout`]), and its paused state
//! listed and described from the session store, scoped to its owner.

use super::pause::{Record, store_error};
use super::record::{Session, SessionInfo};
use super::{SessionError, SessionManager};
use crate::call::Call;
use sandpool_store::{BlobKey, Kind};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::SystemTime;

impl SessionManager {
    /// Whether the reaper pauses `s` at its end instead of ending it.
    pub(super) fn pauses_at_end(&self, s: &Session) -> bool {
        s.pause_on_timeout.is_some() && self.has_store()
    }

    /// Pauses the sessions past their end that asked for it, each in a task of its own; one
    /// whose pause fails is ended, as it would have been without the ask.
    pub(super) fn pause_ended(self: &Arc<Self>) {
        let due: Vec<Arc<Session>> = self
            .sessions
            .lock()
            .map(|m| {
                m.values()
                    .filter(|s| self.pauses_at_end(s) && s.life_left().is_zero())
                    .filter(|s| !s.pausing.swap(true, Ordering::Relaxed))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        for s in due {
            let m = self.clone();
            // A bash session has no interpreter state to keep: its files are all a full pause has.
            let mode = match (s.pause_on_timeout, s.kind) {
                (Some(sandpool_proto::v1::PauseMode::Full), super::record::Kind::Python) => {
                    sandpool_proto::v1::PauseMode::Full
                }
                _ => sandpool_proto::v1::PauseMode::Filesystem,
            };
            tokio::spawn(async move {
                match m.pause_live(&s, mode).await {
                    Ok(p) => tracing::info!(session = %&s.id[..8], bytes = p.stored_bytes, "session paused at its end"),
                    Err(e) => {
                        tracing::warn!(session = %&s.id[..8], error = %e, "pausing a session at its end failed; ending it");
                        m.end(&s, "timeout (its pause failed)").await;
                    }
                }
            });
        }
    }

    /// `call`'s paused sessions in the store whose metadata holds every pair of `metadata`
    /// (none without a store): another tenant's or owner's are never among them.
    pub async fn list_paused(
        &self,
        call: &Call,
        metadata: &BTreeMap<String, String>,
    ) -> Result<Vec<SessionInfo>, SessionError> {
        let mut out: Vec<SessionInfo> = self
            .owned_in_store(call, Kind::Paused)
            .await?
            .into_iter()
            .map(|(_, meta, rec)| rec.info(&meta))
            .filter(|i| metadata.iter().all(|(k, v)| i.metadata.get(k) == Some(v)))
            .collect();
        out.sort_by(|a, b| a.started_at.cmp(&b.started_at).then_with(|| a.id.cmp(&b.id)));
        Ok(out)
    }

    /// `call`'s blobs of `kind` in the store whose TTL has not passed, with their records
    /// (none without a store): another tenant's or owner's are never among them.
    pub(super) async fn owned_in_store(
        &self,
        call: &Call,
        kind: Kind,
    ) -> Result<Vec<(String, sandpool_store::Meta, Record)>, SessionError> {
        if !self.has_store() {
            return Ok(Vec::new());
        }
        let ticket = self.engine.ticket(call, 0, "priority")?;
        let auth = call.caller.as_bytes();
        let (store, _) = self.store().await?;
        let all = store
            .list(&ticket.tenant.name, kind, SystemTime::now())
            .await
            .map_err(store_error)?;
        Ok(all
            .into_iter()
            .filter_map(|(id, meta)| {
                let rec = Record::of(&meta)?;
                rec.owned_by(&id, &ticket, auth).then_some((id, meta, rec))
            })
            .collect())
    }

    /// `call`'s paused session `id` as the store keeps it; NOT_FOUND for any other.
    pub async fn paused_info(&self, id: &str, call: &Call) -> Result<SessionInfo, SessionError> {
        if !self.has_store() {
            return Err(SessionError::NotFound);
        }
        let ticket = self.engine.ticket(call, 0, "priority")?;
        let (store, _) = self.store().await?;
        let key = BlobKey::paused(&ticket.tenant.name, id).map_err(|_| SessionError::NotFound)?;
        let meta = store.head(&key).await.map_err(store_error)?;
        match Record::of(&meta) {
            Some(rec) if rec.owned_by(id, &ticket, call.caller.as_bytes()) => Ok(rec.info(&meta)),
            _ => Err(SessionError::NotFound),
        }
    }
}
