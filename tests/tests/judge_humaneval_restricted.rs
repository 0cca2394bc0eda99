//! HumanEval (164 Python problems) through Evaluate on an executor in
//! `restricted` mode, started as a Pod Security `restricted` pod would be
//! (non-root uid, no capabilities, `no_new_privs`, a runtime-default stand-in
//! seccomp filter): the judge must give the same answers as in namespaces mode
//! (`judge_humaneval`).

mod judge_common;

use futures::StreamExt;
use judge_common::*;
use sandpool_tests::{Executor, Isolation, Options};

fn problems() -> Vec<serde_json::Value> {
    let p = read_jsonl_gz(&humaneval_path());
    assert_eq!(p.len(), 164, "HumanEval has 164 problems");
    p
}

async fn judge_all(exe: &Executor, completion: impl Fn(&serde_json::Value) -> String) -> Vec<(String, bool, String)> {
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
                // Generous, as in judge_humaneval: a loaded 2-core machine.
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
            let mut c = exe.client();
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
        .buffer_unordered(4)
        .collect()
        .await
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
