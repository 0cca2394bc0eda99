//! Session ids and where a request carries one.
//!
//! A session id names the pod that holds the session (`<32 lowercase hex>-<pod name>`),
//! so the gateway routes session-bound requests without a shared store: the pod name
//! is the backend name.

use http::HeaderMap;

/// The E2B SDK's header naming the sandbox a data-plane request is for.
pub const E2B_SANDBOX_HEADER: &str = "e2b-sandbox-id";
/// Sandpool's own header naming a session, for clients without an E2B path or header.
pub const SESSION_HEADER: &str = "x-sandpool-session";

/// A parsed session id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionId {
    /// The whole id, as the client sent it.
    pub id: String,
    /// The executor (pod) that holds the session.
    pub executor: String,
}

/// Where a request named its session, for the answers that must say so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `E2b-Sandbox-Id`.
    E2bHeader,
    /// `/sandboxes/<id>...` or `/v2/sandboxes/<id>...`: the E2B control plane.
    SandboxPath,
    /// `X-Sandpool-Session`.
    SessionHeader,
}

impl Source {
    /// How the source reads in an error message.
    pub fn describe(self) -> &'static str {
        match self {
            Source::E2bHeader => "header E2b-Sandbox-Id",
            Source::SandboxPath => "path /sandboxes/<id>",
            Source::SessionHeader => "header X-Sandpool-Session",
        }
    }
}

/// A session id that is not one.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{source_name}: {id:?} is not a session id (<32 lowercase hex>-<executor name>)")]
pub struct MalformedId {
    pub source_name: &'static str,
    pub id: String,
}

/// What routing needs to know of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Binding {
    /// Any executor may serve it.
    Stateless,
    /// Only the executor holding this session may; `control` when the path is an E2B
    /// control-plane one (`/sandboxes`, `/v2/sandboxes`), which shapes the "gone" answer.
    Session { id: SessionId, control: bool },
}

/// Parses `<32 lowercase hex>-<executor name>`; the name is a pod name (lowercase
/// alphanumerics, `-` and `.`, starting and ending alphanumeric).
pub fn parse(id: &str) -> Option<SessionId> {
    let (hex, name) = (id.get(..32)?, id.get(32..)?);
    let name = name.strip_prefix('-')?;
    let hex_ok = hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let name_ok = !name.is_empty()
        && name.len() <= 253
        && name.bytes().all(|b| alnum(b) || b == b'-' || b == b'.')
        && name.bytes().next().is_some_and(alnum)
        && name.bytes().last().is_some_and(alnum);
    (hex_ok && name_ok).then(|| SessionId {
        id: id.to_owned(),
        executor: name.to_owned(),
    })
}

/// The id in `/sandboxes/<id>[/...]` or `/v2/sandboxes/<id>/...`, with whether the path is
/// a control-plane one at all (`/sandboxes` alone, a listing, is, but names no session).
fn path_id(path: &str) -> (bool, Option<&str>) {
    let rest = path
        .strip_prefix("/v2/sandboxes")
        .or_else(|| path.strip_prefix("/sandboxes"));
    let Some(rest) = rest else {
        return (false, None);
    };
    match rest.strip_prefix('/') {
        Some(tail) => {
            let id = tail.split('/').next().unwrap_or_default();
            (true, (!id.is_empty()).then_some(id))
        }
        // `/sandboxesfoo` is not ours; `/sandboxes` (and `?query`, already split off) is.
        None => (rest.is_empty(), None),
    }
}

/// Whether `path` is one of the E2B data plane's (the sandbox daemon's and the code
/// interpreter's): the only routes an executor serves by a sandbox named in a header.
pub fn is_data_plane(path: &str) -> bool {
    matches!(path, "/health" | "/files" | "/execute" | "/contexts")
        || ["/contexts/", "/filesystem.Filesystem/", "/process.Process/"]
            .iter()
            .any(|p| path.starts_with(p))
}

/// Whether and to which session `path` and `headers` bind a request. The E2B header wins,
/// then the path, then Sandpool's header.
///
/// A session header binds only a data-plane route (the routes that serve a sandbox named
/// in a header); elsewhere (`/run_code`, a create, Piston, ...) no executor reads it, so it
/// is ignored and the request is spread like any stateless one: a made-up id must not pin
/// work to the executor it names.
pub fn classify(path: &str, headers: &HeaderMap) -> Result<Binding, MalformedId> {
    let (control, in_path) = path_id(path);
    let data_plane = is_data_plane(path);
    let header = |name: &str| {
        headers
            .get(name)
            .filter(|_| data_plane)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
    };
    let found = if let Some(v) = header(E2B_SANDBOX_HEADER) {
        Some((Source::E2bHeader, v))
    } else if let Some(v) = in_path {
        Some((Source::SandboxPath, v.to_owned()))
    } else {
        header(SESSION_HEADER).map(|v| (Source::SessionHeader, v))
    };
    let Some((source, raw)) = found else {
        return Ok(Binding::Stateless);
    };
    match parse(raw.trim()) {
        Some(id) => Ok(Binding::Session { id, control }),
        None => Err(MalformedId {
            source_name: source.describe(),
            id: raw,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "0123456789abcdef0123456789abcdef";

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                http::HeaderName::from_bytes(k.as_bytes()).expect("name"),
                http::HeaderValue::from_str(v).expect("value"),
            );
        }
        h
    }

    #[test]
    fn parses_ids_that_name_a_pod() {
        let id = format!("{HEX}-shared-7f9c-abcde");
        let s = parse(&id).expect("valid");
        assert_eq!(s.executor, "shared-7f9c-abcde");
        assert_eq!(s.id, id);
        assert_eq!(parse(&format!("{HEX}-a.b-c")).map(|s| s.executor), Some("a.b-c".into()));
    }

    #[test]
    fn refuses_what_is_not_an_id() {
        for bad in [
            "".to_string(),
            HEX.to_string(),
            format!("{HEX}-"),
            format!("{HEX}pod"),
            format!("{}-pod", HEX.to_uppercase()),
            format!("{}-pod", &HEX[..31]),
            format!("{HEX}-Pod"),
            format!("{HEX}--pod"),
            format!("{HEX}-pod-"),
            format!("{HEX}-po d"),
            format!("{HEX}-pöd"),
            "é".repeat(40),
        ] {
            assert_eq!(parse(&bad), None, "{bad:?}");
        }
    }

    #[test]
    fn finds_the_session_in_each_form() {
        let id = format!("{HEX}-pod-1");
        let want = |control| {
            Ok(Binding::Session {
                id: parse(&id).expect("valid"),
                control,
            })
        };
        assert_eq!(classify("/files", &headers(&[("E2b-Sandbox-Id", &id)])), want(false));
        assert_eq!(
            classify("/process.Process/Start", &headers(&[("E2b-Sandbox-Id", &id)])),
            want(false)
        );
        assert_eq!(
            classify("/execute", &headers(&[("X-Sandpool-Session", &id)])),
            want(false)
        );
        assert_eq!(classify(&format!("/sandboxes/{id}"), &HeaderMap::new()), want(true));
        assert_eq!(
            classify(&format!("/sandboxes/{id}/timeout"), &HeaderMap::new()),
            want(true)
        );
        assert_eq!(
            classify(&format!("/v2/sandboxes/{id}/logs"), &HeaderMap::new()),
            want(true)
        );
    }

    #[test]
    fn stateless_requests_bind_to_nothing() {
        for path in [
            "/run_code",
            "/sandboxes",
            "/v2/sandboxes",
            "/sandboxes/",
            "/sandboxesx/y",
            "/",
        ] {
            assert_eq!(classify(path, &HeaderMap::new()), Ok(Binding::Stateless), "{path}");
        }
    }

    #[test]
    fn session_headers_bind_only_the_data_plane() {
        // A made-up id on a stateless route pins nothing: the executors ignore the header there.
        let id = format!("{HEX}-pod-1");
        for path in [
            "/run_code",
            "/common_evaluate_batch",
            "/api/v2/execute",
            "/v1/ping",
            "/sandboxes",
        ] {
            for h in ["E2b-Sandbox-Id", "X-Sandpool-Session"] {
                assert_eq!(
                    classify(path, &headers(&[(h, &id)])),
                    Ok(Binding::Stateless),
                    "{path} {h}"
                );
                assert_eq!(
                    classify(path, &headers(&[(h, "nope")])),
                    Ok(Binding::Stateless),
                    "{path} {h}"
                );
            }
        }
        assert!(is_data_plane("/contexts/x/restart") && is_data_plane("/filesystem.Filesystem/Stat"));
        assert!(!is_data_plane("/filesx") && !is_data_plane("/executer"));
    }

    #[test]
    fn malformed_ids_name_where_they_were() {
        let e = classify("/files", &headers(&[("E2b-Sandbox-Id", "nope")])).expect_err("malformed");
        assert!(e.to_string().contains("E2b-Sandbox-Id"), "{e}");
        let e = classify("/sandboxes/nope/pause", &HeaderMap::new()).expect_err("malformed");
        assert!(e.to_string().contains("path"), "{e}");
        let e = classify("/execute", &headers(&[("X-Sandpool-Session", "nope")])).expect_err("malformed");
        assert!(e.to_string().contains("X-Sandpool-Session"), "{e}");
    }

    #[test]
    fn on_the_control_plane_the_path_binds_not_a_header() {
        // The executor serves `/sandboxes/<id>` by the path's id; a header there means nothing.
        let a = format!("{HEX}-pod-a");
        let b = format!("{HEX}-pod-b");
        let got = classify(&format!("/sandboxes/{b}"), &headers(&[("E2b-Sandbox-Id", &a)]));
        assert_eq!(
            got,
            Ok(Binding::Session {
                id: parse(&b).expect("valid"),
                control: true
            })
        );
    }
}
