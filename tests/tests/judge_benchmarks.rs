//! What benchmark runs rely on beyond the judge's core: no vacuous passes, prelude control,
//! harness dependencies (table import_dirs and request files), Java's public class, and a
//! Kotlin toolchain that reports a clean version and clean compile errors.

use sandpool_executor::proto as pb;
use sandpool_tests::{Executor, Options, describe, request, stdout, verdict};

fn assert_req(language: &str, code: &str, test_code: &str, entry_point: &str) -> pb::EvaluateRequest {
    pb::EvaluateRequest {
        id: "t".into(),
        language: language.into(),
        completion: code.into(),
        tests: Some(pb::evaluate_request::Tests::Assert(pb::AssertTests {
            test_code: test_code.into(),
            entry_point: entry_point.into(),
            ..Default::default()
        })),
        options: Some(pb::EvaluateOptions {
            raw_code: true,
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn with_prelude(mut r: pb::EvaluateRequest, p: pb::evaluate_options::Prelude) -> pb::EvaluateRequest {
    r.options.get_or_insert_with(Default::default).prelude = p as i32;
    r
}

const CHECK: &str = "def check(candidate):\n    assert candidate(2) == 4\n";

#[tokio::test(flavor = "multi_thread")]
async fn a_check_that_is_never_called_is_refused_not_passed() {
    let ex = Executor::start(Options {
        slots: 1,
        languages: vec!["python"],
        ..Default::default()
    })
    .await;
    let mut c = ex.client();
    // A wrong stub: before, no check ever ran and this was OK.
    let e = c
        .evaluate(assert_req("python", "def sq(x):\n    return None\n", CHECK, ""))
        .await
        .expect_err("refused");
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(e.message().starts_with("tests.assert.entry_point:"), "{}", e.message());
    // With the entry point, the same stub fails and the right code passes.
    let r = c
        .evaluate(assert_req("python", "def sq(x):\n    return None\n", CHECK, "sq"))
        .await
        .expect("Evaluate")
        .into_inner();
    assert_eq!(verdict(r.verdict), "RUNTIME_ERROR", "{r:?}");
    let r = c
        .evaluate(assert_req("python", "def sq(x):\n    return x * x\n", CHECK, "sq"))
        .await
        .expect("Evaluate")
        .into_inner();
    assert!(r.accepted, "{r:?}");
    // Stop tokens that cut the whole completion away (no prompt): refused, naming the field.
    let mut r = assert_req("python", "\ndef sq(x):\n    return x * x\n", "assert sq(2) == 4\n", "");
    if let Some(pb::evaluate_request::Tests::Assert(t)) = r.tests.as_mut() {
        t.stop_tokens = vec!["\ndef".into()];
    }
    let e = c.evaluate(r.clone()).await.expect_err("refused");
    assert!(e.message().starts_with("tests.assert.stop_tokens:"), "{}", e.message());
    // The same completion under its prompt: the tokens cut only the completion.
    if let Some(pb::evaluate_request::Tests::Assert(t)) = r.tests.as_mut() {
        t.prompt = "def sq(x):\n".into();
    }
    r.completion = "    return x * x\n\ndef sq(x):\n    return 0\n".into();
    let resp = c.evaluate(r).await.expect("Evaluate").into_inner();
    assert!(resp.accepted, "{resp:?}");
    assert!(
        resp.full_code
            .starts_with("def sq(x):\n    return x * x\n\nassert sq(2) == 4\n")
            && !resp.full_code.contains("return 0"),
        "{}",
        resp.full_code
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_prelude_is_chosen_per_request_with_an_executor_default() {
    use pb::evaluate_options::Prelude;
    // Forgets `import math`: the prelude supplies it, reference harnesses do not.
    let code = "def root(x):\n    return math.sqrt(x)\n";
    let test = "assert root(4) == 2\n";
    let on = Executor::start(Options {
        slots: 1,
        languages: vec!["python"],
        ..Default::default()
    })
    .await;
    let off = Executor::start(Options {
        slots: 1,
        languages: vec!["python"],
        extra_args: vec!["--assert-prelude".into(), "off".into()],
        ..Default::default()
    })
    .await;
    let run = |ex: &Executor, r: pb::EvaluateRequest| {
        let mut c = ex.client();
        async move { c.evaluate(r).await.expect("Evaluate").into_inner() }
    };
    let base = assert_req("python", code, test, "");
    let r = run(&on, base.clone()).await;
    assert!(r.accepted && r.full_code.starts_with("import math\n"), "{r:?}");
    let r = run(&on, with_prelude(base.clone(), Prelude::Off)).await;
    assert_eq!(verdict(r.verdict), "RUNTIME_ERROR", "{r:?}");
    assert!(r.full_code.starts_with("def root"), "{}", r.full_code);
    let r = run(&off, base.clone()).await;
    assert_eq!(verdict(r.verdict), "RUNTIME_ERROR", "executor default off: {r:?}");
    let r = run(&off, with_prelude(base, Prelude::On)).await;
    assert!(r.accepted, "{r:?}");
}

/// Makes `path` and its parents up to `root` readable by the sandbox's uids (tempdirs are 0700).
fn open_up(root: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    for e in walk(root) {
        let mode = if e.is_dir() { 0o755 } else { 0o644 };
        std::fs::set_permissions(&e, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }
}

fn walk(p: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = vec![p.to_owned()];
    if p.is_dir() {
        for e in std::fs::read_dir(p).expect("read_dir").flatten() {
            out.extend(walk(&e.path()));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn harness_dependencies_come_from_table_dirs_or_request_files() {
    // A package directory as the image's /opt/sandpool/node/node_modules would be (here under
    // /var/tmp: runs get /tmp privately).
    let pkgs = tempfile::Builder::new()
        .prefix("sandpool-deps-")
        .tempdir_in("/var/tmp")
        .expect("tempdir");
    let modules = pkgs.path().join("node_modules");
    std::fs::create_dir_all(modules.join("fakedash")).expect("mkdir");
    std::fs::write(
        modules.join("fakedash/index.js"),
        "module.exports = { isEqual: (a, b) => JSON.stringify(a) === JSON.stringify(b) };\n",
    )
    .expect("write");
    open_up(pkgs.path());
    let table = pkgs.path().join("languages.toml");
    std::fs::write(
        &table,
        format!(
            "[javascript]\nsource = \"main.js\"\nrun = [\"node\", \"main.js\"]\nversion = [\"node\", \"--version\"]\n\
             import_path_env = \"NODE_PATH\"\nimport_dirs = [\"{}\", \"/nonexistent-sandpool-deps\"]\n",
            modules.display()
        ),
    )
    .expect("table");
    let ex = Executor::start(Options {
        slots: 1,
        extra_args: vec!["--languages".into(), table.display().to_string()],
        ..Default::default()
    })
    .await;
    let mut c = ex.client();
    // MBXP's JavaScript tests start `const _ = require('lodash')`.
    let test = "const _ = require('fakedash');\nif (!_.isEqual(pair(1), [1, 1])) { throw new Error('wrong'); }\n";
    let code = "function pair(x) { return [x, x]; }\n";
    let r = c
        .evaluate(assert_req("javascript", code, test, ""))
        .await
        .expect("Evaluate")
        .into_inner();
    assert!(r.accepted, "{r:?}");
    let r = c
        .evaluate(assert_req("javascript", "function pair(x) { return [x]; }\n", test, ""))
        .await
        .expect("Evaluate")
        .into_inner();
    assert_eq!(verdict(r.verdict), "RUNTIME_ERROR", "{r:?}");
    // The escape hatch: the package in the request's files, where Node looks first.
    let test = "const lp = require('leftpad');\nif (lp(pad(7)) !== '  7') { throw new Error('wrong'); }\n";
    let mut req = assert_req("javascript", "function pad(x) { return String(x); }\n", test, "");
    req.options.get_or_insert_with(Default::default).files = vec![pb::File {
        path: "node_modules/leftpad/index.js".into(),
        content: b"module.exports = (s) => s.padStart(3);\n".to_vec(),
        executable: false,
    }];
    let r = c.evaluate(req).await.expect("Evaluate").into_inner();
    assert!(r.accepted, "{r:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn java_runs_a_public_class_not_named_main() {
    let ex = Executor::start(Options {
        slots: 1,
        languages: vec!["java"],
        ..Default::default()
    })
    .await;
    let mut c = ex.client();
    let code = "import java.util.*;\n\npublic class Solution {\n    public static void main(String[] args) {\n        System.out.println(\"solved \" + new Scanner(System.in).nextInt());\n    }\n}\n";
    let r = c
        .execute(request("java", code, "41\n"))
        .await
        .expect("Execute")
        .into_inner();
    assert_eq!(verdict(r.verdict), "OK", "{}", describe(&r));
    assert_eq!(stdout(&r), "solved 41\n");
    // Judged, with a helper class and a test harness class in the same file.
    let completion = "class Helper { static int twice(int x) { return 2 * x; } }\n\npublic class Solution {\n    public static void main(String[] args) {\n        if (Helper.twice(3) != 6) throw new AssertionError();\n    }\n}\n";
    let r = c
        .evaluate(assert_req("java", completion, "class Other {}\n", ""))
        .await
        .expect("Evaluate")
        .into_inner();
    assert!(r.accepted, "{r:?}");
    // HumanEval-X's shape (public class Main in the tests) is unchanged.
    let main = "public class Main {\n    public static void main(String[] args) { System.out.println(\"main\"); }\n}\n";
    let r = c
        .execute(request("java", main, ""))
        .await
        .expect("Execute")
        .into_inner();
    assert_eq!(stdout(&r), "main\n", "{}", describe(&r));
}

#[tokio::test(flavor = "multi_thread")]
async fn kotlin_reports_a_clean_version_and_clean_compile_errors() {
    let ex = Executor::start(Options {
        slots: 1,
        languages: vec!["kotlin"],
        ..Default::default()
    })
    .await;
    let mut c = ex.client();
    let caps = c
        .get_capabilities(pb::GetCapabilitiesRequest {})
        .await
        .expect("caps")
        .into_inner();
    let kt = caps
        .languages
        .iter()
        .find(|l| l.name == "kotlin")
        .expect("kotlin in the table");
    if !kt.available {
        eprintln!("kotlin unavailable here ({}); skipped", kt.unavailable_reason);
        return;
    }
    assert!(kt.version.starts_with("kotlinc-jvm "), "{:?}", kt.version);
    let r = c
        .execute(request("kotlin", "fun main() { val x: Int = \"s\" }\n", ""))
        .await
        .expect("Execute")
        .into_inner();
    assert_eq!(verdict(r.verdict), "COMPILE_ERROR", "{}", describe(&r));
    let err = String::from_utf8_lossy(&r.compile.as_ref().expect("compile phase").stderr).into_owned();
    assert!(!err.contains("VM warning"), "{err}");
    assert!(err.starts_with("main.kt:1:"), "{err}");
}
