//! A put's cost as a tenant's store fills (issue 47 item 6: 10,000 paused sessions): puts
//! `--blobs N` small blobs into a local-directory store and prints the put latency (p50/p99)
//! of the first 200 and of the last 200, and their ratio (docs/sessions.md, "Measured").
//!
//!     cargo run --release -p sandpool-store --example put_at_scale -- 10000 /var/tmp/dir

use sandpool_store::{Backend, BlobKey, Mode, PutOptions, Store, StoreConfig, StoreError};
use std::time::{Duration, Instant};

#[tokio::main]
async fn main() -> Result<(), StoreError> {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let root = std::path::PathBuf::from(args.next().unwrap_or_else(|| "/var/tmp/put-at-scale".into()));
    let _ = std::fs::remove_dir_all(&root);
    let store = Store::open(StoreConfig {
        backend: Backend::Dir(root.clone()),
        prefix: String::new(),
        key_file: None,
        max_blob_bytes: 1 << 30,
        tenant_quota_bytes: 1 << 40,
        timeout: std::time::Duration::from_secs(60),
    })
    .await?;
    let body = vec![7u8; 4096];
    let mut times = Vec::with_capacity(n);
    for i in 0..n {
        let key = BlobKey::paused("bench", &format!("s{i}"))?;
        let opts = PutOptions {
            mode: Mode::Filesystem,
            ttl: Duration::from_secs(3600),
            session: Some(format!("s{i}")),
            record: None,
        };
        let t = Instant::now();
        store.put(&key, opts, body.as_slice()).await?;
        times.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let pct = |xs: &[f64], p: f64| {
        let mut v = xs.to_vec();
        v.sort_by(f64::total_cmp);
        v[((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1]
    };
    let k = 200.min(n);
    let (first, last) = (&times[..k], &times[n - k..]);
    println!(
        "put of a 4 KiB blob, local directory: first {k} p50/p99 {:.2}/{:.2} ms; last {k} (at {n} blobs) p50/p99 {:.2}/{:.2} ms; last/first p50 {:.1}x",
        pct(first, 0.5),
        pct(first, 0.99),
        pct(last, 0.5),
        pct(last, 0.99),
        pct(last, 0.5) / pct(first, 0.5)
    );
    let _ = std::fs::remove_dir_all(&root);
    Ok(())
}
