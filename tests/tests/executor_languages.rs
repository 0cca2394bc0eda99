//! Every installed language: hello world, stdin echo, non-zero exit, runtime
//! error, and a compile error for compiled languages, through the real
//! executor binary over gRPC.

use futures::StreamExt;
use sandpool_proto::v1 as pb;
use sandpool_tests::{Executor, Options, describe, request, stdout};

/// Snippets for one language; `None` where the case does not apply.
struct Case {
    lang: &'static str,
    hello: &'static str,
    /// What the hello program's stdout must contain.
    marker: &'static str,
    echo: Option<&'static str>,
    exit3: Option<&'static str>,
    runtime_error: Option<&'static str>,
    compile_error: Option<&'static str>,
}

const fn case(lang: &'static str, hello: &'static str) -> Case {
    Case {
        lang,
        hello,
        marker: "hello, world",
        echo: None,
        exit3: None,
        runtime_error: None,
        compile_error: None,
    }
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            echo: Some("import sys\nsys.stdout.write(sys.stdin.read())\n"),
            exit3: Some("import sys\nsys.exit(3)\n"),
            runtime_error: Some("print(1 / 0)\n"),
            ..case("python", "print('hello, world')\n")
        },
        Case {
            echo: Some("#include <stdio.h>\nint main(void){int c; while((c=getchar())!=EOF) putchar(c); return 0;}\n"),
            exit3: Some("int main(void){return 3;}\n"),
            runtime_error: Some("#include <stdlib.h>\nint main(void){abort();}\n"),
            compile_error: Some("int main(void){ return undefined_thing; }\n"),
            ..case(
                "c",
                "#include <stdio.h>\nint main(void){puts(\"hello, world\"); return 0;}\n",
            )
        },
        Case {
            echo: Some("#include <iostream>\nint main(){ std::cout << std::cin.rdbuf(); }\n"),
            exit3: Some("int main(){ return 3; }\n"),
            runtime_error: Some("#include <stdexcept>\nint main(){ throw std::runtime_error(\"boom\"); }\n"),
            compile_error: Some("int main(){ std::string s = 1; }\n"),
            ..case(
                "cpp",
                "#include <iostream>\nint main(){ std::cout << \"hello, world\" << std::endl; }\n",
            )
        },
        Case {
            echo: Some(
                "public class Main { public static void main(String[] a) throws Exception { System.out.write(System.in.readAllBytes()); System.out.flush(); } }\n",
            ),
            exit3: Some("public class Main { public static void main(String[] a) { System.exit(3); } }\n"),
            runtime_error: Some(
                "public class Main { public static void main(String[] a) { throw new RuntimeException(\"boom\"); } }\n",
            ),
            compile_error: Some("public class Main { public static void main(String[] a) { int x = \"s\"; } }\n"),
            ..case(
                "java",
                "public class Main { public static void main(String[] a) { System.out.println(\"hello, world\"); } }\n",
            )
        },
        Case {
            echo: Some("process.stdout.write(require('fs').readFileSync(0));\n"),
            exit3: Some("process.exit(3);\n"),
            runtime_error: Some("throw new Error('boom');\n"),
            ..case("javascript", "console.log('hello, world');\n")
        },
        Case {
            echo: Some("import * as fs from 'fs';\nprocess.stdout.write(fs.readFileSync(0));\n"),
            exit3: Some("process.exit(3);\n"),
            runtime_error: Some("const f = (): never => { throw new Error('boom'); };\nf();\n"),
            ..case("typescript", "const s: string = 'hello, world';\nconsole.log(s);\n")
        },
        Case {
            echo: Some("package main\nimport (\"io\"; \"os\")\nfunc main(){ io.Copy(os.Stdout, os.Stdin) }\n"),
            exit3: Some("package main\nimport \"os\"\nfunc main(){ os.Exit(3) }\n"),
            runtime_error: Some("package main\nfunc main(){ var a []int; _ = a[5] }\n"),
            compile_error: Some("package main\nfunc main(){ x := 1 }\n"),
            ..case(
                "go",
                "package main\nimport \"fmt\"\nfunc main(){ fmt.Println(\"hello, world\") }\n",
            )
        },
        Case {
            echo: Some(
                "use std::io::{Read, Write};\nfn main(){ let mut s = Vec::new(); std::io::stdin().read_to_end(&mut s).unwrap(); std::io::stdout().write_all(&s).unwrap(); }\n",
            ),
            exit3: Some("fn main(){ std::process::exit(3); }\n"),
            runtime_error: Some("fn main(){ let v: Vec<i32> = vec![]; println!(\"{}\", v[1]); }\n"),
            compile_error: Some("fn main(){ let x: i32 = \"s\"; }\n"),
            ..case("rust", "fn main(){ println!(\"hello, world\"); }\n")
        },
        Case {
            echo: Some("cat\n"),
            exit3: Some("exit 3\n"),
            runtime_error: Some("set -e\nfalse\necho unreachable\n"),
            ..case("bash", "echo 'hello, world'\n")
        },
        Case {
            echo: Some("print STDIN.read\n"),
            exit3: Some("exit 3\n"),
            runtime_error: Some("raise 'boom'\n"),
            ..case("ruby", "puts 'hello, world'\n")
        },
        Case {
            echo: Some("<?php echo stream_get_contents(STDIN);\n"),
            exit3: Some("<?php exit(3);\n"),
            runtime_error: Some("<?php throw new Exception('boom');\n"),
            ..case("php", "<?php echo \"hello, world\\n\";\n")
        },
        Case {
            echo: Some("print while <STDIN>;\n"),
            exit3: Some("exit 3;\n"),
            runtime_error: Some("die 'boom';\n"),
            ..case("perl", "print \"hello, world\\n\";\n")
        },
        Case {
            echo: Some("io.write(io.read('a'))\n"),
            exit3: Some("os.exit(3)\n"),
            runtime_error: Some("error('boom')\n"),
            ..case("lua", "print('hello, world')\n")
        },
        Case {
            echo: Some("x <- readLines(file('stdin'))\ncat(paste0(x, '\\n'), sep = '')\n"),
            exit3: Some("quit(status = 3)\n"),
            runtime_error: Some("stop('boom')\n"),
            ..case("r", "cat('hello, world\\n')\n")
        },
        Case {
            echo: Some("using System;\nclass P { static void Main() { Console.Write(Console.In.ReadToEnd()); } }\n"),
            exit3: Some("using System;\nclass P { static void Main() { Environment.Exit(3); } }\n"),
            runtime_error: Some("using System;\nclass P { static void Main() { throw new Exception(\"boom\"); } }\n"),
            compile_error: Some("class P { static void Main() { int x = \"s\"; } }\n"),
            ..case(
                "csharp",
                "using System;\nclass P { static void Main() { Console.WriteLine(\"hello, world\"); } }\n",
            )
        },
        Case {
            echo: Some(
                "import std.stdio;\nvoid main(){ foreach (ubyte[] b; stdin.byChunk(4096)) stdout.rawWrite(b); }\n",
            ),
            exit3: Some("import core.stdc.stdlib;\nvoid main(){ exit(3); }\n"),
            runtime_error: Some("void main(){ throw new Exception(\"boom\"); }\n"),
            compile_error: Some("void main(){ int x = \"s\"; }\n"),
            ..case("d", "import std.stdio;\nvoid main(){ writeln(\"hello, world\"); }\n")
        },
        Case {
            echo: Some(
                "#lang racket/base\n(require racket/port)\n(void (write-string (port->string (current-input-port))))\n",
            ),
            exit3: Some("#lang racket/base\n(exit 3)\n"),
            runtime_error: Some("#lang racket/base\n(error \"boom\")\n"),
            ..case("racket", "#lang racket/base\n(displayln \"hello, world\")\n")
        },
        Case {
            compile_error: Some("module main; initial begin x = ; end endmodule\n"),
            ..case(
                "verilog",
                "module main; initial begin $display(\"hello, world\"); $finish; end endmodule\n",
            )
        },
        Case {
            runtime_error: Some("SELECT * FROM no_such_table;\n"),
            ..case("sql", "SELECT 'hello, world';\n")
        },
        Case {
            echo: Some("object Main { def main(a: Array[String]): Unit = print(scala.io.Source.stdin.mkString) }\n"),
            exit3: Some("object Main { def main(a: Array[String]): Unit = sys.exit(3) }\n"),
            runtime_error: Some(
                "object Main { def main(a: Array[String]): Unit = throw new RuntimeException(\"boom\") }\n",
            ),
            compile_error: Some("object Main { def main(a: Array[String]): Unit = { val x: Int = \"s\" } }\n"),
            ..case(
                "scala",
                "object Main { def main(a: Array[String]): Unit = println(\"hello, world\") }\n",
            )
        },
        Case {
            echo: Some("fun main() { System.out.write(System.`in`.readBytes()); System.out.flush() }\n"),
            exit3: Some("fun main() { kotlin.system.exitProcess(3) }\n"),
            runtime_error: Some("fun main() { throw RuntimeException(\"boom\") }\n"),
            compile_error: Some("fun main() { val x: Int = \"s\" }\n"),
            ..case("kotlin", "fun main() { println(\"hello, world\") }\n")
        },
        Case {
            runtime_error: Some("def test_fails():\n    assert 1 + 1 == 3\n"),
            marker: "1 passed",
            ..case(
                "pytest",
                "def test_ok():\n    print('hello, world')\n    assert 1 + 1 == 2\n",
            )
        },
        Case {
            runtime_error: Some("#[test]\nfn bad() { assert_eq!(1 + 1, 3); }\n"),
            compile_error: Some("#[test]\nfn bad() { let x: i32 = \"s\"; }\n"),
            marker: "test result: ok",
            ..case("rust_test", "#[test]\nfn ok() { assert_eq!(1 + 1, 2); }\n")
        },
        Case {
            runtime_error: Some("package main\nimport \"testing\"\nfunc TestBad(t *testing.T){ t.Fatal(\"boom\") }\n"),
            marker: "ok",
            ..case(
                "go_test",
                "package main\nimport (\"fmt\"; \"testing\")\nfunc TestOk(t *testing.T){ fmt.Println(\"hello, world\") }\n",
            )
        },
        Case {
            runtime_error: Some(
                "import org.junit.Test;\nimport static org.junit.Assert.*;\npublic class MainTest { @Test public void bad() { assertEquals(3, 1 + 1); } }\n",
            ),
            compile_error: Some("public class MainTest { int x = \"s\"; }\n"),
            ..case(
                "junit",
                "import org.junit.Test;\nimport static org.junit.Assert.*;\npublic class MainTest { @Test public void ok() { System.out.println(\"hello, world\"); assertEquals(2, 1 + 1); } }\n",
            )
        },
        Case {
            runtime_error: Some("test('bad', () => { expect(1 + 1).toBe(3); });\n"),
            // Jest reports on stderr; its exit status is what counts.
            marker: "",
            ..case(
                "jest",
                "test('ok', () => { console.log('hello, world'); expect(1 + 1).toBe(2); });\n",
            )
        },
    ]
}

/// Languages that must be available where the tests run (CI installs them).
fn required() -> Vec<String> {
    match std::env::var("SANDPOOL_REQUIRED_LANGUAGES") {
        Ok(v) => v.split(',').filter(|s| !s.is_empty()).map(str::to_owned).collect(),
        Err(_) => ["python", "c", "cpp", "java", "javascript", "go", "rust", "bash"]
            .map(String::from)
            .to_vec(),
    }
}

async fn check(exe: &Executor, c: &Case) -> Vec<String> {
    let mut failures = vec![];
    let run = |code: &'static str, stdin: &'static str| {
        let mut client = exe.client();
        let lang = c.lang;
        async move { client.execute(request(lang, code, stdin)).await.map(|r| r.into_inner()) }
    };
    let mut expect = |what: &str,
                      r: Result<pb::ExecuteResponse, tonic::Status>,
                      ok: &dyn Fn(&pb::ExecuteResponse) -> bool| match r {
        Ok(r) if ok(&r) => {}
        Ok(r) => failures.push(format!("{} {what}: {}", c.lang, describe(&r))),
        Err(s) => failures.push(format!("{} {what}: status {s:?}", c.lang)),
    };
    let r = run(c.hello, "").await;
    expect("hello", r, &|r| {
        r.verdict == pb::Verdict::Ok as i32 && stdout(r).contains(c.marker)
    });
    if let Some(code) = c.echo {
        let r = run(code, "line one\nline two\n").await;
        expect("echo", r, &|r| {
            r.verdict == pb::Verdict::Ok as i32 && stdout(r) == "line one\nline two\n"
        });
    }
    if let Some(code) = c.exit3 {
        let r = run(code, "").await;
        expect("exit 3", r, &|r| {
            r.verdict == pb::Verdict::RuntimeError as i32 && r.run.as_ref().is_some_and(|p| p.exit_code == 3)
        });
    }
    if let Some(code) = c.runtime_error {
        let r = run(code, "").await;
        expect("runtime error", r, &|r| {
            r.verdict == pb::Verdict::RuntimeError as i32
                && r.run.as_ref().is_some_and(|p| p.exit_code != 0 || p.signal != 0)
        });
    }
    if let Some(code) = c.compile_error {
        let r = run(code, "").await;
        expect("compile error", r, &|r| {
            r.verdict == pb::Verdict::CompileError as i32
                && r.run.is_none()
                && r.compile
                    .as_ref()
                    .is_some_and(|p| !p.stderr.is_empty() || !p.stdout.is_empty())
        });
    }
    failures
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_installed_language_runs_its_basic_cases() {
    let exe = Executor::start(Options {
        slots: 2,
        ..Default::default()
    })
    .await;
    let caps = exe.capabilities().await;
    let available: Vec<&pb::LanguageInfo> = caps.languages.iter().filter(|l| l.available).collect();
    for l in &caps.languages {
        println!(
            "{:<12} {}",
            l.name,
            if l.available {
                l.version.clone()
            } else {
                format!("unavailable: {}", l.unavailable_reason)
            }
        );
    }
    for r in required() {
        assert!(
            available.iter().any(|l| l.name == r),
            "required language {r} is not available"
        );
    }
    let cases = cases();
    let runnable: Vec<&Case> = cases
        .iter()
        .filter(|c| available.iter().any(|l| l.name == c.lang))
        .collect();
    for l in &available {
        assert!(
            l.gpu || cases.iter().any(|c| c.lang == l.name),
            "language {} is available but has no test case here",
            l.name
        );
    }
    let failures: Vec<String> = futures::stream::iter(runnable.iter().map(|c| check(&exe, c)))
        .buffer_unordered(4)
        .collect::<Vec<_>>()
        .await
        .concat();
    println!("checked {} languages", runnable.len());
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
