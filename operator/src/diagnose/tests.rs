use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use k8s_openapi::api::core::v1::Event;

use super::*;

fn time(s: &str) -> Time {
    Time(s.parse::<Timestamp>().expect("test timestamp parses"))
}

const NOW: &str = "2026-01-01T00:10:00Z";

/// An executor pod named `name` with `status`, limited to 4Gi.
fn pod(name: &str, status: Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "evals", "labels": {"sandpool.dev/pool": "python"}},
        "spec": {"containers": [{"name": "executor", "image": "ghcr.io/sandpool/executor:1",
                                 "resources": {"limits": {"memory": "4Gi"}}}]},
        "status": status,
    }))
    .expect("test pod deserializes")
}

/// A Running pod whose executor container has `fields` (state, lastState, ready, ...).
fn with_container(name: &str, fields: Value) -> Pod {
    let mut container = json!({"name": "executor", "image": "ghcr.io/sandpool/executor:1",
                               "imageID": "", "ready": false, "restartCount": 0});
    for (k, v) in fields.as_object().expect("object") {
        container[k] = v.clone();
    }
    pod(name, json!({"phase": "Running", "containerStatuses": [container]}))
}

fn deployment(conditions: Value) -> Deployment {
    serde_json::from_value(json!({"metadata": {"name": "python"}, "status": {"conditions": conditions}}))
        .expect("test deployment deserializes")
}

fn no_conditions() -> Deployment {
    deployment(json!([]))
}

fn crash_loop(name: &str, restarts: i32, last: Value) -> Pod {
    with_container(
        name,
        json!({
            "restartCount": restarts,
            "state": {"waiting": {"reason": "CrashLoopBackOff",
                                  "message": "back-off 40s restarting failed container=executor"}},
            "lastState": {"terminated": last},
        }),
    )
}

fn diagnosed(deployment: &Deployment, pods: &[Pod]) -> Option<(String, String)> {
    diagnosed_with(deployment, pods, &[])
}

fn diagnosed_with(deployment: &Deployment, pods: &[Pod], events: &[Event]) -> Option<(String, String)> {
    let observed = Observed {
        pods: pods.to_vec(),
        probe_events: events.to_vec(),
    };
    diagnose(deployment, &observed, &time(NOW)).map(|p| (p.reason, p.message))
}

/// The kubelet's `Unhealthy` Event about `pod`, first and last seen at those times.
fn probe_event(pod: &str, message: &str, first: &str, last: &str, count: i32) -> Event {
    serde_json::from_value(json!({
        "metadata": {"name": format!("{pod}.1"), "namespace": "evals"},
        "involvedObject": {"kind": "Pod", "name": pod, "namespace": "evals"},
        "reason": "Unhealthy", "type": "Warning", "message": message,
        "firstTimestamp": first, "lastTimestamp": last, "count": count,
    }))
    .expect("test event deserializes")
}

fn pod_security_refusal() -> Deployment {
    deployment(json!([{
        "type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
        "message": "pods \"python-7d9-x\" is forbidden: violates PodSecurity \"baseline:latest\": non-default capabilities (container \"executor\" must not include \"SYS_ADMIN\" in securityContext.capabilities.add)"
    }]))
}

fn deadline() -> Deployment {
    deployment(json!([{
        "type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
        "message": "ReplicaSet \"python-7d9\" has timed out progressing."
    }]))
}

/// (what, the Deployment, its pods, the reason expected, words its message must contain)
type Case = (&'static str, Deployment, Vec<Pod>, &'static str, Vec<&'static str>);

#[test]
fn each_failure_shape_has_its_reason_and_quotes_its_cause() {
    let cases: Vec<Case> = vec![
        (
            "crash loop with the executor's fatal error as termination message",
            no_conditions(),
            vec![crash_loop(
                "python-a",
                5,
                json!({"exitCode": 1, "reason": "Error",
                       "message": "isolation mode namespaces is not available: unshare(CLONE_NEWNS): Operation not permitted (EPERM)"}),
            )],
            "CrashLoopBackOff",
            vec![
                "pod python-a: container executor keeps exiting",
                "restarted 5 times",
                "exited with code 1",
                ": isolation mode namespaces is not available: unshare(CLONE_NEWNS): Operation not permitted (EPERM)",
            ],
        ),
        (
            "crash loop whose message is a coloured log tail (FallbackToLogsOnError)",
            no_conditions(),
            vec![crash_loop(
                "python-a",
                3,
                json!({"exitCode": 1, "reason": "Error",
                       "message": "\u{1b}[2m2026-01-01T00:00:00Z\u{1b}[0m \u{1b}[32m INFO\u{1b}[0m starting\n\u{1b}[2m2026-01-01T00:00:01Z\u{1b}[0m \u{1b}[31mERROR\u{1b}[0m \u{1b}[2msandpool_executor\u{1b}[0m: work root /var/lib/sandpool is busy\n\n"}),
            )],
            "CrashLoopBackOff",
            vec!["ERROR sandpool_executor: work root /var/lib/sandpool is busy"],
        ),
        (
            "OOM kill in the last state of a crash-looping container",
            no_conditions(),
            vec![crash_loop(
                "python-a",
                2,
                json!({"exitCode": 137, "reason": "OOMKilled"}),
            )],
            "OOMKilled",
            vec![
                "pod python-a: container executor was killed for using more than its memory limit of 4Gi",
                "restarted 2 times",
            ],
        ),
        (
            "OOM kill just now, before the back-off",
            no_conditions(),
            vec![with_container(
                "python-a",
                json!({"restartCount": 1, "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}),
            )],
            "OOMKilled",
            vec!["restarted once"],
        ),
        (
            "image missing with pull policy Never",
            no_conditions(),
            vec![with_container(
                "python-a",
                json!({"state": {"waiting": {"reason": "ErrImageNeverPull",
                       "message": "Container image \"ghcr.io/sandpool/executor:1\" is not present with pull policy of Never"}}}),
            )],
            "ErrImageNeverPull",
            vec![
                "cannot get its image \"ghcr.io/sandpool/executor:1\" (ErrImageNeverPull)",
                "is not present with pull policy of Never",
            ],
        ),
        (
            "image pull back-off",
            no_conditions(),
            vec![with_container(
                "python-a",
                json!({"state": {"waiting": {"reason": "ImagePullBackOff",
                       "message": "Back-off pulling image \"ghcr.io/sandpool/executor:1\""}}}),
            )],
            "ImagePullBackOff",
            vec!["Back-off pulling image"],
        ),
        (
            "image pull error",
            no_conditions(),
            vec![with_container(
                "python-a",
                json!({"state": {"waiting": {"reason": "ErrImagePull", "message": "manifest unknown"}}}),
            )],
            "ErrImagePull",
            vec!["manifest unknown"],
        ),
        (
            "invalid image name",
            no_conditions(),
            vec![with_container(
                "python-a",
                json!({"state": {"waiting": {"reason": "InvalidImageName",
                       "message": "Failed to apply default image tag \"Bad:Name\": invalid reference format"}}}),
            )],
            "InvalidImageName",
            vec!["invalid reference format"],
        ),
        (
            "no node has the GPU",
            no_conditions(),
            vec![pod(
                "python-a",
                json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                       "reason": "Unschedulable",
                       "message": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."}]}),
            )],
            "Unschedulable",
            vec!["pod python-a cannot be scheduled: 0/2 nodes are available: 2 Insufficient nvidia.com/gpu."],
        ),
        (
            "a taint nobody tolerates",
            no_conditions(),
            vec![pod(
                "python-a",
                json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                       "reason": "Unschedulable",
                       "message": "0/1 nodes are available: 1 node(s) had untolerated taint {gpu: true}."}]}),
            )],
            "Unschedulable",
            vec!["untolerated taint {gpu: true}"],
        ),
        (
            "liveness probe restarts: the executor drains and exits 0",
            no_conditions(),
            vec![with_container(
                "python-a",
                json!({"restartCount": 1, "started": false,
                       "state": {"running": {"startedAt": "2026-01-01T00:09:55Z"}},
                       "lastState": {"terminated": {"exitCode": 0, "reason": "Completed"}}}),
            )],
            "CrashLoopBackOff",
            vec!["exited with code 0 (stopped by the kubelet: a failing liveness or startup probe?)"],
        ),
        (
            "killed by a signal",
            no_conditions(),
            vec![with_container(
                "python-a",
                json!({"restartCount": 0, "state": {"terminated": {"exitCode": 139, "reason": "Error"}}}),
            )],
            "ContainerExited",
            vec!["was killed by signal 11 (SIGSEGV), exit code 139"],
        ),
        (
            "a container that cannot be set up",
            no_conditions(),
            vec![with_container(
                "python-a",
                json!({"state": {"waiting": {"reason": "CreateContainerConfigError",
                       "message": "secret \"python-auth\" not found"}}}),
            )],
            "CreateContainerConfigError",
            vec!["cannot start (CreateContainerConfigError): secret \"python-auth\" not found"],
        ),
        (
            "an evicted pod",
            no_conditions(),
            vec![pod(
                "python-a",
                json!({"phase": "Failed", "reason": "Evicted",
                       "message": "The node was low on resource: ephemeral-storage."}),
            )],
            "Evicted",
            vec!["pod python-a was evicted: The node was low on resource: ephemeral-storage."],
        ),
        (
            "Pod Security refuses the ReplicaSet's pods",
            pod_security_refusal(),
            vec![],
            "ReplicaFailure",
            vec![
                "the ReplicaSet cannot create executor pods (FailedCreate)",
                "violates PodSecurity \"baseline:latest\"",
            ],
        ),
        (
            "the rollout's deadline passed",
            deadline(),
            vec![],
            "ProgressDeadlineExceeded",
            vec![
                "the rollout made no progress within its deadline: ReplicaSet \"python-7d9\" has timed out progressing.",
            ],
        ),
    ];
    for (what, deployment, pods, reason, words) in cases {
        let (got_reason, message) = diagnosed(&deployment, &pods).unwrap_or_else(|| panic!("{what}: no problem found"));
        assert_eq!(got_reason, reason, "{what}: {message}");
        for w in words {
            assert!(message.contains(w), "{what}: {message:?} lacks {w:?}");
        }
        assert!(
            !message.contains('\u{1b}') && !message.contains('\n'),
            "{what}: {message:?}"
        );
    }
}

const NOT_SERVING: &str = "Readiness probe failed: service unhealthy (responded with \"NOT_SERVING\")";

/// A container that started and runs, but is not ready.
fn started_unready(name: &str) -> Pod {
    with_container(
        name,
        json!({"started": true, "state": {"running": {"startedAt": "2026-01-01T00:05:00Z"}}}),
    )
}

#[test]
fn a_failing_probe_is_quoted_from_the_kubelets_events() {
    let pods = [started_unready("python-a")];
    // A minute of NOT_SERVING: the probe's answer is the message.
    let failing = probe_event(
        "python-a",
        NOT_SERVING,
        "2026-01-01T00:09:00Z",
        "2026-01-01T00:09:58Z",
        12,
    );
    assert_eq!(
        diagnosed_with(&no_conditions(), &pods, &[failing]),
        Some((
            "Unhealthy".to_owned(),
            format!("pod python-a: container executor runs but is not ready: {NOT_SERVING}")
        ))
    );
    // Not a problem: a moment of NOT_SERVING after start-up, an old Event, another pod's,
    // no Event at all, or a container whose startup probe has not passed yet.
    let brief = probe_event(
        "python-a",
        NOT_SERVING,
        "2026-01-01T00:09:50Z",
        "2026-01-01T00:09:55Z",
        2,
    );
    let stale = probe_event(
        "python-a",
        NOT_SERVING,
        "2026-01-01T00:01:00Z",
        "2026-01-01T00:05:00Z",
        50,
    );
    let other = probe_event(
        "python-b",
        NOT_SERVING,
        "2026-01-01T00:09:00Z",
        "2026-01-01T00:09:58Z",
        12,
    );
    for (what, events) in [
        ("brief", vec![brief]),
        ("stale", vec![stale]),
        ("another pod's", vec![other]),
        ("none", vec![]),
    ] {
        assert_eq!(diagnosed_with(&no_conditions(), &pods, &events), None, "{what}");
    }
    let starting = [with_container(
        "python-a",
        json!({"started": false, "state": {"running": {"startedAt": "2026-01-01T00:09:00Z"}}}),
    )];
    let startup = probe_event(
        "python-a",
        "Startup probe failed: service unhealthy",
        "2026-01-01T00:09:00Z",
        "2026-01-01T00:09:58Z",
        29,
    );
    assert_eq!(
        diagnosed_with(&no_conditions(), &starting, &[startup]),
        None,
        "startup probe failures are how every start begins"
    );

    // A container the kubelet stopped for its liveness probe says so.
    let restarted = [with_container(
        "python-a",
        json!({"restartCount": 2, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
               "lastState": {"terminated": {"exitCode": 0, "reason": "Completed"}}}),
    )];
    let liveness = probe_event(
        "python-a",
        "Liveness probe failed: timeout: failed to connect service \":50051\" within 1s",
        "2026-01-01T00:08:00Z",
        "2026-01-01T00:09:30Z",
        6,
    );
    let (reason, message) = diagnosed_with(&no_conditions(), &restarted, &[liveness]).expect("problem");
    assert_eq!(reason, "CrashLoopBackOff");
    assert!(
        message.contains("exited with code 0 (stopped by the kubelet: Liveness probe failed: timeout: failed to connect service \":50051\" within 1s)"),
        "{message}"
    );
}

#[test]
fn a_crash_loop_keeps_its_reason_through_every_state_of_its_cycle() {
    let last = json!({"exitCode": 1, "reason": "Error", "message": "fatal: no cgroup"});
    let cycle = [
        json!({"restartCount": 2, "state": {"waiting": {"reason": "CrashLoopBackOff"}}, "lastState": {"terminated": last}}),
        json!({"restartCount": 3, "started": false, "state": {"running": {"startedAt": "2026-01-01T00:09:59Z"}},
               "lastState": {"terminated": last}}),
        json!({"restartCount": 3, "state": {"terminated": last}, "lastState": {"terminated": last}}),
    ];
    for state in cycle {
        let (reason, message) =
            diagnosed(&no_conditions(), &[with_container("python-a", state.clone())]).expect("problem");
        assert_eq!(reason, "CrashLoopBackOff", "{state}");
        assert!(
            message.ends_with("; exited with code 1): fatal: no cgroup"),
            "{message}"
        );
    }
    // Only a first exit, before any restart, is told apart.
    let first = with_container("python-a", json!({"restartCount": 0, "state": {"terminated": last}}));
    assert_eq!(
        diagnosed(&no_conditions(), &[first]).expect("problem").0,
        "ContainerExited"
    );
}

#[test]
fn probe_events_are_read_only_for_pods_that_need_them() {
    let crash = crash_loop("python-a", 2, json!({"exitCode": 1}));
    let clean_exit = crash_loop("python-a", 2, json!({"exitCode": 0}));
    let ready = with_container(
        "python-a",
        json!({"ready": true, "started": true, "state": {"running": {}}}),
    );
    let pending = pod("python-a", json!({"phase": "Pending"}));
    assert!(wants_probe_events(&[started_unready("python-a")]));
    assert!(wants_probe_events(&[ready.clone(), clean_exit]));
    assert!(!wants_probe_events(&[crash, ready, pending]));
    assert!(!wants_probe_events(&[]));
}

#[test]
fn healthy_and_starting_pods_are_no_problem() {
    let cases: Vec<(&str, Vec<Pod>)> = vec![
        ("no pods", vec![]),
        (
            "ready",
            vec![with_container(
                "python-a",
                json!({"ready": true, "started": true, "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}),
            )],
        ),
        (
            "creating its container",
            vec![with_container(
                "python-a",
                json!({"state": {"waiting": {"reason": "ContainerCreating"}}}),
            )],
        ),
        (
            "pending, not yet looked at by the scheduler",
            vec![pod("python-a", json!({"phase": "Pending"}))],
        ),
        (
            "still in its startup probe",
            vec![with_container(
                "python-a",
                json!({"started": false, "state": {"running": {"startedAt": "2026-01-01T00:05:00Z"}}}),
            )],
        ),
        (
            "started, readiness not yet passed, 10 s ago",
            vec![with_container(
                "python-a",
                json!({"started": true, "state": {"running": {"startedAt": "2026-01-01T00:09:50Z"}}}),
            )],
        ),
        (
            "ready again after an old OOM kill",
            vec![with_container(
                "python-a",
                json!({"ready": true, "started": true, "restartCount": 1,
                       "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
                       "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}),
            )],
        ),
        (
            "a pod that completed",
            vec![pod("python-a", json!({"phase": "Succeeded"}))],
        ),
    ];
    for (what, pods) in cases {
        assert_eq!(diagnosed(&no_conditions(), &pods), None, "{what}");
    }
    // A pod being deleted (a rollout's old pod) is not the pool's problem.
    let mut leaving = crash_loop("python-old", 9, json!({"exitCode": 1}));
    leaving.metadata.deletion_timestamp = Some(time(NOW));
    assert_eq!(diagnosed(&no_conditions(), &[leaving]), None);
    // Nor is a Deployment whose rollout is progressing.
    let progressing = deployment(json!([{"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated"}]));
    assert_eq!(diagnosed(&progressing, &[]), None);
}

#[test]
fn the_root_cause_wins_and_the_rest_are_named() {
    let crashing = crash_loop("python-a", 4, json!({"exitCode": 1, "message": "boom"}));
    let pending = pod(
        "python-b",
        json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
               "reason": "Unschedulable", "message": "0/2 nodes are available: 2 Insufficient cpu."}]}),
    );
    // (what, deployment, pods, reason, message suffix)
    let cases: Vec<(&str, Deployment, Vec<Pod>, &str, &str)> = vec![
        (
            "a refused ReplicaSet before a crashing pod",
            pod_security_refusal(),
            vec![crashing.clone()],
            "ReplicaFailure",
            "; also CrashLoopBackOff",
        ),
        (
            "a crash before the deadline it causes",
            deadline(),
            vec![crashing.clone()],
            "CrashLoopBackOff",
            ": boom; also ProgressDeadlineExceeded",
        ),
        (
            "a crash before a pod without a node",
            no_conditions(),
            vec![pending.clone(), crashing.clone()],
            "CrashLoopBackOff",
            "; also Unschedulable",
        ),
        (
            "an image before an OOM kill",
            no_conditions(),
            vec![
                crash_loop("python-c", 1, json!({"exitCode": 137, "reason": "OOMKilled"})),
                with_container(
                    "python-d",
                    json!({"state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off"}}}),
                ),
            ],
            "ImagePullBackOff",
            "; also OOMKilled",
        ),
        (
            "pods alike are counted, other reasons too",
            deadline(),
            vec![
                crashing.clone(),
                crash_loop("python-e", 9, json!({"exitCode": 2, "message": "worse"})),
                pending.clone(),
                pod(
                    "python-f",
                    json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                           "reason": "Unschedulable", "message": "taint"}]}),
                ),
            ],
            "CrashLoopBackOff",
            "(and 1 more pod alike); also Unschedulable ×2, ProgressDeadlineExceeded",
        ),
    ];
    for (what, deployment, pods, reason, suffix) in cases {
        let (got, message) = diagnosed(&deployment, &pods).unwrap_or_else(|| panic!("{what}: nothing"));
        assert_eq!(got, reason, "{what}: {message}");
        assert!(
            message.ends_with(suffix),
            "{what}: {message:?} should end with {suffix:?}"
        );
    }
    // Among pods alike, the one that restarted most is quoted.
    let (_, message) = diagnosed(
        &no_conditions(),
        &[
            crashing.clone(),
            crash_loop("python-e", 9, json!({"exitCode": 2, "message": "worse"})),
        ],
    )
    .expect("problem");
    assert!(message.starts_with("pod python-e: "), "{message}");
    // Whatever order the pods are listed in, the answer is the same.
    let forward = diagnosed(&deadline(), &[crashing.clone(), pending.clone()]);
    let backward = diagnosed(&deadline(), &[pending, crashing]);
    assert_eq!(forward, backward);
}

#[test]
fn long_and_escaped_text_is_made_one_readable_line() {
    let long = "x".repeat(10_000);
    let pods = [crash_loop(
        "python-a",
        1,
        json!({"exitCode": 1, "message": format!("first\n{long}\n")}),
    )];
    let (_, message) = diagnosed(&no_conditions(), &pods).expect("problem");
    assert!(message.chars().count() < 800, "{}", message.len());
    assert!(message.ends_with('…'), "a cut line says so: {message}");
    assert!(!message.contains("first"), "only the last line is quoted");

    // Many pods, each with its own long scheduler message: the whole message stays bounded.
    let many: Vec<Pod> = (0..50)
        .map(|i| {
            pod(
                &format!("python-{i}"),
                json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                       "reason": "Unschedulable", "message": long.clone()}]}),
            )
        })
        .collect();
    let (_, message) = diagnosed(&no_conditions(), &many).expect("problem");
    assert!(message.chars().count() <= MAX_MESSAGE_CHARS);
    assert!(message.contains("(and 49 more pods alike)"), "{message}");

    assert_eq!(strip_ansi("\u{1b}[1;31mred\u{1b}[0m plain"), "red plain");
    assert_eq!(
        strip_ansi("\u{1b}]8;;http://x\u{7}link\u{1b}]8;;\u{1b}\\ end"),
        "link end"
    );
    assert_eq!(strip_ansi("a\u{1b}(Bb"), "ab");
    assert_eq!(strip_ansi("cut at the end \u{1b}["), "cut at the end ");
    assert_eq!(clean("tab\there\r\nnext\u{7}"), "tab here next");
    assert_eq!(last_line("one\n\u{1b}[31mtwo\u{1b}[0m\n  \n"), Some("two".to_owned()));
    assert_eq!(last_line("\n \n"), None);
    assert_eq!(truncate("ñandú", 3), "ña…");
}

#[test]
fn odd_waiting_reasons_become_a_valid_condition_reason() {
    let pods = [with_container(
        "python-a",
        json!({"state": {"waiting": {"reason": "some runtime's own words", "message": "m"}}}),
    )];
    let (reason, message) = diagnosed(&no_conditions(), &pods).expect("problem");
    assert_eq!(reason, "ContainerWaiting");
    assert!(message.ends_with(": m"), "{message}");
    assert!(is_condition_reason("CreateContainerError"));
    assert!(!is_condition_reason("9Lives") && !is_condition_reason("a b") && !is_condition_reason("x:"));
}

/// A pod the scheduler placed whose container the kubelet has not created yet.
fn creating_pod(name: &str) -> Pod {
    pod(
        name,
        json!({"phase": "Pending",
               "conditions": [{"type": "PodScheduled", "status": "True"}],
               "containerStatuses": [{"name": "executor", "image": "ghcr.io/sandpool/executor:1", "imageID": "",
                                      "ready": false, "restartCount": 0,
                                      "state": {"waiting": {"reason": "ContainerCreating"}}}]}),
    )
}

/// The kubelet's `FailedMount` Event about `pod`, last seen at `last`.
fn mount_event(pod: &str, message: &str, last: &str) -> Event {
    serde_json::from_value(json!({
        "metadata": {"name": format!("{pod}.m"), "namespace": "evals"},
        "involvedObject": {"kind": "Pod", "name": pod, "namespace": "evals"},
        "reason": "FailedMount", "type": "Warning", "message": message,
        "firstTimestamp": last, "lastTimestamp": last, "count": 3,
    }))
    .expect("test event deserializes")
}

#[test]
fn a_volume_the_kubelet_cannot_mount_is_named() {
    let missing = "MountVolume.SetUp failed for volume \"session-store-s3\" : secret \"s3-creds\" not found";
    let events = [mount_event("python-a", missing, "2026-01-01T00:09:30Z")];
    assert_eq!(
        diagnosed_with(&no_conditions(), &[creating_pod("python-a")], &events),
        Some((
            "FailedMount".to_owned(),
            format!("pod python-a cannot mount its volumes: {missing}")
        ))
    );
    // Not about this pod, stale, or the pod is past creating: no problem from it.
    assert_eq!(
        diagnosed_with(&no_conditions(), &[creating_pod("python-b")], &events),
        None
    );
    let stale = [mount_event("python-a", missing, "2026-01-01T00:01:00Z")];
    assert_eq!(
        diagnosed_with(&no_conditions(), &[creating_pod("python-a")], &stale),
        None
    );
    let ready = with_container(
        "python-a",
        json!({"ready": true, "started": true, "state": {"running": {}}}),
    );
    assert_eq!(
        diagnosed_with(&no_conditions(), std::slice::from_ref(&ready), &events),
        None
    );
    // Mount Events are read only while a pod is being created.
    assert!(wants_mount_events(&[ready.clone(), creating_pod("python-a")]));
    assert!(!wants_mount_events(&[
        ready,
        pod("python-a", json!({"phase": "Pending"}))
    ]));
}
