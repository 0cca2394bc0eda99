//! The session store against its two real backends: a local directory, and a real
//! S3-compatible server (SeaweedFS, started by `scripts/s3.sh up`; `eval "$(scripts/s3.sh env)"`
//! exports where it is). Without `SANDPOOL_TEST_S3_ENDPOINT` the S3 tests fail: a test that
//! skips is not a test. Set `SANDPOOL_S3_SKIP=1` to skip them on purpose.

use sandpool_store::crypt::CHUNK;
use sandpool_store::{Backend, BlobKey, Kind, Mode, PutOptions, S3Config, Store, StoreConfig, StoreError};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

const MIB: u64 = 1 << 20;

/// A directory for one test's local store and key files.
fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}

fn key_file(dir: &Path, name: &str, byte: u8) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, format!("{}\n", format!("{byte:02x}").repeat(32))).expect("key file");
    p
}

/// A prefix no other test or run uses, so tests share one bucket.
fn unique_prefix(test: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    let t = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    format!(
        "t{t}-{}-{}/{test}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

#[derive(Clone, Copy, Debug)]
enum Which {
    Local,
    S3,
}

/// The S3 server's settings, or None when skipped on purpose; panics when it is missing.
fn s3(dir: &Path) -> Option<S3Config> {
    if std::env::var("SANDPOOL_S3_SKIP").is_ok_and(|v| v == "1") {
        eprintln!("S3 tests skipped: SANDPOOL_S3_SKIP=1");
        return None;
    }
    let var = |n: &str| {
        std::env::var(n).unwrap_or_else(|_| {
            panic!(
                "{n} is not set: start the S3 server with `scripts/s3.sh up` and \
                 `eval \"$(scripts/s3.sh env)\"` (scripts/test.sh does), or set SANDPOOL_S3_SKIP=1"
            )
        })
    };
    // The Secret's mount: one file per credential.
    let creds = dir.join("creds");
    std::fs::create_dir_all(&creds).expect("creds dir");
    std::fs::write(creds.join("access_key_id"), var("SANDPOOL_TEST_S3_ACCESS_KEY")).expect("creds");
    std::fs::write(creds.join("secret_access_key"), var("SANDPOOL_TEST_S3_SECRET_KEY")).expect("creds");
    Some(S3Config {
        endpoint: Some(var("SANDPOOL_TEST_S3_ENDPOINT")),
        bucket: var("SANDPOOL_TEST_S3_BUCKET"),
        region: var("SANDPOOL_TEST_S3_REGION"),
        credentials_dir: Some(creds),
    })
}

/// A store config of backend `which` under a fresh prefix, or None when S3 is skipped.
fn config(which: Which, dir: &Path, test: &str) -> Option<StoreConfig> {
    let backend = match which {
        Which::Local => Backend::Dir(dir.join("store")),
        Which::S3 => Backend::S3(s3(dir)?),
    };
    Some(StoreConfig {
        backend,
        prefix: unique_prefix(test),
        // S3 is shared: sealed always. The local tests pick per test.
        key_file: matches!(which, Which::S3).then(|| key_file(dir, "key", 0x11)),
        max_blob_bytes: 64 * MIB,
        tenant_quota_bytes: 256 * MIB,
        timeout: Duration::from_secs(60),
    })
}

fn opts(ttl: Duration) -> PutOptions {
    PutOptions {
        mode: Mode::Filesystem,
        ttl,
        session: None,
        record: None,
    }
}

fn data(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

async fn get(store: &Store, key: &BlobKey) -> Result<Vec<u8>, StoreError> {
    let mut out = Vec::new();
    store.get_into(key, &mut out).await.map(|_| out)
}

const HOUR: Duration = Duration::from_secs(3600);

async fn round_trip(which: Which, sealed: bool) {
    let dir = tmp();
    let Some(mut cfg) = config(which, dir.path(), "round-trip") else {
        return;
    };
    if sealed {
        cfg.key_file = Some(key_file(dir.path(), "key", 0x22));
    }
    let store = Store::open(cfg).await.expect("open");
    assert_eq!(store.sealed(), sealed);
    // Empty, one byte, chunk boundaries, and past a multipart part (5 MiB).
    for (i, len) in [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 5, 12 * MIB as usize]
        .into_iter()
        .enumerate()
    {
        let body = data(len, i as u8);
        let key = BlobKey::new(
            "team-a",
            if i % 2 == 0 { Kind::Paused } else { Kind::Snapshot },
            &format!("s{i}"),
        )
        .expect("key");
        let meta = store
            .put(
                &key,
                PutOptions {
                    mode: Mode::Full,
                    ttl: HOUR,
                    session: Some("s0".into()),
                    record: None,
                },
                body.as_slice(),
            )
            .await
            .unwrap_or_else(|e| panic!("{which:?} put {len}: {e}"));
        assert_eq!(meta.size, len as u64);
        assert_eq!(meta.sealed, sealed);
        assert!(meta.stored >= meta.size, "{meta:?}");
        let got = get(&store, &key)
            .await
            .unwrap_or_else(|e| panic!("{which:?} get {len}: {e}"));
        assert!(
            got == body,
            "{which:?}: {len} bytes came back different ({} bytes)",
            got.len()
        );
        let head = store.head(&key).await.expect("head");
        assert_eq!(
            (head.mode, head.ttl_secs, head.session.as_deref()),
            (Mode::Full, 3600, Some("s0"))
        );
    }
    // Replacing a blob (a session paused again) keeps one copy: the 12 MiB one here.
    let key = BlobKey::paused("team-a", "s6").expect("key");
    let before = store.usage("team-a").await.expect("usage");
    store
        .put(&key, opts(HOUR), data(10, 9).as_slice())
        .await
        .expect("replace");
    assert!(store.usage("team-a").await.expect("usage") < before);
    assert_eq!(get(&store, &key).await.expect("get"), data(10, 9));
    assert!(store.delete(&key).await.expect("delete"));
    assert!(!store.delete(&key).await.expect("delete again"));
    assert!(matches!(get(&store, &key).await, Err(StoreError::NotFound(_))));
}

#[tokio::test]
async fn local_round_trip_plain_and_sealed() {
    round_trip(Which::Local, false).await;
    round_trip(Which::Local, true).await;
}

#[tokio::test]
async fn s3_round_trip_sealed() {
    round_trip(Which::S3, true).await;
}

async fn quota(which: Which) {
    let dir = tmp();
    let Some(mut cfg) = config(which, dir.path(), "quota") else {
        return;
    };
    cfg.tenant_quota_bytes = MIB;
    cfg.max_blob_bytes = 768 * 1024;
    let store = Store::open(cfg).await.expect("open");
    let a = BlobKey::paused("tenant-q", "a").expect("key");
    store
        .put(&a, opts(HOUR), data(600_000, 1).as_slice())
        .await
        .expect("first fits");
    let b = BlobKey::snapshot("tenant-q", "b").expect("key");
    let err = store
        .put(&b, opts(HOUR), data(600_000, 2).as_slice())
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, StoreError::QuotaExceeded { .. }), "{which:?}: {msg}");
    assert!(
        msg.contains("tenant-q") && msg.contains("quota of 1048576 bytes"),
        "{msg}"
    );
    assert!(
        matches!(store.head(&b).await, Err(StoreError::NotFound(_))),
        "a refused put leaves nothing"
    );
    assert!(store.usage("tenant-q").await.expect("usage") < 700_000);
    assert_eq!(store.in_flight("tenant-q"), 0);
    // Another tenant has its own quota; one blob has its own limit.
    let c = BlobKey::paused("tenant-r", "c").expect("key");
    store
        .put(&c, opts(HOUR), data(600_000, 3).as_slice())
        .await
        .expect("other tenant");
    let d = BlobKey::paused("tenant-s", "d").expect("key");
    let err = store
        .put(&d, opts(HOUR), data(800_000, 4).as_slice())
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::BlobTooLarge { limit: 786_432, .. }), "{err}");
    assert!(matches!(store.head(&d).await, Err(StoreError::NotFound(_))));
    // The first blob is intact.
    assert_eq!(get(&store, &a).await.expect("get"), data(600_000, 1));
}

#[tokio::test]
async fn local_quota_and_blob_limit_refuse_clearly() {
    quota(Which::Local).await;
}

#[tokio::test]
async fn s3_quota_and_blob_limit_refuse_clearly() {
    quota(Which::S3).await;
}

async fn sweep_and_sessions(which: Which) {
    let dir = tmp();
    let Some(cfg) = config(which, dir.path(), "sweep") else {
        return;
    };
    let store = Store::open(cfg).await.expect("open");
    let short = BlobKey::paused("t", "short").expect("key");
    let long = BlobKey::snapshot("t", "long").expect("key");
    store.put(&short, opts(Duration::ZERO), &b"x"[..]).await.expect("put");
    store.put(&long, opts(HOUR * 24), &b"y"[..]).await.expect("put");
    let now = SystemTime::now() + Duration::from_secs(5);
    let r = store.sweep(now).await.expect("sweep");
    assert_eq!((r.expired, r.orphans), (1, 0), "{which:?}: {r:?}");
    assert!(matches!(store.head(&short).await, Err(StoreError::NotFound(_))));
    assert!(store.head(&long).await.is_ok());
    let r = store.sweep(now + HOUR * 25).await.expect("sweep");
    assert_eq!(r.expired, 1, "{r:?}");
    assert_eq!(store.usage("t").await.expect("usage"), 0);

    // Deleted with their session: its paused blob and the snapshots it owns, no other.
    let owned = |s: &str| PutOptions {
        mode: Mode::Filesystem,
        ttl: HOUR,
        session: Some(s.to_owned()),
        record: None,
    };
    store
        .put(&BlobKey::paused("t", "s1").expect("key"), owned("s1"), &b"p"[..])
        .await
        .expect("put");
    store
        .put(&BlobKey::snapshot("t", "snap1").expect("key"), owned("s1"), &b"1"[..])
        .await
        .expect("put");
    store
        .put(&BlobKey::snapshot("t", "snap2").expect("key"), owned("s2"), &b"2"[..])
        .await
        .expect("put");
    assert_eq!(store.delete_session("t", "s1").await.expect("delete_session"), 2);
    assert!(
        store
            .head(&BlobKey::snapshot("t", "snap1").expect("key"))
            .await
            .is_err()
    );
    assert!(store.head(&BlobKey::snapshot("t", "snap2").expect("key")).await.is_ok());
}

#[tokio::test]
async fn local_ttl_sweep_and_delete_with_session() {
    sweep_and_sessions(Which::Local).await;
}

#[tokio::test]
async fn s3_ttl_sweep_and_delete_with_session() {
    sweep_and_sessions(Which::S3).await;
}

#[tokio::test]
async fn local_sweep_removes_orphaned_blobs_after_a_grace() {
    let dir = tmp();
    let Some(cfg) = config(Which::Local, dir.path(), "orphans") else {
        return;
    };
    let root = dir.path().join("store").join(&cfg.prefix);
    let store = Store::open(cfg).await.expect("open");
    let key = BlobKey::paused("t", "o").expect("key");
    store.put(&key, opts(HOUR * 24), &b"data"[..]).await.expect("put");
    // A put that died between its blob and its metadata.
    std::fs::remove_file(root.join("t/paused/o.meta")).expect("remove meta");
    assert_eq!(
        store.sweep(SystemTime::now()).await.expect("sweep").orphans,
        0,
        "within the grace"
    );
    let r = store.sweep(SystemTime::now() + HOUR * 2).await.expect("sweep");
    assert_eq!((r.orphans, r.bytes), (1, 4), "{r:?}");
    assert!(!root.join("t/paused/o.blob").exists());
}

async fn concurrent(which: Which) {
    let dir = tmp();
    let Some(mut cfg) = config(which, dir.path(), "concurrent") else {
        return;
    };
    let per = 256 * 1024;
    cfg.tenant_quota_bytes = 8 * (per as u64 + 4096);
    let store = Arc::new(Store::open(cfg).await.expect("open"));
    // 16 at once for a quota of about 8: some are refused, the rest come back whole, and the
    // tenant never holds more than its quota.
    let puts = (0..16).map(|i| {
        let store = Arc::clone(&store);
        tokio::spawn(async move {
            let key = BlobKey::snapshot("busy", &format!("c{i}")).expect("key");
            let r = store.put(&key, opts(HOUR), data(per, i as u8).as_slice()).await;
            (i, key, r)
        })
    });
    let mut stored = 0;
    for p in futures::future::join_all(puts).await {
        let (i, key, r) = p.expect("join");
        match r {
            Ok(_) => {
                stored += 1;
                assert_eq!(get(&store, &key).await.expect("get"), data(per, i as u8));
            }
            Err(StoreError::QuotaExceeded { .. }) => {}
            Err(e) => panic!("{which:?}: put {i}: {e}"),
        }
    }
    assert!((1..=8).contains(&stored), "{which:?}: {stored} of 16 stored");
    assert!(store.usage("busy").await.expect("usage") <= 8 * (per as u64 + 4096));
    assert_eq!(store.in_flight("busy"), 0);
}

#[tokio::test]
async fn local_concurrent_puts_share_the_quota() {
    concurrent(Which::Local).await;
}

#[tokio::test]
async fn s3_concurrent_puts_share_the_quota() {
    concurrent(Which::S3).await;
}

#[tokio::test]
async fn s3_sealed_blobs_need_their_key() {
    let dir = tmp();
    let Some(cfg) = config(Which::S3, dir.path(), "sealed") else {
        return;
    };
    let store = Store::open(cfg.clone()).await.expect("open");
    let key = BlobKey::paused("t", "secret").expect("key");
    store
        .put(&key, opts(HOUR), data(100_000, 5).as_slice())
        .await
        .expect("put");
    let other = Store::open(StoreConfig {
        key_file: Some(key_file(dir.path(), "other", 0x33)),
        ..cfg.clone()
    })
    .await
    .expect("open");
    let err = get(&other, &key).await.unwrap_err();
    assert!(matches!(err, StoreError::Sealed { .. }), "{err}");
    // A shared store without a key is refused outright.
    let err = Store::open(StoreConfig { key_file: None, ..cfg }).await.unwrap_err();
    assert!(err.to_string().contains("--session-store-key-file"), "{err}");
}

#[tokio::test]
async fn local_sealed_blobs_are_unreadable_without_the_key_and_tampering_is_detected() {
    let dir = tmp();
    let Some(mut cfg) = config(Which::Local, dir.path(), "tamper") else {
        return;
    };
    cfg.key_file = Some(key_file(dir.path(), "key", 0x44));
    let root = dir.path().join("store").join(&cfg.prefix);
    let store = Store::open(cfg.clone()).await.expect("open");
    let marker = b"PLAINTEXT-MARKER-".repeat(20_000);
    let a = BlobKey::paused("t", "a").expect("key");
    let b = BlobKey::paused("t", "b").expect("key");
    store.put(&a, opts(HOUR), marker.as_slice()).await.expect("put");
    store.put(&b, opts(HOUR), marker.as_slice()).await.expect("put");
    let blob = root.join("t/paused/a.blob");
    let raw = std::fs::read(&blob).expect("read blob");
    assert!(
        !raw.windows(17).any(|w| w == b"PLAINTEXT-MARKER-"),
        "the blob at rest holds the plaintext"
    );

    // Without the key, or with another, it does not open.
    let err = get(
        &Store::open(StoreConfig {
            key_file: None,
            ..cfg.clone()
        })
        .await
        .expect("open"),
        &a,
    )
    .await
    .unwrap_err();
    assert!(matches!(err, StoreError::Sealed { .. }), "{err}");
    let other = StoreConfig {
        key_file: Some(key_file(dir.path(), "other", 0x55)),
        ..cfg.clone()
    };
    let err = get(&Store::open(other).await.expect("open"), &a).await.unwrap_err();
    assert!(matches!(err, StoreError::Sealed { .. }), "{err}");

    let expect_sealed_error = |what: &str, r: Result<Vec<u8>, StoreError>| match r {
        Err(StoreError::Sealed { .. }) => {}
        other => panic!("{what}: {other:?}"),
    };
    // One bit flipped in the middle of a chunk.
    let mut bad = raw.clone();
    bad[raw.len() / 2] ^= 1;
    std::fs::write(&blob, &bad).expect("tamper");
    expect_sealed_error("a flipped bit", get(&store, &a).await);
    // Cut at a chunk boundary (the last chunk dropped).
    let cut = sandpool_store::crypt::HEADER + 2 * (CHUNK + 16);
    std::fs::write(&blob, &raw[..cut]).expect("truncate");
    expect_sealed_error("a blob cut short", get(&store, &a).await);
    // Another key's blob moved here (same key, same tenant).
    std::fs::copy(root.join("t/paused/b.blob"), &blob).expect("swap");
    expect_sealed_error("another key's blob", get(&store, &a).await);
    // The original, restored, opens.
    std::fs::write(&blob, &raw).expect("restore");
    assert!(get(&store, &a).await.expect("get") == marker);
}

#[tokio::test]
async fn local_keys_cannot_leave_the_store_directory() {
    let dir = tmp();
    let Some(cfg) = config(Which::Local, dir.path(), "traversal") else {
        return;
    };
    let store = Store::open(cfg.clone()).await.expect("open");
    for (tenant, id, field) in [
        ("t", "../../../escaped", "id"),
        ("t", "..", "id"),
        ("t", "a/../../b", "id"),
        ("..", "x", "tenant"),
        ("t/../..", "x", "tenant"),
        ("t", "/etc/passwd", "id"),
    ] {
        let err = BlobKey::new(tenant, Kind::Paused, id).unwrap_err();
        assert!(
            err.to_string().starts_with(&format!("invalid {field}:")),
            "{tenant:?} {id:?}: {err}"
        );
    }
    for bad in ["../up", "a/../../b", "a/./b"] {
        let err = Store::open(StoreConfig {
            prefix: bad.into(),
            ..cfg.clone()
        })
        .await
        .unwrap_err();
        assert!(err.to_string().contains("invalid prefix"), "{bad}: {err}");
    }
    for bad in ["..", "a/b", ""] {
        let key = BlobKey::paused("t", "k").expect("key");
        let r = store
            .put(
                &key,
                PutOptions {
                    session: Some(bad.into()),
                    record: None,
                    ..opts(HOUR)
                },
                &b"x"[..],
            )
            .await;
        assert!(
            matches!(r, Err(StoreError::InvalidKey { field: "session", .. })),
            "{bad:?}: {r:?}"
        );
    }
    assert!(matches!(
        store.usage("../x").await,
        Err(StoreError::InvalidKey { field: "tenant", .. })
    ));
    // Nothing was written anywhere: not in the store, not beside it.
    let beside: Vec<_> = std::fs::read_dir(dir.path())
        .expect("ls")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(beside, ["store"], "{beside:?}");
    assert!(!dir.path().join("escaped").exists());
}

/// Of many takers claiming one blob at once, exactly one wins; the claim goes with the blob,
/// is given back on release, and a stale one is taken over.
async fn claims(which: Which) {
    let dir = tmp();
    let Some(cfg) = config(which, dir.path(), "claims") else {
        return;
    };
    let store = Arc::new(Store::open(cfg).await.expect("open"));
    let key = BlobKey::paused("team-a", "s1").expect("key");
    store.put(&key, opts(HOUR), &data(1000, 1)[..]).await.expect("put");
    let takers = (0..8).map(|_| {
        let (store, key) = (store.clone(), key.clone());
        tokio::spawn(async move { store.claim(&key, HOUR).await })
    });
    let results = futures::future::join_all(takers).await;
    let won = results.iter().filter(|r| matches!(r, Ok(Ok(())))).count();
    let lost = results
        .iter()
        .filter(|r| matches!(r, Ok(Err(StoreError::Claimed(_)))))
        .count();
    assert_eq!((won, lost), (1, 7), "{results:?}");
    // Released: the next taker wins.
    store.release(&key).await.expect("release");
    store.claim(&key, HOUR).await.expect("claim after release");
    assert!(matches!(store.claim(&key, HOUR).await, Err(StoreError::Claimed(_))));
    // Stale (older than zero): taken over.
    store
        .claim(&key, Duration::ZERO)
        .await
        .expect("take over a stale claim");
    // Deleted with its blob: a new put of the key is claimable again.
    assert!(store.delete(&key).await.expect("delete"));
    store.put(&key, opts(HOUR), &data(10, 2)[..]).await.expect("put again");
    store.claim(&key, HOUR).await.expect("claim after delete");
}

#[tokio::test]
async fn local_claims_are_won_by_exactly_one_taker() {
    claims(Which::Local).await;
}

#[tokio::test]
async fn s3_claims_are_won_by_exactly_one_taker() {
    claims(Which::S3).await;
}

/// A claim whose blob is gone (its taker died after another executor's resume deleted the
/// blob, or a delete was cut short) is swept after the grace; one beside its blob is kept.
async fn lone_claims(which: Which) {
    let dir = tmp();
    let Some(cfg) = config(which, dir.path(), "lone-claims") else {
        return;
    };
    let store = Store::open(cfg).await.expect("open");
    let gone = BlobKey::paused("team-c", "gone").expect("key");
    store.put(&gone, opts(HOUR * 24), &b"a"[..]).await.expect("put");
    // Claimed by a taker that then died; the blob deleted by another, whose claim then
    // went missing with it, as when the taker claims just after a delete.
    assert!(store.delete(&gone).await.expect("delete"));
    store.claim(&gone, HOUR).await.expect("claim after the blob is gone");
    let kept = BlobKey::paused("team-c", "kept").expect("key");
    store.put(&kept, opts(HOUR * 24), &b"b"[..]).await.expect("put");
    store.claim(&kept, HOUR).await.expect("claim");

    let r = store.sweep(SystemTime::now()).await.expect("sweep");
    assert_eq!(r.claims, 0, "{which:?}: within the grace: {r:?}");
    let r = store.sweep(SystemTime::now() + HOUR * 2).await.expect("sweep");
    assert_eq!((r.claims, r.expired, r.orphans), (1, 0, 0), "{which:?}: {r:?}");
    // Gone: the key is claimable at once (a new pause of the session would have been held up
    // by it for CLAIM_STALE); the claim beside a blob still holds.
    store.claim(&gone, HOUR).await.expect("the lone claim was swept");
    assert!(matches!(store.claim(&kept, HOUR).await, Err(StoreError::Claimed(_))));
}

#[tokio::test]
async fn local_sweep_removes_claims_whose_blob_is_gone() {
    lone_claims(Which::Local).await;
}

#[tokio::test]
async fn s3_sweep_removes_claims_whose_blob_is_gone() {
    lone_claims(Which::S3).await;
}

/// A put's quota counts this store's own commits and deletes made since the tenant's blobs
/// were last listed (it lists them at most every few seconds, not per put).
#[tokio::test]
async fn local_quota_counts_commits_and_deletes_between_listings() {
    let dir = tmp();
    let Some(mut cfg) = config(Which::Local, dir.path(), "usage") else {
        return;
    };
    cfg.tenant_quota_bytes = MIB;
    let store = Store::open(cfg).await.expect("open");
    let key = |id: &str| BlobKey::paused("tenant-u", id).expect("key");
    store
        .put(&key("a"), opts(HOUR), data(600_000, 1).as_slice())
        .await
        .expect("a fits");
    assert!(store.delete(&key("a")).await.expect("delete"));
    store
        .put(&key("b"), opts(HOUR), data(600_000, 2).as_slice())
        .await
        .expect("b fits once a is gone");
    let err = store
        .put(&key("c"), opts(HOUR), data(600_000, 3).as_slice())
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::QuotaExceeded { .. }), "b counts: {err}");
    // b replaced by a smaller b: counted once, at its new size.
    store
        .put(&key("b"), opts(HOUR), data(300_000, 4).as_slice())
        .await
        .expect("b again");
    store
        .put(&key("c"), opts(HOUR), data(600_000, 3).as_slice())
        .await
        .expect("c fits beside the smaller b");
    assert_eq!(store.usage("tenant-u").await.expect("usage"), 900_000);
}

/// An S3 endpoint that takes connections and never answers (a hung store), on loopback:
/// its address, and the thread holding what it accepted.
fn hung_endpoint() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in l.incoming().flatten() {
            held.push(c);
        }
    });
    format!("http://{addr}")
}

/// A store whose backend hangs answers every call with `TimedOut` at its timeout, naming the
/// call, instead of holding its caller (a resume, a pause and its run slot) for as long as
/// the backend's own retries go on.
#[tokio::test]
async fn a_hung_backend_times_out_each_call_naming_it() {
    let dir = tmp();
    let creds = dir.path().join("creds");
    std::fs::create_dir_all(&creds).expect("creds dir");
    std::fs::write(creds.join("access_key_id"), "k").expect("creds");
    std::fs::write(creds.join("secret_access_key"), "s").expect("creds");
    let store = Store::open(StoreConfig {
        backend: Backend::S3(S3Config {
            endpoint: Some(hung_endpoint()),
            bucket: "b".into(),
            region: "r".into(),
            credentials_dir: Some(creds),
        }),
        prefix: String::new(),
        key_file: Some(key_file(dir.path(), "key", 0x11)),
        max_blob_bytes: 64 * MIB,
        tenant_quota_bytes: 256 * MIB,
        timeout: Duration::from_millis(500),
    })
    .await
    .expect("open");
    let key = BlobKey::paused("t", "s1").expect("key");
    let timed_out = |what: &str, e: StoreError, op: &str| {
        assert!(
            matches!(e, StoreError::TimedOut { op: o, .. } if o == op),
            "{what}: {e:?}"
        );
    };
    let t = std::time::Instant::now();
    timed_out("head", store.head(&key).await.unwrap_err(), "get");
    timed_out("get", get(&store, &key).await.unwrap_err(), "get");
    timed_out(
        "list",
        store.list("t", Kind::Paused, SystemTime::now()).await.unwrap_err(),
        "list",
    );
    timed_out(
        "claim",
        store.claim(&key, Duration::from_secs(60)).await.unwrap_err(),
        "claim",
    );
    let e = store
        .put(&key, opts(Duration::from_secs(60)), &data(1024, 1)[..])
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::TimedOut { .. }), "put: {e:?}");
    // Five calls, each cut off at its timeout (object_store alone would retry for minutes).
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
    assert!(e.to_string().contains("did not answer within 0.5 s"), "{e}");
}
