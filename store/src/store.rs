//! The store: streaming put and get of opaque blobs with their metadata, bounded per blob and
//! per tenant, sealed where a key is set, deleted by key, by session and by TTL.
//!
//! Layout below the prefix: `TENANT/paused/ID.blob` and `TENANT/snapshots/ID.blob`, each with
//! `.meta` beside it. A put writes the blob, then its metadata; a delete removes the metadata,
//! then the blob: a blob without metadata is an unfinished put or delete, which the sweep
//! removes once it is older than [`ORPHAN_GRACE`].

use crate::config::StoreConfig;
use crate::crypt::{CHUNK, HEADER, Sealer, TAG};
use crate::error::StoreError;
use crate::key::{BlobKey, Kind, check_id, check_tenant};
use crate::meta::{Meta, PutOptions, unix};
use crate::quota::{InFlight, Usage};
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Bytes per multipart part (S3's smallest part but the last is 5 MiB).
const PART_BYTES: usize = 5 << 20;
/// Parts uploading at once: with the part being filled, a put holds at most
/// `(PARTS_IN_FLIGHT + 1) * PART_BYTES` in memory.
const PARTS_IN_FLIGHT: usize = 2;
/// Largest metadata object read (they are a few hundred bytes).
const MAX_META_BYTES: u64 = 64 * 1024;
/// A blob without metadata younger than this may be a put in progress: the sweep leaves it.
pub const ORPHAN_GRACE: Duration = Duration::from_secs(3600);
/// Backend calls the sweep and deletes make at once.
const CONCURRENCY: usize = 8;

const BLOB: &str = ".blob";
const META: &str = ".meta";
/// Beside a blob being taken ([`Store::claim`]).
const CLAIM: &str = ".claim";

/// What a sweep removed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SweepReport {
    /// Blobs whose TTL had passed.
    pub expired: usize,
    /// Blobs without metadata older than [`ORPHAN_GRACE`].
    pub orphans: usize,
    /// Claims ([`Store::claim`]) older than [`ORPHAN_GRACE`] whose blob is gone: a taker that
    /// died between its claim and giving it back, or a delete cut short.
    pub claims: usize,
    /// Stored bytes freed.
    pub bytes: u64,
}

/// The store for paused sessions and snapshots. Cheap to share (`Arc`).
#[derive(Debug)]
pub struct Store {
    backend: Arc<dyn ObjectStore>,
    sealer: Option<Sealer>,
    prefix: String,
    max_blob_bytes: u64,
    tenant_quota_bytes: u64,
    inflight: Arc<InFlight>,
    usage: Usage,
    /// How long one backend call may go unanswered ([`StoreConfig::timeout`]).
    timeout: Duration,
}

impl Store {
    /// Opens the store `cfg` names: reads its key and credential files (off the runtime) and
    /// creates a local directory; makes no network call.
    pub async fn open(cfg: StoreConfig) -> Result<Store, StoreError> {
        let (backend, sealer, cfg) = tokio::task::spawn_blocking(move || cfg.open().map(|(b, s)| (b, s, cfg)))
            .await
            .map_err(|e| StoreError::Config(format!("opening the store failed: {e}")))??;
        Ok(Store {
            backend,
            sealer,
            prefix: cfg.prefix.trim_matches('/').to_owned(),
            max_blob_bytes: cfg.max_blob_bytes,
            tenant_quota_bytes: cfg.tenant_quota_bytes,
            inflight: Arc::default(),
            usage: Usage::default(),
            timeout: cfg.timeout,
        })
    }

    /// `call`, one backend call of the store's `op`, or [`StoreError::TimedOut`] when it has
    /// not answered within the store's timeout: a hung backend (an S3 endpoint that stopped
    /// answering, a stuck network volume) costs its caller that long, not forever. A stream is
    /// timed per piece, so a large blob that keeps coming is never cut off.
    async fn within<F: std::future::Future>(&self, op: &'static str, call: F) -> Result<F::Output, StoreError> {
        tokio::time::timeout(self.timeout, call)
            .await
            .map_err(|_| StoreError::TimedOut {
                op,
                after: self.timeout,
            })
    }

    /// Whether blobs are sealed (a key is set).
    pub fn sealed(&self) -> bool {
        self.sealer.is_some()
    }

    fn path(&self, rel: &str, suffix: &str) -> Result<Path, StoreError> {
        let full = if self.prefix.is_empty() {
            format!("{rel}{suffix}")
        } else {
            format!("{}/{rel}{suffix}", self.prefix)
        };
        Path::parse(full).map_err(|e| StoreError::InvalidKey {
            field: "key",
            reason: e.to_string(),
        })
    }

    /// Stores `body` under `key`, streaming: it is read in chunks and sent in parts, never
    /// held whole. Refused past the per-blob limit or the tenant's quota (what the tenant
    /// stores, less a blob this one replaces, plus its puts in flight); a refused or failed put
    /// leaves nothing behind. One writer per key (the session that owns it).
    pub async fn put<R: AsyncRead + Unpin + Send>(
        &self,
        key: &BlobKey,
        opts: PutOptions,
        mut body: R,
    ) -> Result<Meta, StoreError> {
        if let Some(s) = &opts.session {
            check_id("session", s)?;
        }
        let blob = self.path(&key.rel(), BLOB)?;
        // An early bound, so a blob that cannot fit is refused as it streams; the check at
        // commit below is the one that holds.
        let used = self.committed(key.tenant(), Some(&key.rel())).await?;
        let room = self.tenant_quota_bytes.saturating_sub(used);
        let mut charge = self.inflight.charge(key.tenant());
        let over = |inflight: u64, n: u64| StoreError::QuotaExceeded {
            tenant: key.tenant().to_owned(),
            quota: self.tenant_quota_bytes,
            used: used + inflight - n,
        };

        let upload = self.within("put", self.backend.put_multipart(&blob)).await??;
        let mut upload = WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
        let streamed = async {
            let mut size = 0u64;
            let mut stored = 0u64;
            let mut sealing = None;
            if let Some(s) = &self.sealer {
                let (header, sl) = s.seal(&key.rel())?;
                charge
                    .add(header.len() as u64, room)
                    .map_err(|f| over(f, header.len() as u64))?;
                stored += header.len() as u64;
                upload.put(Bytes::from(header));
                sealing = Some(sl);
            }
            loop {
                let mut buf = vec![0u8; CHUNK];
                let n = fill(&mut body, &mut buf).await.map_err(|source| StoreError::Io {
                    key: key.to_string(),
                    source,
                })?;
                buf.truncate(n);
                size += n as u64;
                if size > self.max_blob_bytes {
                    return Err(StoreError::BlobTooLarge {
                        key: key.to_string(),
                        limit: self.max_blob_bytes,
                    });
                }
                if let Some(s) = sealing.as_mut() {
                    s.chunk(&mut buf)?;
                }
                let len = buf.len() as u64;
                charge.add(len, room).map_err(|f| over(f, len))?;
                stored += len;
                self.within("put", upload.wait_for_capacity(PARTS_IN_FLIGHT)).await??;
                upload.put(Bytes::from(buf));
                if n < CHUNK {
                    return Ok((size, stored));
                }
            }
        }
        .await;
        let (size, stored) = match streamed {
            Ok(sizes) => sizes,
            Err(e) => {
                if let Err(abort) = self.within("put", upload.abort()).await {
                    tracing::warn!(%key, error = %abort, "aborting a refused put failed");
                }
                return Err(e);
            }
        };
        self.within("put", upload.finish()).await??;
        // The last check, one commit of the tenant's at a time: what it has committed (this
        // blob's old self not counted), its other puts in flight, and this blob.
        let lock = self.inflight.commit_lock(key.tenant());
        let _commit = lock.lock().await;
        let committed = self.committed(key.tenant(), Some(&key.rel())).await?;
        let others = self.inflight.of(key.tenant()).saturating_sub(charge.bytes());
        if committed + others + stored > self.tenant_quota_bytes {
            // Its metadata, if it replaced a blob, still names the old one: both go.
            if let Err(e) = self.delete_rel(&key.rel()).await {
                tracing::warn!(%key, error = %e, "deleting a put over quota failed");
            }
            return Err(StoreError::QuotaExceeded {
                tenant: key.tenant().to_owned(),
                quota: self.tenant_quota_bytes,
                used: committed + others,
            });
        }
        let meta = Meta {
            size,
            stored,
            created_unix: unix(SystemTime::now()),
            ttl_secs: opts.ttl.as_secs(),
            mode: opts.mode,
            sealed: self.sealer.is_some(),
            session: opts.session,
            record: opts.record,
        };
        let json = serde_json::to_vec(&meta).map_err(|e| StoreError::Config(format!("metadata: {e}")))?;
        let meta_path = self.path(&key.rel(), META)?;
        self.within("put", self.backend.put(&meta_path, PutPayload::from(json)))
            .await??;
        self.usage.changed(key.tenant(), &key.rel(), Some(stored));
        drop(charge);
        Ok(meta)
    }

    /// The metadata of the blob under `key`.
    pub async fn head(&self, key: &BlobKey) -> Result<Meta, StoreError> {
        self.meta_at(&self.path(&key.rel(), META)?, key).await
    }

    async fn meta_at(&self, path: &Path, key: &impl ToString) -> Result<Meta, StoreError> {
        let got = self
            .within("get", self.backend.get(path))
            .await?
            .map_err(|e| not_found(e, key))?;
        if got.meta.size > MAX_META_BYTES {
            return Err(StoreError::Corrupt {
                key: key.to_string(),
                reason: format!("metadata of {} bytes", got.meta.size),
            });
        }
        let bytes = self.within("get", got.bytes()).await?.map_err(|e| not_found(e, key))?;
        serde_json::from_slice(&bytes).map_err(|e| StoreError::Corrupt {
            key: key.to_string(),
            reason: format!("metadata: {e}"),
        })
    }

    /// Writes the blob under `key` to `out` as it arrives (opening each chunk where sealed)
    /// and returns its metadata. On an error, what was written must be discarded: a blob
    /// altered after its first chunks fails only when those chunks are reached.
    pub async fn get_into<W: AsyncWrite + Unpin + Send>(&self, key: &BlobKey, out: &mut W) -> Result<Meta, StoreError> {
        let meta = self.head(key).await?;
        let aad = key.rel();
        match (&self.sealer, meta.sealed) {
            (Some(_), false) => {
                return Err(StoreError::sealed(
                    key,
                    "stored unsealed; this store opens only sealed blobs",
                ));
            }
            (None, true) => {
                return Err(StoreError::sealed(
                    key,
                    "sealed, and this store has no key (--session-store-key-file)",
                ));
            }
            _ => {}
        }
        let io = |source| StoreError::Io {
            key: key.to_string(),
            source,
        };
        let blob = self.path(&aad, BLOB)?;
        let mut stream = self
            .within("get", self.backend.get(&blob))
            .await?
            .map_err(|e| not_found(e, key))?
            .into_stream();
        let mut pending: Vec<u8> = Vec::new();
        let mut opening = None;
        let mut written = 0u64;
        while let Some(bytes) = self.within("get", stream.try_next()).await?? {
            let Some(sealer) = &self.sealer else {
                out.write_all(&bytes).await.map_err(io)?;
                written += bytes.len() as u64;
                continue;
            };
            pending.extend_from_slice(&bytes);
            if opening.is_none() {
                if pending.len() < HEADER {
                    continue;
                }
                opening = Some(sealer.open(&aad, &pending[..HEADER])?);
                pending.drain(..HEADER);
            }
            // A full chunk is never the last (the last is always shorter).
            while pending.len() >= CHUNK + TAG {
                let mut chunk: Vec<u8> = pending.drain(..CHUNK + TAG).collect();
                if let Some(o) = opening.as_mut() {
                    o.chunk(&mut chunk)?;
                }
                out.write_all(&chunk).await.map_err(io)?;
                written += chunk.len() as u64;
            }
        }
        if let Some(sealer) = &self.sealer {
            let mut o = match opening {
                Some(o) => o,
                None => sealer.open(&aad, &pending)?,
            };
            o.chunk(&mut pending)?;
            out.write_all(&pending).await.map_err(io)?;
            written += pending.len() as u64;
            if !o.finished() {
                return Err(StoreError::sealed(key, "cut short"));
            }
        }
        out.flush().await.map_err(io)?;
        if written != meta.size {
            return Err(StoreError::Corrupt {
                key: key.to_string(),
                reason: format!("{written} bytes read, {} stored", meta.size),
            });
        }
        Ok(meta)
    }

    /// Claims the blob under `key` for this taker alone: a create-if-absent of a `.claim`
    /// object beside it (an `O_EXCL` link on a directory, `If-None-Match: *` on S3), so of two
    /// executors resuming one paused session at once exactly one wins; the other gets
    /// [`StoreError::Claimed`]. The claim goes with the blob ([`Store::delete`]) or is given
    /// back ([`Store::release`]); one older than `stale` (a taker that died) is taken over.
    pub async fn claim(&self, key: &BlobKey, stale: Duration) -> Result<(), StoreError> {
        let path = self.path(&key.rel(), CLAIM)?;
        let create = || {
            let opts = object_store::PutOptions::from(object_store::PutMode::Create);
            self.backend.put_opts(&path, PutPayload::from_static(b"claimed"), opts)
        };
        match self.within("claim", create()).await? {
            Ok(_) => return Ok(()),
            Err(object_store::Error::AlreadyExists { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        let held = match self.within("claim", self.backend.head(&path)).await? {
            Ok(m) => m,
            // Given back in between: try once more.
            Err(object_store::Error::NotFound { .. }) => {
                return create().await.map(drop).map_err(|e| claimed(e, key));
            }
            Err(e) => return Err(e.into()),
        };
        let age = SystemTime::now()
            .duration_since(SystemTime::from(held.last_modified))
            .unwrap_or_default();
        if age < stale {
            return Err(StoreError::Claimed(key.to_string()));
        }
        tracing::warn!(%key, age_s = age.as_secs(), "taking over a stale claim");
        gone_ok(self.within("claim", self.backend.delete(&path)).await?)?;
        self.within("claim", create())
            .await?
            .map(drop)
            .map_err(|e| claimed(e, key))
    }

    /// Gives back a claim ([`Store::claim`]) whose taker did not take the blob.
    pub async fn release(&self, key: &BlobKey) -> Result<(), StoreError> {
        let claim = self.path(&key.rel(), CLAIM)?;
        gone_ok(self.within("release", self.backend.delete(&claim)).await?)
    }

    /// Deletes the blob under `key`; false if there was none.
    pub async fn delete(&self, key: &BlobKey) -> Result<bool, StoreError> {
        self.delete_rel(&key.rel()).await.map(|freed| freed.is_some())
    }

    /// Deletes metadata, then blob; the blob's stored bytes, or None if neither was there.
    async fn delete_rel(&self, rel: &str) -> Result<Option<u64>, StoreError> {
        let (meta, blob) = (self.path(rel, META)?, self.path(rel, BLOB)?);
        let had_meta = self.size_of(&meta).await?.is_some();
        let size = self.size_of(&blob).await?;
        // S3 answers a delete of a missing object with success: existence comes from the heads.
        gone_ok(self.within("delete", self.backend.delete(&meta)).await?)?;
        gone_ok(self.within("delete", self.backend.delete(&blob)).await?)?;
        self.usage.changed(rel.split('/').next().unwrap_or_default(), rel, None);
        let claim = self.path(rel, CLAIM)?;
        gone_ok(self.within("delete", self.backend.delete(&claim)).await?)?;
        Ok((had_meta || size.is_some()).then_some(size.unwrap_or(0)))
    }

    async fn size_of(&self, p: &Path) -> Result<Option<u64>, StoreError> {
        match self.within("head", self.backend.head(p)).await? {
            Ok(m) => Ok(Some(m.size)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Deletes a session's paused blob and the snapshots stored with `session` set to it;
    /// the number of blobs deleted.
    pub async fn delete_session(&self, tenant: &str, session: &str) -> Result<usize, StoreError> {
        let paused = BlobKey::paused(tenant, session)?;
        let mut deleted = usize::from(self.delete(&paused).await?);
        let dir = self.path(&format!("{tenant}/{}", Kind::Snapshot.dir()), "")?;
        let listing = self
            .backend
            .list(Some(&dir))
            .map_ok(|o| o.location)
            .try_filter(|p| futures::future::ready(p.as_ref().ends_with(META)))
            .try_collect();
        let metas: Vec<Path> = self.within("list", listing).await??;
        let owned = futures::stream::iter(metas)
            .map(|p| async move {
                let rel = rel_of(&self.prefix, &p, META);
                match self.meta_at(&p, &rel).await {
                    Ok(m) if m.session.as_deref() == Some(session) => Ok(Some(rel)),
                    Ok(_) | Err(StoreError::NotFound(_)) => Ok(None),
                    Err(e) => Err(e),
                }
            })
            .buffer_unordered(CONCURRENCY)
            .try_filter_map(|r| futures::future::ready(Ok(r)))
            .try_collect::<Vec<String>>()
            .await?;
        for rel in owned {
            deleted += usize::from(self.delete_rel(&rel).await?.is_some());
        }
        Ok(deleted)
    }

    /// `tenant`'s blobs of `kind` whose TTL has not passed at `now`: their ids and metadata.
    /// Lists the tenant's directory and reads each metadata object (a listing's cost, not a
    /// call's); a blob deleted meanwhile is left out.
    pub async fn list(&self, tenant: &str, kind: Kind, now: SystemTime) -> Result<Vec<(String, Meta)>, StoreError> {
        check_tenant(tenant)?;
        let dir = self.path(&format!("{tenant}/{}", kind.dir()), "")?;
        let listing = self
            .backend
            .list(Some(&dir))
            .map_ok(|o| o.location)
            .try_filter(|p| futures::future::ready(p.as_ref().ends_with(META)))
            .try_collect();
        let metas: Vec<Path> = self.within("list", listing).await??;
        futures::stream::iter(metas)
            .map(|p| async move {
                let rel = rel_of(&self.prefix, &p, META);
                let id = rel.rsplit('/').next().unwrap_or_default().to_owned();
                match self.meta_at(&p, &rel).await {
                    Ok(m) if !m.expired(now) && check_id("id", &id).is_ok() => Ok(Some((id, m))),
                    Ok(_) | Err(StoreError::NotFound(_)) => Ok(None),
                    Err(e) => Err(e),
                }
            })
            .buffer_unordered(CONCURRENCY)
            .try_filter_map(|r| futures::future::ready(Ok(r)))
            .try_collect()
            .await
    }

    /// Bytes `tenant`'s blobs hold in the store (not counting its puts in flight).
    pub async fn usage(&self, tenant: &str) -> Result<u64, StoreError> {
        check_tenant(tenant)?;
        self.committed(tenant, None).await
    }

    /// Bytes of `tenant`'s committed blobs (those with metadata), but the one at `except`.
    /// A blob being uploaded has no metadata yet: its put's charge counts it instead. Listed
    /// at most every [`crate::quota::USAGE_FRESH`], with this store's own puts and deletes
    /// counted as they happen in between.
    async fn committed(&self, tenant: &str, except: Option<&str>) -> Result<u64, StoreError> {
        if let Some(n) = self.usage.get(tenant, except) {
            return Ok(n);
        }
        let listing = self.usage.begin(tenant);
        let blobs = match self.list_committed(tenant).await {
            Ok(blobs) => blobs,
            Err(e) => {
                self.usage.end(tenant, listing, None);
                return Err(e);
            }
        };
        let exact = blobs
            .iter()
            .filter(|(rel, _)| except != Some(rel.as_str()))
            .map(|(_, n)| n)
            .sum();
        self.usage.end(tenant, listing, Some(blobs));
        Ok(self.usage.get(tenant, except).unwrap_or(exact))
    }

    /// `tenant`'s committed blobs and their stored bytes, listed.
    async fn list_committed(&self, tenant: &str) -> Result<std::collections::HashMap<String, u64>, StoreError> {
        let dir = self.path(tenant, "")?;
        let all: Vec<object_store::ObjectMeta> = self
            .within("list", self.backend.list(Some(&dir)).try_collect())
            .await??;
        let metas: std::collections::HashSet<String> = all
            .iter()
            .filter(|o| o.location.as_ref().ends_with(META))
            .map(|o| rel_of(&self.prefix, &o.location, META))
            .collect();
        Ok(all
            .iter()
            .filter(|o| o.location.as_ref().ends_with(BLOB))
            .map(|o| (rel_of(&self.prefix, &o.location, BLOB), o.size))
            .filter(|(rel, _)| metas.contains(rel))
            .collect())
    }

    /// Bytes `tenant` is storing right now.
    pub fn in_flight(&self, tenant: &str) -> u64 {
        self.inflight.of(tenant)
    }

    /// Deletes every blob whose TTL has passed at `now`, and blobs without metadata older
    /// than [`ORPHAN_GRACE`]. Lists the whole store and reads each metadata object: run it
    /// now and then (minutes), not per call.
    pub async fn sweep(&self, now: SystemTime) -> Result<SweepReport, StoreError> {
        let root = (!self.prefix.is_empty()).then(|| Path::from(self.prefix.as_str()));
        let all: Vec<object_store::ObjectMeta> = self
            .within("list", self.backend.list(root.as_ref()).try_collect())
            .await??;
        let metas: std::collections::HashSet<String> = all
            .iter()
            .filter(|o| o.location.as_ref().ends_with(META))
            .map(|o| rel_of(&self.prefix, &o.location, META))
            .collect();
        let mut report = SweepReport::default();
        let orphan_before = now.checked_sub(ORPHAN_GRACE).unwrap_or(SystemTime::UNIX_EPOCH);
        let mut doomed = Vec::new();
        let mut blobs = std::collections::HashSet::new();
        for o in all.iter().filter(|o| o.location.as_ref().ends_with(BLOB)) {
            let rel = rel_of(&self.prefix, &o.location, BLOB);
            if !metas.contains(&rel) && SystemTime::from(o.last_modified) < orphan_before {
                doomed.push((rel.clone(), false));
            }
            blobs.insert(rel);
        }
        // A claim whose blob is gone claims nothing: past the grace (a claim is made only
        // beside a blob, and given back or deleted with it within a resume), it goes.
        let lone_claims: Vec<Path> = all
            .iter()
            .filter(|o| o.location.as_ref().ends_with(CLAIM))
            .filter(|o| SystemTime::from(o.last_modified) < orphan_before)
            .filter(|o| !blobs.contains(&rel_of(&self.prefix, &o.location, CLAIM)))
            .map(|o| o.location.clone())
            .collect();
        report.claims = futures::stream::iter(lone_claims)
            .map(|p| async move { gone_ok(self.within("delete", self.backend.delete(&p)).await?) })
            .buffer_unordered(CONCURRENCY)
            .try_collect::<Vec<()>>()
            .await?
            .len();
        let expired = futures::stream::iter(metas)
            .map(|rel| async move {
                match self.meta_at(&self.path(&rel, META)?, &rel).await {
                    Ok(m) if m.expired(now) => Ok(Some(rel)),
                    Ok(_) | Err(StoreError::NotFound(_)) => Ok(None),
                    Err(StoreError::Corrupt { key, reason }) => {
                        tracing::warn!(%key, %reason, "sweep: unreadable metadata left in place");
                        Ok(None)
                    }
                    Err(e) => Err(e),
                }
            })
            .buffer_unordered(CONCURRENCY)
            .try_filter_map(|r| futures::future::ready(Ok(r)))
            .try_collect::<Vec<String>>()
            .await?;
        doomed.extend(expired.into_iter().map(|rel| (rel, true)));
        let freed = futures::stream::iter(doomed)
            .map(|(rel, expired)| async move { self.delete_rel(&rel).await.map(|f| (expired, f)) })
            .buffer_unordered(CONCURRENCY)
            .try_collect::<Vec<_>>()
            .await?;
        for (expired, bytes) in freed {
            if let Some(b) = bytes {
                if expired {
                    report.expired += 1;
                } else {
                    report.orphans += 1;
                }
                report.bytes += b;
            }
        }
        if report != SweepReport::default() {
            tracing::info!(
                expired = report.expired,
                orphans = report.orphans,
                claims = report.claims,
                bytes = report.bytes,
                "session store swept"
            );
        }
        Ok(report)
    }
}

/// Reads until `buf` is full or the input ends; the bytes read.
async fn fill<R: AsyncRead + Unpin>(r: &mut R, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match r.read(&mut buf[filled..]).await? {
            0 => break,
            n => filled += n,
        }
    }
    Ok(filled)
}

/// A path's part below the prefix, without `suffix`.
fn rel_of(prefix: &str, p: &Path, suffix: &str) -> String {
    let s = p.as_ref();
    let s = if prefix.is_empty() {
        s
    } else {
        s.strip_prefix(prefix).and_then(|s| s.strip_prefix('/')).unwrap_or(s)
    };
    s.strip_suffix(suffix).unwrap_or(s).to_owned()
}

/// A claim's create that lost: [`StoreError::Claimed`].
fn claimed(e: object_store::Error, key: &BlobKey) -> StoreError {
    match e {
        object_store::Error::AlreadyExists { .. } => StoreError::Claimed(key.to_string()),
        e => e.into(),
    }
}

fn not_found(e: object_store::Error, key: &impl ToString) -> StoreError {
    match e {
        object_store::Error::NotFound { .. } => StoreError::NotFound(key.to_string()),
        e => e.into(),
    }
}

/// A delete's result, a missing object being no error.
fn gone_ok(r: object_store::Result<()>) -> Result<(), StoreError> {
    match r {
        Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
        Err(e) => Err(e.into()),
    }
}
