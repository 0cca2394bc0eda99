//! The engine over the sandbox's scripted runner ([`sandpool_sandbox::testing`]),
//! for unit tests of the engine and the judge without root: a language table
//! the fake understands and the limits it runs under.

use crate::engine::{Engine, EngineConfig, Identity};
use crate::languages::LanguageTable;
use crate::limits::{LimitPolicy, Limits};
pub use sandpool_sandbox::testing::{Call, Calls, FakeRunner, Reply};
use std::sync::Arc;
use std::time::Duration;

/// Languages the fake understands: `fake` (interpreted), `fakewarm` (interpreted with a
/// warm-up program), `fakec` (compiled by `fake-cc` into `a.out`).
pub const TABLE: &str = r#"
[fake]
source = "main.fk"
run = ["fake-run", "main.fk"]
version = ["fake-version"]

[fakewarm]
source = "main.fk"
run = ["fake-run", "main.fk"]
version = ["fake-version"]
judge = { warm_up = "WARMUP" }

[fakec]
source = "main.fc"
compile = ["fake-cc", "main.fc"]
run = ["./a.out"]
version = ["fake-version"]
"#;

/// Limits the fake engine's policy uses everywhere.
pub fn limits() -> Limits {
    Limits {
        wall: Duration::from_secs(10),
        cpu: Duration::from_secs(10),
        memory: 1 << 30,
        output: 1 << 20,
        processes: 64,
        file_size: 1 << 20,
    }
}

/// An engine over `runner` with [`TABLE`]'s languages (probed through the fake).
pub async fn engine(runner: FakeRunner) -> Arc<Engine> {
    engine_with(runner, None).await
}

/// [`engine`] with a result cache.
pub async fn engine_with(runner: FakeRunner, cache: Option<crate::result_cache::CacheConfig>) -> Arc<Engine> {
    let table = LanguageTable::parse(TABLE).expect("fake language table");
    let cfg = EngineConfig {
        policy: LimitPolicy {
            run_defaults: limits(),
            compile_defaults: limits(),
            max: Limits {
                wall: Duration::from_secs(60),
                cpu: Duration::from_secs(60),
                ..limits()
            },
        },
        queue_capacity: 64,
        assert_prelude: true,
        fetch_file_bytes: 1 << 20,
        fetch_total_bytes: 1 << 20,
        inflight_bytes: 64 << 20,
        work_dir_bytes: 1 << 24,
        identity: Identity {
            name: "fake".into(),
            version: "0".into(),
        },
        capture: None,
        result_cache: cache,
        warm_starts: false,
    };
    Arc::new(Engine::new(Box::new(runner), table, cfg).await)
}
