//! The session tools' arguments and results (create_session, run_in_session,
//! write_file, read_file, close_session).

use super::tools::{LimitArgs, Outcome};
use base64::Engine as _;
use sandpool_proto::v1 as pb;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How a file's `content` is written.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub enum Encoding {
    /// Text, stored as UTF-8.
    #[default]
    #[serde(rename = "utf-8")]
    Utf8,
    /// Bytes, base64-encoded (standard alphabet, padded).
    #[serde(rename = "base64")]
    Base64,
}

/// A file to write into the session's /work.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileArg {
    /// Path relative to /work: no "..", no leading "/".
    pub path: String,
    /// The file's content, in `encoding`.
    pub content: String,
    /// How `content` is encoded.
    #[serde(default)]
    pub encoding: Encoding,
    /// Make the file executable.
    #[serde(default)]
    pub executable: bool,
}

/// `content` as bytes; `field` names it in the error.
fn decode(content: String, encoding: Encoding, field: &str) -> Result<Vec<u8>, String> {
    match encoding {
        Encoding::Utf8 => Ok(content.into_bytes()),
        Encoding::Base64 => base64::engine::general_purpose::STANDARD
            .decode(content.as_bytes())
            .map_err(|e| format!("`{field}`: not base64: {e}")),
    }
}

impl FileArg {
    /// The file; `field` names it (e.g. `files[0]`) in errors.
    fn into_proto(self, field: &str) -> Result<pb::File, String> {
        Ok(pb::File {
            content: decode(self.content, self.encoding, &format!("{field}.content"))?,
            path: self.path,
            executable: self.executable,
        })
    }
}

/// Totals for a whole session. The executor refuses values above its ceilings.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionLimitArgs {
    /// Absolute lifetime from creation, milliseconds.
    #[schemars(range(min = 1))]
    pub lifetime_ms: Option<u64>,
    /// The session ends after this long without a call, milliseconds.
    #[schemars(range(min = 1))]
    pub idle_timeout_ms: Option<u64>,
    /// run_in_session calls allowed in all.
    #[schemars(range(min = 1))]
    pub max_calls: Option<u32>,
    /// Memory of the session's processes together, bytes.
    #[schemars(range(min = 1))]
    pub memory_bytes: Option<u64>,
    /// CPU time of all calls together, milliseconds.
    #[schemars(range(min = 1))]
    pub cpu_time_ms: Option<u64>,
}

fn nonzero<T: Default + PartialEq + Copy>(field: &str, v: Option<T>) -> Result<T, String> {
    match v {
        Some(n) if n == T::default() => Err(format!("`{field}`: must be at least 1 (leave it out for the default)")),
        Some(n) => Ok(n),
        None => Ok(T::default()),
    }
}

impl SessionLimitArgs {
    fn to_proto(&self) -> Result<pb::SessionLimits, String> {
        Ok(pb::SessionLimits {
            lifetime_ms: nonzero("session_limits.lifetime_ms", self.lifetime_ms)?,
            idle_timeout_ms: nonzero("session_limits.idle_timeout_ms", self.idle_timeout_ms)?,
            max_calls: nonzero("session_limits.max_calls", self.max_calls)?,
            memory_bytes: nonzero("session_limits.memory_bytes", self.memory_bytes)?,
            cpu_time_ms: nonzero("session_limits.cpu_time_ms", self.cpu_time_ms)?,
            disk_bytes: 0,
        })
    }
}

/// Arguments of `create_session`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSessionArgs {
    /// "python": an interpreter whose variables live across calls, like notebook cells;
    /// "bash": each call a fresh shell in the same /work, in the last call's directory.
    pub language: String,
    /// Totals for the whole session; a field left out takes the executor's default.
    #[serde(default)]
    pub session_limits: Option<SessionLimitArgs>,
    /// Default limits of each call; a field left out takes the executor's default.
    #[serde(default)]
    pub call_limits: Option<LimitArgs>,
    /// Files written into /work before the first call.
    #[serde(default)]
    pub files: Vec<FileArg>,
}

impl CreateSessionArgs {
    pub fn into_request(self) -> Result<pb::CreateSessionRequest, String> {
        let files = self
            .files
            .into_iter()
            .enumerate()
            .map(|(i, f)| f.into_proto(&format!("files[{i}]")))
            .collect::<Result<_, _>>()?;
        Ok(pb::CreateSessionRequest {
            language: self.language,
            session_limits: Some(self.session_limits.unwrap_or_default().to_proto()?),
            call_limits: Some(self.call_limits.unwrap_or_default().to_proto("call_limits")?),
            files,
            ..Default::default()
        })
    }
}

/// The session totals in force.
#[derive(Debug, Serialize, JsonSchema)]
pub struct SessionLimitsOut {
    /// Absolute lifetime from creation, milliseconds.
    pub lifetime_ms: u64,
    /// Idle timeout, milliseconds.
    pub idle_timeout_ms: u64,
    /// run_in_session calls allowed in all.
    pub max_calls: u32,
    /// Memory of the session's processes together, bytes.
    pub memory_bytes: u64,
    /// CPU time of all calls together, milliseconds.
    pub cpu_time_ms: u64,
    /// What /work may hold in all, bytes.
    pub disk_bytes: u64,
}

/// The per-call limits in force.
#[derive(Debug, Serialize, JsonSchema)]
pub struct CallLimitsOut {
    /// Wall-clock time, milliseconds.
    pub wall_time_ms: u64,
    /// CPU time, milliseconds.
    pub cpu_time_ms: u64,
    /// Memory, bytes.
    pub memory_bytes: u64,
    /// Output kept per stream, bytes.
    pub output_bytes: u64,
}

/// What `create_session` made.
#[derive(Debug, Serialize, JsonSchema)]
pub struct SessionCreated {
    /// The session's id: pass it to the other session tools.
    pub session_id: String,
    /// The language's canonical name.
    pub language: String,
    pub session_limits: SessionLimitsOut,
    pub call_limits: CallLimitsOut,
}

impl SessionCreated {
    pub fn from_response(r: pb::CreateSessionResponse) -> SessionCreated {
        let s = r.session_limits.unwrap_or_default();
        let c = r.call_limits.unwrap_or_default();
        SessionCreated {
            session_id: r.session_id,
            language: r.language,
            session_limits: SessionLimitsOut {
                lifetime_ms: s.lifetime_ms,
                idle_timeout_ms: s.idle_timeout_ms,
                max_calls: s.max_calls,
                memory_bytes: s.memory_bytes,
                cpu_time_ms: s.cpu_time_ms,
                disk_bytes: s.disk_bytes,
            },
            call_limits: CallLimitsOut {
                wall_time_ms: c.wall_time_ms,
                cpu_time_ms: c.cpu_time_ms,
                memory_bytes: c.memory_bytes,
                output_bytes: c.output_bytes,
            },
        }
    }
}

/// Arguments of `run_in_session`: exactly one of `code` and `command`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunInSessionArgs {
    /// The id create_session returned.
    pub session_id: String,
    /// Code in the session's language. Python runs it like a notebook cell: variables
    /// persist, and the value of a final expression comes back in `display`.
    #[serde(default)]
    pub code: Option<String>,
    /// A shell command (bash -c), run in /work with the session's files.
    #[serde(default)]
    pub command: Option<String>,
    /// Text fed to the call's standard input.
    #[serde(default)]
    pub stdin: String,
    /// This call's limits; a field left out takes the session's call limits.
    #[serde(default)]
    pub limits: Option<LimitArgs>,
}

impl RunInSessionArgs {
    pub fn into_request(self) -> Result<pb::RunInSessionRequest, String> {
        use pb::run_in_session_request::Input;
        let input = match (self.code, self.command) {
            (Some(code), None) => Input::Code(code),
            (None, Some(command)) => Input::Command(command),
            (Some(_), Some(_)) => return Err("`code`, `command`: give one of them, not both".into()),
            (None, None) => return Err("`code`, `command`: give one of them".into()),
        };
        Ok(pb::RunInSessionRequest {
            session_id: self.session_id,
            input: Some(input),
            stdin: self.stdin.into_bytes(),
            limits: Some(self.limits.unwrap_or_default().to_proto("limits")?),
            ..Default::default()
        })
    }
}

/// What one call in a session did.
#[derive(Debug, Serialize, JsonSchema)]
pub struct SessionRunResult {
    #[serde(flatten)]
    pub outcome: Outcome,
    /// Python: repr() of the final expression's value, when it has one and it is not None.
    pub display: String,
    /// run_in_session calls the session has left.
    pub calls_left: u32,
    /// True when the interpreter restarted during this call (killed at a limit, or exited):
    /// variables are gone, files in /work remain.
    pub state_reset: bool,
    /// The working directory after the call, e.g. /work/src.
    pub cwd: String,
}

impl SessionRunResult {
    pub fn from_response(r: &pb::RunInSessionResponse) -> SessionRunResult {
        SessionRunResult {
            outcome: Outcome::new(r.verdict, &r.result.clone().unwrap_or_default(), &r.message),
            display: r.display.clone(),
            calls_left: r.calls_left,
            state_reset: r.state_reset,
            cwd: r.cwd.clone(),
        }
    }
}

/// Arguments of `write_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteFileArgs {
    /// The id create_session returned.
    pub session_id: String,
    /// Path relative to /work: no "..", no leading "/".
    pub path: String,
    /// The file's content, in `encoding`; an existing file is replaced.
    pub content: String,
    /// How `content` is encoded.
    #[serde(default)]
    pub encoding: Encoding,
    /// Make the file executable.
    #[serde(default)]
    pub executable: bool,
}

impl WriteFileArgs {
    pub fn into_request(self) -> Result<(pb::PutSessionFilesRequest, String), String> {
        let file = pb::File {
            content: decode(self.content, self.encoding, "content")?,
            path: self.path.clone(),
            executable: self.executable,
        };
        Ok((
            pb::PutSessionFilesRequest {
                session_id: self.session_id,
                files: vec![file],
            },
            self.path,
        ))
    }
}

/// What `write_file` wrote.
#[derive(Debug, Serialize, JsonSchema)]
pub struct FileWritten {
    /// The path written, relative to /work.
    pub path: String,
    /// Bytes /work holds after the write.
    pub disk_used_bytes: u64,
}

/// Arguments of `read_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadFileArgs {
    /// The id create_session returned.
    pub session_id: String,
    /// Path relative to /work.
    pub path: String,
}

/// A file read from a session.
#[derive(Debug, Serialize, JsonSchema)]
pub struct FileRead {
    /// The path read, relative to /work.
    pub path: String,
    /// The content: text when it is valid UTF-8, else base64.
    pub content: String,
    /// "utf-8" or "base64": how `content` is encoded.
    pub encoding: Encoding,
    /// The file's size, bytes.
    pub size_bytes: u64,
}

impl FileRead {
    pub fn new(f: pb::File) -> FileRead {
        let size_bytes = f.content.len() as u64;
        let (content, encoding) = match String::from_utf8(f.content) {
            Ok(s) => (s, Encoding::Utf8),
            Err(e) => (
                base64::engine::general_purpose::STANDARD.encode(e.into_bytes()),
                Encoding::Base64,
            ),
        };
        FileRead {
            path: f.path,
            content,
            encoding,
            size_bytes,
        }
    }
}

/// Arguments of `close_session`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CloseSessionArgs {
    /// The id create_session returned.
    pub session_id: String,
}

/// What `close_session` ended.
#[derive(Debug, Serialize, JsonSchema)]
pub struct SessionClosed {
    /// The session's id.
    pub session_id: String,
    /// run_in_session calls the session served.
    pub calls: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_in_session_wants_exactly_one_input() {
        let args = |code: Option<&str>, command: Option<&str>| RunInSessionArgs {
            session_id: "s".into(),
            code: code.map(Into::into),
            command: command.map(Into::into),
            stdin: String::new(),
            limits: None,
        };
        assert!(args(Some("x"), None).into_request().is_ok());
        assert!(args(None, Some("ls")).into_request().is_ok());
        let both = args(Some("x"), Some("ls")).into_request().unwrap_err();
        assert!(both.contains("`code`") && both.contains("not both"), "{both}");
        assert!(args(None, None).into_request().unwrap_err().contains("`command`"));
    }

    #[test]
    fn files_round_trip_text_and_bytes() {
        let f = FileArg {
            path: "a.bin".into(),
            content: "AP8=".into(),
            encoding: Encoding::Base64,
            executable: false,
        };
        let p = f.into_proto("files[0]").unwrap();
        assert_eq!(p.content, [0, 255]);
        let read = FileRead::new(p);
        assert_eq!((read.content.as_str(), read.encoding), ("AP8=", Encoding::Base64));
        let text = FileRead::new(pb::File {
            path: "t".into(),
            content: "héllo".into(),
            executable: false,
        });
        assert_eq!(
            (text.content.as_str(), text.encoding, text.size_bytes),
            ("héllo", Encoding::Utf8, 6)
        );
        let bad = FileArg {
            path: "x".into(),
            content: "!!".into(),
            encoding: Encoding::Base64,
            executable: false,
        };
        assert!(bad.into_proto("files[1]").unwrap_err().contains("`files[1].content`"));
    }
}
