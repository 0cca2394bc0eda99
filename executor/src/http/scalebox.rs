//! ScaleBox's `POST /common_evaluate_batch`: judge one completion, mapped onto
//! the judge's `EvaluateRequest` and back.

use super::run_code::time_limits;
use super::shapes::{RunResponse, command_result, run_status};
use crate::call::Call;
use crate::engine::Engine;
use crate::error::ExecError;
use crate::judge::Judge;
use crate::judge::evaluate::SKIPPED_AT_TOTAL_TIMEOUT;
use sandpool_proto::v1 as pb;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The request body.
#[derive(Debug, Deserialize)]
pub struct EvaluateBody {
    #[serde(default)]
    pub id: Option<Value>,
    pub completion: String,
    pub config: Config,
}

/// `config`.
#[derive(Debug, Deserialize)]
pub struct Config {
    pub language: String,
    #[serde(default)]
    pub compile_timeout: Option<f64>,
    #[serde(default)]
    pub run_timeout: Option<f64>,
    pub provided_data: ProvidedData,
    #[serde(default)]
    pub extra: Extra,
}

/// `config.provided_data`.
#[derive(Debug, Deserialize)]
pub struct ProvidedData {
    pub test_cases: TestCases,
}

/// `config.provided_data.test_cases`.
#[derive(Debug, Deserialize)]
pub struct TestCases {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub input: Vec<Value>,
    #[serde(default)]
    pub output: Vec<Value>,
    #[serde(default)]
    pub fn_name: Option<String>,
    #[serde(default)]
    pub json_input: Option<bool>,
    /// assert: HumanEval's test code.
    #[serde(default)]
    pub test: Option<String>,
    /// assert: MultiPL-E's test code.
    #[serde(default)]
    pub tests: Option<String>,
    #[serde(default)]
    pub entry_point: Option<String>,
    #[serde(default)]
    pub stop_tokens: Vec<String>,
}

/// `config.extra`.
#[derive(Debug, Default, Deserialize)]
pub struct Extra {
    #[serde(default)]
    pub run_all_cases: Option<bool>,
    /// Seconds.
    #[serde(default)]
    pub total_timeout: Option<f64>,
    #[serde(default)]
    pub special_judge_program: Option<String>,
    #[serde(default)]
    pub special_judge_language: Option<String>,
}

/// The response body.
#[derive(Debug, Serialize)]
pub struct EvaluateReply {
    pub id: Value,
    pub accepted: bool,
    pub extracted_code: String,
    pub full_code: Option<String>,
    pub test_code: Option<String>,
    pub tests: Vec<TestReply>,
    pub extracted_type: Option<String>,
    pub extra: Option<Value>,
}

/// One entry of `tests`.
#[derive(Debug, Serialize)]
pub struct TestReply {
    pub passed: bool,
    pub exec_info: RunResponse,
    pub test_info: Option<Value>,
}

/// ScaleBox's default total_timeout, seconds.
const DEFAULT_TOTAL_TIMEOUT_S: f64 = 300.0;

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Maps the body onto an `EvaluateRequest`.
pub fn to_request(engine: &Engine, body: &EvaluateBody) -> Result<pb::EvaluateRequest, ExecError> {
    let tc = &body.config.provided_data.test_cases;
    let field = "config.provided_data.test_cases";
    let tests = match tc.kind.as_str() {
        "stdin_stdout" => {
            if tc.input.len() != tc.output.len() {
                return Err(ExecError::invalid(field, "input and output differ in length"));
            }
            pb::evaluate_request::Tests::Stdio(pb::StdioTests {
                cases: tc
                    .input
                    .iter()
                    .zip(&tc.output)
                    .map(|(i, o)| pb::StdioCase {
                        stdin: text(i).into_bytes(),
                        expected_stdout: text(o).into_bytes(),
                    })
                    .collect(),
                comparison: None,
            })
        }
        "function_call" => {
            if tc.input.len() != tc.output.len() {
                return Err(ExecError::invalid(field, "input and output differ in length"));
            }
            let json_input = tc.json_input.unwrap_or(false);
            let as_json = |v: &Value| match (json_input, v) {
                // json_input: strings hold JSON text already (one value per line for inputs).
                (true, Value::String(s)) => s.clone(),
                (_, v) => v.to_string(),
            };
            pb::evaluate_request::Tests::FunctionCall(pb::FunctionCallTests {
                fn_name: tc.fn_name.clone().unwrap_or_default(),
                cases: tc
                    .input
                    .iter()
                    .zip(&tc.output)
                    .map(|(i, o)| pb::FunctionCase {
                        arguments_json: as_json(i),
                        expected_json: as_json(o),
                    })
                    .collect(),
                json_input,
            })
        }
        "assert" => pb::evaluate_request::Tests::Assert(pb::AssertTests {
            test_code: tc.tests.clone().or_else(|| tc.test.clone()).unwrap_or_default(),
            entry_point: tc.entry_point.clone().unwrap_or_default(),
            stop_tokens: tc.stop_tokens.clone(),
            ..Default::default()
        }),
        other => {
            return Err(ExecError::invalid(
                format!("{field}.type"),
                format!("unknown type {other:?}; expected stdin_stdout, function_call or assert"),
            ));
        }
    };
    let extra = &body.config.extra;
    let special_judge = extra.special_judge_program.as_ref().map(|code| pb::SpecialJudge {
        language: extra.special_judge_language.clone().unwrap_or_else(|| "python".into()),
        code: code.clone(),
    });
    let total_s = extra.total_timeout.unwrap_or(DEFAULT_TOTAL_TIMEOUT_S);
    Ok(pb::EvaluateRequest {
        id: body.id.as_ref().map(text).unwrap_or_default(),
        language: body.config.language.clone(),
        completion: body.completion.clone(),
        tests: Some(tests),
        special_judge,
        options: Some(pb::EvaluateOptions {
            compile_limits: time_limits(engine, body.config.compile_timeout),
            run_limits: time_limits(engine, body.config.run_timeout),
            total_timeout_ms: super::run_code::seconds_to_ms(Some(total_s), u64::MAX),
            run_all_cases: extra.run_all_cases.unwrap_or(false),
            ..Default::default()
        }),
        cache: pb::CachePolicy::Default as i32,
        // The call's (X-Sandpool-Priority) stands.
        priority: 0,
    })
}

/// Names a limit's field as this API does (`config.run_timeout`, not `options.run_limits.wall_time_ms`).
fn scalebox_field(e: ExecError) -> ExecError {
    match e {
        ExecError::InvalidArgument { field, message } => {
            let field = if field.starts_with("options.run_limits.") {
                "config.run_timeout".to_owned()
            } else if field.starts_with("options.compile_limits.") {
                "config.compile_timeout".to_owned()
            } else {
                field
            };
            ExecError::InvalidArgument { field, message }
        }
        e => e,
    }
}

/// Judges `body`.
pub async fn evaluate(judge: &Judge, body: EvaluateBody, call: Call) -> Result<EvaluateReply, ExecError> {
    let req = to_request(judge.engine(), &body)?;
    let kind = body.config.provided_data.test_cases.kind.clone();
    let resp = judge.evaluate(req, call).await.map_err(scalebox_field)?;
    let tc = &body.config.provided_data.test_cases;
    let pod = resp.executor.as_ref().map(|e| e.name.clone());
    let mut tests = Vec::new();
    for t in &resp.tests {
        let v = pb::Verdict::try_from(t.verdict).unwrap_or(pb::Verdict::SandboxError);
        let i = t.index as usize;
        let total_timeout = v == pb::Verdict::Skipped && t.message == SKIPPED_AT_TOTAL_TIMEOUT;
        let compiled = resp
            .compile
            .as_ref()
            .is_none_or(|c| c.verdict == pb::Verdict::Ok as i32);
        if v == pb::Verdict::Skipped && !total_timeout && compiled {
            // Skipped after an earlier failure: ScaleBox lists only the tests it ran.
            continue;
        }
        let exec_info = if total_timeout {
            RunResponse {
                status: "SandboxError",
                message: "Total Timeout".into(),
                compile_result: None,
                run_result: None,
                executor_pod_name: pod.clone(),
                files: Default::default(),
                executor_isolation: resp.executor.as_ref().map(|e| e.isolation.clone()),
                executor_toolchain: resp.executor.as_ref().map(|e| e.toolchain.clone()),
                executor_cached: resp.cached,
            }
        } else {
            let status = match v {
                pb::Verdict::SandboxError => "SandboxError",
                _ => run_status(resp.compile.as_ref(), t.run.as_ref()),
            };
            RunResponse {
                status,
                message: if v == pb::Verdict::SandboxError {
                    t.message.clone()
                } else {
                    String::new()
                },
                compile_result: resp.compile.as_ref().map(command_result),
                run_result: t.run.as_ref().map(command_result),
                executor_pod_name: pod.clone(),
                files: Default::default(),
                executor_isolation: resp.executor.as_ref().map(|e| e.isolation.clone()),
                executor_toolchain: resp.executor.as_ref().map(|e| e.toolchain.clone()),
                executor_cached: resp.cached,
            }
        };
        let test_info = if total_timeout {
            None
        } else {
            match kind.as_str() {
                "stdin_stdout" => Some(serde_json::json!({
                    "input": {"stdin": tc.input.get(i).map(text).unwrap_or_default()},
                    "output": {"stdout": tc.output.get(i).map(text).unwrap_or_default()},
                })),
                "function_call" => Some(serde_json::json!({
                    "type": "function_call",
                    "fn_name": tc.fn_name,
                    "input": tc.input.get(i),
                    "output": tc.output.get(i),
                })),
                _ => None,
            }
        };
        tests.push(TestReply {
            passed: t.passed,
            exec_info,
            test_info,
        });
    }
    let full_code = (kind != "stdin_stdout").then(|| resp.full_code.clone());
    Ok(EvaluateReply {
        id: body.id.unwrap_or(Value::from(0)),
        accepted: resp.accepted,
        extracted_code: resp.extracted_code,
        full_code,
        test_code: None,
        tests,
        extracted_type: None,
        extra: None,
    })
}
