//! HumanEval (164 Python problems) through Evaluate on an executor in
//! `restricted` mode, started as a Pod Security `restricted` pod would be
//! (non-root uid, no capabilities, `no_new_privs`, a runtime-default stand-in
//! seccomp filter): the judge must give the same answers as in namespaces mode
//! (`judge_humaneval`).

mod judge_common;

use judge_common::*;
use sandpool_tests::{Executor, Isolation, Options};

async fn judge_all(exe: &Executor, completion: impl Fn(&serde_json::Value) -> String) -> Vec<(String, bool, String)> {
    judge_humaneval(exe.client(), 4, completion).await
}

#[tokio::test(flavor = "multi_thread")]
async fn canonical_solutions_are_accepted_and_stubs_rejected_in_restricted_mode() {
    let exe = Executor::start(Options {
        slots: 2,
        languages: vec!["python"],
        isolation: Isolation::Restricted,
        ..Default::default()
    })
    .await;
    let results = judge_all(&exe, |p| format!("{}{}", s(p, "prompt"), s(p, "canonical_solution"))).await;
    let rejected: Vec<_> = results.iter().filter(|r| !r.1).collect();
    assert!(rejected.is_empty(), "rejected canonical solutions: {rejected:?}");
    assert_eq!(results.len(), 164);

    let results = judge_all(&exe, |p| format!("{}    return None\n", s(p, "prompt"))).await;
    let accepted: Vec<_> = results.iter().filter(|r| r.1).collect();
    assert!(accepted.is_empty(), "stubs accepted: {accepted:?}");
    assert!(results.iter().all(|r| !r.2.starts_with("SANDBOX_ERROR")), "{results:?}");
    assert_eq!(results.len(), 164);
}
