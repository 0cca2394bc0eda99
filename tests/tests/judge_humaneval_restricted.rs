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

/// HumanEval-X rows of `file` as `language` programs, canonical and stub, judged at the
/// executor's default limits (no limits in the requests): (id, accepted, verdict and detail).
async fn judge_humaneval_x(
    exe: &Executor,
    file: &str,
    language: &str,
    rows: usize,
    stub: &str,
) -> Vec<(String, bool, String)> {
    use futures::StreamExt;
    let problems = read_jsonl_gz(&datasets_dir().join("humaneval-x").join(file));
    let reqs: Vec<_> = problems
        .iter()
        .take(rows)
        .flat_map(|p| {
            let id = s(p, "task_id");
            [("canonical", s(p, "canonical_solution")), ("stub", stub)].map(|(kind, body)| {
                let code = sandpool_executor::judge::humaneval_x::program(p, language, body)
                    .unwrap_or_else(|k| panic!("{id}: {k} missing"));
                assert_request(&format!("{id}#{kind}"), language, &code, s(p, "test"), "")
            })
        })
        .collect();
    futures::stream::iter(reqs)
        .map(|r| {
            let mut c = exe.client();
            async move {
                let resp = c.evaluate(r).await.expect("Evaluate").into_inner();
                let stderr = resp
                    .tests
                    .first()
                    .and_then(|t| t.run.as_ref())
                    .map(|p| String::from_utf8_lossy(&p.stderr).chars().take(300).collect::<String>())
                    .unwrap_or_default();
                let text = format!("{} {} {stderr}", verdict(resp.verdict), resp.message);
                (resp.id, resp.accepted, text)
            }
        })
        .buffer_unordered(2)
        .collect()
        .await
}

/// Java at the default 512 MiB: `RLIMIT_DATA` counts every thread's stack whole and the heap
/// the JVM sizes from the node's RAM, so the namespaces-mode command (`-Xss64m`) could not
/// start its threads ("unable to create native thread"); the table's `restricted` command can.
#[tokio::test(flavor = "multi_thread")]
async fn humaneval_x_java_passes_at_the_default_limits_in_restricted_mode() {
    let exe = Executor::start(Options {
        slots: 2,
        languages: vec!["java"],
        isolation: Isolation::Restricted,
        ..Default::default()
    })
    .await;
    let stub = "        throw new UnsupportedOperationException();\n    }\n}\n";
    let results = judge_humaneval_x(&exe, "humaneval_java.jsonl.gz", "java", 12, stub).await;
    assert_eq!(results.len(), 24);
    for (id, accepted, detail) in &results {
        assert!(!detail.starts_with("SANDBOX_ERROR"), "{id}: {detail}");
        assert_eq!(*accepted, id.ends_with("#canonical"), "{id}: {detail}");
    }
}
