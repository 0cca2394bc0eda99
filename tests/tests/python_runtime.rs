//! The Python runtime: the curated scientific packages import inside the
//! sandbox and GetCapabilities lists them; a directory given with
//! `--python-path` is importable, read-only, without touching the table; and
//! HumanEval with `import numpy` before every program (SandboxFusion's way)
//! passes 164/164.

mod judge_common;

use futures::StreamExt;
use judge_common::*;
use sandpool_executor::proto as pb;
use std::path::PathBuf;
use std::sync::OnceLock;

const LANGS: &[&str] = &["python"];

/// The curated runtime (docs/python-runtime.md): distribution name and import name.
const RUNTIME: &[(&str, &str)] = &[
    ("numpy", "numpy"),
    ("pandas", "pandas"),
    ("scipy", "scipy"),
    ("sympy", "sympy"),
    ("networkx", "networkx"),
    ("sortedcontainers", "sortedcontainers"),
    ("regex", "regex"),
];

/// A venv-shaped directory holding one tiny package, outside /tmp and /work
/// (runs get those privately). World-writable, so that only the read-only
/// mount can stop a run writing to it.
fn extra_venv() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let root = PathBuf::from("/var/tmp");
        if let Ok(entries) = std::fs::read_dir(&root) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let dead = name
                    .strip_prefix("sandpool-pyrt-")
                    .and_then(|p| p.parse::<u32>().ok())
                    .is_some_and(|pid| !PathBuf::from(format!("/proc/{pid}")).exists());
                if dead {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        let venv = root.join(format!("sandpool-pyrt-{}", std::process::id()));
        let site = venv.join("lib/python3.11/site-packages");
        let pkg = site.join("sandpool_tiny");
        std::fs::create_dir_all(&pkg).expect("mkdir");
        std::fs::write(venv.join("pyvenv.cfg"), "home = /usr/bin\n").expect("pyvenv.cfg");
        std::fs::write(pkg.join("__init__.py"), "VALUE = 42\n").expect("package");
        let dist = site.join("sandpool_tiny-0.1.dist-info");
        std::fs::create_dir_all(&dist).expect("mkdir");
        std::fs::write(
            dist.join("METADATA"),
            "Metadata-Version: 2.1\nName: sandpool-tiny\nVersion: 0.1\n",
        )
        .expect("METADATA");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&site, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        venv
    })
}

async fn client() -> ExecutorClient<tonic::transport::Channel> {
    let venv = extra_venv();
    server_with(LANGS, &["--python-path".into(), venv.display().to_string()]);
    judge_common::client(LANGS).await
}

async fn run(code: &str) -> pb::ExecuteResponse {
    client()
        .await
        .execute(pb::ExecuteRequest {
            language: "python".into(),
            code: code.into(),
            ..Default::default()
        })
        .await
        .expect("Execute")
        .into_inner()
}

#[tokio::test(flavor = "multi_thread")]
async fn capabilities_list_each_runtime_package_with_its_version() {
    let caps = client()
        .await
        .get_capabilities(pb::GetCapabilitiesRequest {})
        .await
        .expect("GetCapabilities")
        .into_inner();
    let py = caps.languages.iter().find(|l| l.name == "python").expect("python");
    assert!(py.available, "{py:?}");
    let version = |name: &str| {
        py.packages
            .iter()
            .find(|p| p.name.eq_ignore_ascii_case(name))
            .map(|p| p.version.clone())
    };
    for (dist, _) in RUNTIME {
        let v = version(dist).unwrap_or_else(|| panic!("{dist} not listed in {:?}", py.packages));
        assert!(v.chars().next().is_some_and(|c| c.is_ascii_digit()), "{dist} {v}");
    }
    // The --python-path directory's packages are listed too.
    assert_eq!(version("sandpool-tiny").as_deref(), Some("0.1"), "{:?}", py.packages);
    // numpy's version is the one a run imports.
    let r = run("import numpy; print(numpy.__version__)").await;
    assert_eq!(r.verdict, pb::Verdict::Ok as i32, "{r:?}");
    let run_version = String::from_utf8_lossy(&r.run.expect("run").stdout).trim().to_owned();
    assert_eq!(version("numpy"), Some(run_version));
}

#[tokio::test(flavor = "multi_thread")]
async fn each_runtime_package_imports_and_works_in_the_sandbox() {
    let code = r#"
import numpy, pandas, scipy.optimize, sympy, networkx, sortedcontainers, regex
assert int(numpy.arange(10).sum()) == 45
assert pandas.DataFrame({"a": [1, 2, 3]})["a"].sum() == 6
assert abs(scipy.optimize.brentq(lambda x: x * x - 2, 0, 2) - 2 ** 0.5) < 1e-9
x = sympy.symbols("x")
assert sympy.factor(x ** 2 - 1) == (x - 1) * (x + 1)
assert networkx.shortest_path_length(networkx.path_graph(5), 0, 4) == 4
assert list(sortedcontainers.SortedList([3, 1, 2])) == [1, 2, 3]
assert regex.findall(r"\p{L}+", "ab 12 cd") == ["ab", "cd"]
import os
print("ok", os.environ.get("OPENBLAS_NUM_THREADS"))
"#;
    let r = run(code).await;
    let phase = r.run.clone().expect("run");
    assert_eq!(
        r.verdict,
        pb::Verdict::Ok as i32,
        "{}",
        String::from_utf8_lossy(&phase.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&phase.stdout).trim(), "ok 1");
    // Each one on its own, so that a missing package is named.
    for (_, module) in RUNTIME {
        let r = run(&format!("import {module}")).await;
        assert_eq!(r.verdict, pb::Verdict::Ok as i32, "import {module}: {r:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_python_path_directory_is_importable_and_read_only() {
    let site = extra_venv().join("lib/python3.11/site-packages");
    let code = format!(
        r#"
import errno, sandpool_tiny
print(sandpool_tiny.VALUE, sandpool_tiny.__file__)
try:
    open("{}/written.txt", "w")
    print("writable")
except OSError as e:
    print("read-only" if e.errno == errno.EROFS else e)
"#,
        site.display()
    );
    let r = run(&code).await;
    let phase = r.run.clone().expect("run");
    assert_eq!(
        r.verdict,
        pb::Verdict::Ok as i32,
        "{}",
        String::from_utf8_lossy(&phase.stderr)
    );
    let out = String::from_utf8_lossy(&phase.stdout);
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            format!("42 {}", site.join("sandpool_tiny/__init__.py").display()).as_str(),
            "read-only"
        ],
        "{out}"
    );
    assert!(!site.join("written.txt").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn humaneval_with_import_numpy_prepended_passes_164() {
    let problems = read_jsonl_gz(&humaneval_path());
    assert_eq!(problems.len(), 164);
    let c = client().await;
    let results: Vec<(String, bool, String)> = futures::stream::iter(problems.iter().map(|p| {
        // SandboxFusion's HumanEval path puts `import numpy` before every program.
        let code = format!("import numpy\n{}{}", s(p, "prompt"), s(p, "canonical_solution"));
        let mut r = assert_request(s(p, "task_id"), "python", &code, s(p, "test"), s(p, "entry_point"));
        if let Some(o) = r.options.as_mut() {
            o.run_limits = Some(pb::Limits {
                wall_time_ms: 20_000,
                cpu_time_ms: 20_000,
                ..Default::default()
            });
        }
        r
    }))
    .map(|r| {
        let mut c = c.clone();
        async move {
            let resp = c.evaluate(r).await.expect("Evaluate").into_inner();
            (resp.id.clone(), resp.accepted, resp.message.clone())
        }
    })
    .buffer_unordered(8)
    .collect()
    .await;
    let rejected: Vec<_> = results.iter().filter(|r| !r.1).collect();
    assert!(rejected.is_empty(), "rejected: {rejected:?}");
    assert_eq!(results.len(), 164);
}
