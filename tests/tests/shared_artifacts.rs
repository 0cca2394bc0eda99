//! Shared artifacts (docs/warm-starts.md): what a language's entry builds once (C++'s
//! precompiled headers) is used by warm compiles, not by cold ones, gives no program a
//! header it did not include, and no run can change what the next run sees; in both
//! isolation modes. Restricted mode shares nothing unless each slot has its own uid (runs
//! as root): runs of a non-root executor could chmod what it exported.

use sandpool_proto::v1 as pb;
use sandpool_tests::{Executor, Isolation, Options, describe, stdout};

/// Whether this executor shares artifacts: restricted mode only with a uid per slot, which
/// the harness gives it only when run as root.
fn shares(exe: &Executor, isolation: Isolation) -> bool {
    isolation == Isolation::Namespaces
        || std::fs::metadata(exe.work_root.path()).is_ok_and(|m| {
            use std::os::unix::fs::MetadataExt;
            m.uid() == 0
        })
}

async fn executor(isolation: Isolation, warm: bool) -> Executor {
    Executor::start(Options {
        slots: 2,
        languages: vec!["cpp", "bash"],
        extra_args: vec!["--warm-starts".into(), warm.to_string()],
        isolation,
        ..Default::default()
    })
    .await
}

fn req(language: &str, code: &str, cold: bool) -> pb::ExecuteRequest {
    pb::ExecuteRequest {
        language: language.into(),
        code: code.into(),
        cold_start: cold,
        compile_limits: Some(pb::Limits {
            wall_time_ms: 60_000,
            cpu_time_ms: 60_000,
            ..Default::default()
        }),
        ..Default::default()
    }
}

const STDCPP: &str = "#include <bits/stdc++.h>\nusing namespace std;\nint main() {\n    vector<int> v{3, 1, 2};\n    sort(v.begin(), v.end());\n    cout << v[0] << v[2] << endl;\n}\n";

fn compile_warm(r: &pb::ExecuteResponse) -> bool {
    r.compile.as_ref().is_some_and(|c| c.warm)
}

/// Where runs see the shared dir: /sandpool/shared, or in restricted mode (which rewrites
/// only commands and environments to it) its real path.
fn shared_dir(exe: &Executor, isolation: Isolation) -> String {
    match isolation {
        Isolation::Namespaces => "/sandpool/shared".to_owned(),
        Isolation::Restricted => exe.work_root.path().join("shared").display().to_string(),
    }
}

/// What a run sees of the shared dir: every file's path, size, mode and time, and the
/// content of the precompiled headers (namespaces mode keeps them off the host's disk).
async fn fingerprint(exe: &Executor, isolation: Isolation) -> String {
    let d = shared_dir(exe, isolation);
    let script = format!(
        "cd {d} && find . -printf '%p %s %m %T@\\n' | sort && sha256sum cpp/prelude.h.gch cpp/include/bits/stdc++.h.gch 2>&1"
    );
    let r = exe.run(req("bash", &script, false)).await;
    assert_eq!(r.verdict, pb::Verdict::Ok as i32, "{}", describe(&r));
    stdout(&r)
}

async fn warm_compiles_use_the_headers_and_cold_ones_do_not(isolation: Isolation) {
    let exe = executor(isolation, true).await;
    // The first warm compile builds the headers, then compiles with them.
    let warm = exe.run(req("cpp", STDCPP, false)).await;
    assert_eq!(stdout(&warm), "13\n", "{}", describe(&warm));
    if !shares(&exe, isolation) {
        assert!(!compile_warm(&warm), "{}", describe(&warm));
        let host = exe.work_root.path().join("shared");
        assert_eq!(
            std::fs::read_dir(&host).map(|d| d.count()).unwrap_or(0),
            0,
            "built where runs could chmod it"
        );
        assert!(!exe.language_info("cpp").await.warm_start);
        return;
    }
    assert!(compile_warm(&warm), "{}", describe(&warm));
    let seen = fingerprint(&exe, isolation).await;
    assert!(
        seen.contains("./cpp/include/bits/stdc++.h.gch "),
        "no precompiled header:\n{seen}"
    );
    let cold = exe.run(req("cpp", STDCPP, true)).await;
    assert_eq!(stdout(&cold), "13\n", "{}", describe(&cold));
    assert!(!compile_warm(&cold), "cold_start compiled warm: {}", describe(&cold));
    let caps = exe.language_info("cpp").await;
    assert!(caps.warm_start, "capabilities: {caps:?}");
}

#[tokio::test]
async fn warm_compiles_use_the_headers_and_cold_ones_do_not_namespaces() {
    warm_compiles_use_the_headers_and_cold_ones_do_not(Isolation::Namespaces).await;
}

#[tokio::test]
async fn warm_compiles_use_the_headers_and_cold_ones_do_not_restricted() {
    warm_compiles_use_the_headers_and_cold_ones_do_not(Isolation::Restricted).await;
}

#[tokio::test]
async fn warm_starts_off_builds_and_uses_nothing() {
    let exe = executor(Isolation::default(), false).await;
    let r = exe.run(req("cpp", STDCPP, false)).await;
    assert_eq!(stdout(&r), "13\n", "{}", describe(&r));
    assert!(!compile_warm(&r), "{}", describe(&r));
    let seen = exe.run(req("bash", "ls -A /sandpool/shared | wc -l", false)).await;
    assert_eq!(stdout(&seen), "0\n", "built with warm starts off: {}", describe(&seen));
    assert!(!exe.language_info("cpp").await.warm_start);
}

#[tokio::test]
async fn a_program_gets_no_header_it_did_not_include() {
    let exe = executor(Isolation::default(), true).await;
    let _ = exe.run(req("cpp", STDCPP, false)).await;
    // <stdio.h> first, as the judge's prelude starts: still no <vector> unless included.
    let code = "#include <stdio.h>\nint main() { std::vector<int> v; printf(\"%zu\\n\", v.size()); }\n";
    for cold in [false, true] {
        let r = exe.run(req("cpp", code, cold)).await;
        assert_eq!(
            r.verdict,
            pb::Verdict::CompileError as i32,
            "cold {cold}: {}",
            describe(&r)
        );
        assert_eq!(compile_warm(&r), !cold, "{}", describe(&r));
    }
}

/// Every way a run could change, replace or add to what the next run sees: each must fail.
/// `$d` is where runs see the shared dir: /sandpool/shared, or in restricted mode (which
/// rewrites only commands and environments to it) its real path.
const ATTACK: &str = r#"
ls "$d/cpp/include/bits/stdc++.h.gch" >/dev/null || { echo "no gch"; exit 3; }
n=0
try() { if "$@" 2>/dev/null; then echo "allowed: $*"; n=$((n+1)); fi; }
try sh -c "echo x >> $d/cpp/include/bits/stdc++.h.gch"
try sh -c ": > $d/cpp/prelude.h.gch"
try truncate -s 0 "$d/cpp/prelude.h"
try rm -f "$d/cpp/include/bits/stdc++.h.gch"
try mv "$d/cpp/prelude.h.gch" /tmp/x
try chmod 777 "$d/cpp/prelude.h"
try touch -d 2000-01-01 "$d/cpp/prelude.h"
try touch "$d/cpp/include/bits/vector.gch"
try mkdir "$d/java"
try ln -s /tmp "$d/cpp/include/x"
echo "allowed $n"
"#;

async fn runs_cannot_change_the_shared_artifacts(isolation: Isolation) {
    let exe = executor(isolation, true).await;
    let first = exe.run(req("cpp", STDCPP, false)).await;
    if !shares(&exe, isolation) {
        // Covered by the test above: nothing is built, so there is nothing to attack.
        return;
    }
    assert!(compile_warm(&first), "{}", describe(&first));
    let before = fingerprint(&exe, isolation).await;
    assert!(before.contains("cpp/prelude.h.gch\n"), "{before}");
    let dir = shared_dir(&exe, isolation);
    let r = exe.run(req("bash", &format!("d={dir}\n{ATTACK}"), false)).await;
    assert_eq!(stdout(&r), "allowed 0\n", "{}", describe(&r));
    assert_eq!(fingerprint(&exe, isolation).await, before, "what runs see changed");
    // And the next compile still uses them.
    let again = exe.run(req("cpp", STDCPP, false)).await;
    assert_eq!(stdout(&again), "13\n", "{}", describe(&again));
    assert!(compile_warm(&again));
}

#[tokio::test]
async fn runs_cannot_change_the_shared_artifacts_namespaces() {
    runs_cannot_change_the_shared_artifacts(Isolation::Namespaces).await;
}

#[tokio::test]
async fn runs_cannot_change_the_shared_artifacts_restricted() {
    runs_cannot_change_the_shared_artifacts(Isolation::Restricted).await;
}

/// Java's class archives and Go's build cache (docs/warm-starts.md), attacked by a run:
/// writes, truncation, removal, renames, new entries, modes, times and links each fail, and
/// Go itself, told to use the shared cache for a package it has never seen, stores nothing.
/// `$d` as in [`ATTACK`].
const ATTACK_VM: &str = r#"
ls "$d/java/java.jsa" "$d/java/javac.jsa" "$d/go_test/.gocache/README" >/dev/null || { echo "not built"; exit 3; }
entry=$(find "$d/go_test/.gocache" -type f -name '*-d' | head -n 1)
[ -n "$entry" ] || { echo "empty cache"; exit 3; }
n=0
try() { if "$@" 2>/dev/null; then echo "allowed: $*"; n=$((n+1)); fi; }
try sh -c "echo x >> $d/java/java.jsa"
try sh -c ": > $d/java/javac.jsa"
try rm -f "$d/java/java.jsa"
try mv "$d/java/javac.jsa" /tmp/x
try chmod 777 "$d/java/java.jsa"
try touch -d 2000-01-01 "$d/java/javac.jsa"
try ln -s /tmp "$d/java/evil"
try sh -c "echo x >> $entry"
try sh -c ": > $entry"
try rm -f "$entry"
try mv "$entry" /tmp/y
try touch "$d/go_test/.gocache/00/evil-d"
try mkdir "$d/go_test/.gocache/zz"
try chmod 777 "$d/go_test/.gocache"
try rm -f "$d/go_test/.gocache/trim.txt"
# Go writes what it compiles into GOCACHE when it can: it must not be able to here.
mkdir -p /tmp/p && printf 'package main\nimport "fmt"\nfunc main() { fmt.Println("poison-%s") }\n' $$ > /tmp/p/p.go
GOCACHE="$d/go_test/.gocache" GO111MODULE=off CGO_ENABLED=0 go build -o /tmp/p/p /tmp/p/p.go 2>/dev/null
/tmp/p/p >/dev/null || { echo "go build failed"; exit 3; }
echo "allowed $n"
"#;

/// Every file under the shared dir's java/ and go_test/: path, size, mode and time, and a
/// hash of every file's content.
async fn fingerprint_vm(exe: &Executor, isolation: Isolation) -> String {
    let d = shared_dir(exe, isolation);
    let script = format!(
        "cd {d} && find java go_test -printf '%p %s %m %T@\\n' | sort | sha256sum && find java go_test -type f | sort | xargs cat | sha256sum && find java go_test | wc -l"
    );
    let r = exe.run(req("bash", &script, false)).await;
    assert_eq!(r.verdict, pb::Verdict::Ok as i32, "{}", describe(&r));
    stdout(&r)
}

const GO_TEST: &str = "package main\n\nimport (\n    \"testing\"\n    \"github.com/stretchr/testify/assert\"\n)\n\nfunc TestX(t *testing.T) {\n    assert.New(t).Equal(2, 1+1)\n}\n";
const JAVA: &str = "public class Main {\n    public static void main(String[] a) {\n        System.out.println(java.util.List.of(1, 2).size());\n    }\n}\n";

async fn runs_cannot_change_java_archives_or_go_cache(isolation: Isolation) {
    let exe = Executor::start(Options {
        slots: 2,
        languages: vec!["java", "go_test", "bash"],
        isolation,
        ..Default::default()
    })
    .await;
    let limits = Some(pb::Limits {
        wall_time_ms: 60_000,
        cpu_time_ms: 60_000,
        ..Default::default()
    });
    let vm = |language: &str, code: &str| pb::ExecuteRequest {
        limits,
        ..req(language, code, false)
    };
    let java = exe.run(vm("java", JAVA)).await;
    assert_eq!(stdout(&java), "2\n", "{}", describe(&java));
    let go = exe.run(vm("go_test", GO_TEST)).await;
    assert_eq!(go.verdict, pb::Verdict::Ok as i32, "{}", describe(&go));
    if !shares(&exe, isolation) {
        return;
    }
    assert!(compile_warm(&java), "{}", describe(&java));
    assert!(go.run.as_ref().is_some_and(|p| p.warm), "{}", describe(&go));
    let before = fingerprint_vm(&exe, isolation).await;
    let dir = shared_dir(&exe, isolation);
    let r = exe.run(vm("bash", &format!("d={dir}\n{ATTACK_VM}"))).await;
    assert_eq!(stdout(&r), "allowed 0\n", "{}", describe(&r));
    assert_eq!(fingerprint_vm(&exe, isolation).await, before, "what runs see changed");
    // And the next runs still use them.
    let java = exe.run(vm("java", JAVA)).await;
    assert_eq!(stdout(&java), "2\n", "{}", describe(&java));
    assert!(compile_warm(&java), "{}", describe(&java));
    let go = exe.run(vm("go_test", GO_TEST)).await;
    assert_eq!(go.verdict, pb::Verdict::Ok as i32, "{}", describe(&go));
    assert!(go.run.as_ref().is_some_and(|p| p.warm), "{}", describe(&go));
}

#[tokio::test]
async fn runs_cannot_change_java_archives_or_go_cache_namespaces() {
    runs_cannot_change_java_archives_or_go_cache(Isolation::Namespaces).await;
}

#[tokio::test]
async fn runs_cannot_change_java_archives_or_go_cache_restricted() {
    runs_cannot_change_java_archives_or_go_cache(Isolation::Restricted).await;
}
