//! Wedges its own async runtime on purpose, for the watchdog's test
//! (`tests/tests/spawner_faults.rs`): with `stall` it blocks the runtime's only
//! thread, with `term` it ignores SIGTERM; either way the watchdog must end
//! the process (status 70) by itself.

use sandpool_executor::watchdog::Watchdog;
use std::time::Duration;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mode = std::env::args().nth(1).unwrap_or_default();
    let dog = Watchdog::new();
    let (health, _svc) = tonic_health::server::health_reporter();
    dog.spawn_liveness(health, "liveness", Default::default());
    let (stall, grace) = match mode.as_str() {
        "stall" => (Duration::from_secs(2), Duration::from_secs(3600)),
        _ => (Duration::ZERO, Duration::from_secs(2)),
    };
    if let Err(e) = dog.guard_process(stall, grace, |why| eprintln!("last words: {why}")) {
        eprintln!("watchdog: {e}");
        std::process::exit(1);
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    println!("ready");
    // What the spawner's read_exact once did: a blocking call on a runtime thread.
    std::thread::sleep(Duration::from_secs(60));
    println!("not ended by the watchdog");
}
