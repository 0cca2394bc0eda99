//! Protobuf ExecuteRequest / EvaluateRequest bytes, as the gRPC layer receives them, into the
//! executor's validation: file paths, limits, and the judge's program assembly (which runs the
//! Markdown extraction and every test kind's checks). Any outcome but a panic is fine; an error
//! must name a field.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prost::Message;
use sandpool_executor::engine::Engine;
use sandpool_executor::judge::program;
use sandpool_executor::languages::{BUILTIN, LanguageTable};
use sandpool_executor::limits::{LimitPolicy, Limits};
use sandpool_proto::v1 as pb;
use std::sync::OnceLock;
use std::time::Duration;

fn table() -> &'static LanguageTable {
    static T: OnceLock<LanguageTable> = OnceLock::new();
    T.get_or_init(|| LanguageTable::parse(BUILTIN).expect("the built-in table parses"))
}

fn policy() -> LimitPolicy {
    let l = |s: u64, m: u64| Limits {
        wall: Duration::from_secs(s),
        cpu: Duration::from_secs(s),
        memory: m << 20,
        output: 8 << 20,
        processes: 256,
        file_size: 64 << 20,
    };
    LimitPolicy {
        run_defaults: l(10, 512),
        compile_defaults: l(30, 2048),
        max: l(60, 4096),
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, bytes)) = data.split_first() else {
        return;
    };
    let p = policy();
    if which & 1 == 0 {
        let Ok(req) = pb::ExecuteRequest::decode(bytes) else {
            return;
        };
        let _ = Engine::validate_files(&req.files, "files");
        if let Err(e) = p.resolve(req.limits.as_ref(), &p.run_defaults, "limits") {
            assert!(e.field.starts_with("limits"), "{e:?}");
        }
        let _ = p.resolve(req.compile_limits.as_ref(), &p.compile_defaults, "compile_limits");
        let _ = table().get(&req.language);
    } else {
        let Ok(req) = pb::EvaluateRequest::decode(bytes) else {
            return;
        };
        if let Some(o) = &req.options {
            let _ = Engine::validate_files(&o.files, "options.files");
            let _ = p.resolve(o.run_limits.as_ref(), &p.run_defaults, "options.run_limits");
        }
        // The request's language if the table has it, else each of a few built-ins.
        let langs: Vec<_> = match table().get(&req.language) {
            Some(l) => vec![l],
            None => ["python", "cpp", "java", "go", "javascript"]
                .iter()
                .filter_map(|n| table().get(n))
                .collect(),
        };
        for lang in langs {
            let _ = program::build(&req, lang, true);
            let _ = lang.for_code(&req.completion);
        }
    }
});
