//! The HTTP API's JSON: request bodies of /run_code and /common_evaluate_batch into their
//! types, and any phase result (decoded from protobuf, as the engine could produce it) into
//! SandboxFusion's response shapes, which must serialize to JSON that parses back.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prost::Message;
use sandpool_executor::http::run_code::{RunCodeRequest, seconds_to_ms};
use sandpool_executor::http::scalebox::EvaluateBody;
use sandpool_executor::http::shapes::{RunResponse, command_result, run_status};
use sandpool_proto::v1 as pb;

fuzz_target!(|data: &[u8]| {
    let Some((&which, bytes)) = data.split_first() else {
        return;
    };
    match which % 3 {
        0 => {
            if let Ok(r) = serde_json::from_slice::<RunCodeRequest>(bytes) {
                let _ = seconds_to_ms(r.run_timeout, 60_000);
                let _ = seconds_to_ms(r.compile_timeout, 60_000);
            }
        }
        1 => {
            let _ = serde_json::from_slice::<EvaluateBody>(bytes);
        }
        _ => {
            let Ok(r) = pb::ExecuteResponse::decode(bytes) else {
                return;
            };
            let resp = RunResponse {
                status: run_status(r.compile.as_ref(), r.run.as_ref()),
                message: r.message.clone(),
                compile_result: r.compile.as_ref().map(command_result),
                run_result: r.run.as_ref().map(command_result),
                executor_pod_name: None,
                files: Default::default(),
                executor_isolation: None,
                executor_toolchain: None,
                executor_cached: r.cached,
            };
            let json = serde_json::to_string(&resp).expect("serializes");
            serde_json::from_str::<serde_json::Value>(&json).expect("valid JSON");
        }
    }
});
