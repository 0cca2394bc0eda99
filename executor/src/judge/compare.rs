//! How a program's output is compared with the expected one.

use sandpool_proto::v1::comparison::Mode;

/// Tolerances used by FLOAT when the request leaves both at zero.
pub const DEFAULT_TOLERANCE: f64 = 1e-6;

/// A resolved stdio comparison.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Comparison {
    Exact,
    IgnoreTrailingWhitespace,
    Tokens,
    Float { abs_tol: f64, rel_tol: f64 },
}

impl Comparison {
    /// From the request's fields; both tolerances zero means [`DEFAULT_TOLERANCE`].
    pub fn new(mode: Mode, abs_tol: f64, rel_tol: f64) -> Self {
        match mode {
            Mode::Exact => Comparison::Exact,
            Mode::Unspecified | Mode::IgnoreTrailingWhitespace => Comparison::IgnoreTrailingWhitespace,
            Mode::Tokens => Comparison::Tokens,
            Mode::Float if abs_tol == 0.0 && rel_tol == 0.0 => Comparison::Float {
                abs_tol: DEFAULT_TOLERANCE,
                rel_tol: DEFAULT_TOLERANCE,
            },
            Mode::Float => Comparison::Float { abs_tol, rel_tol },
        }
    }

    /// True when `actual` matches `expected`.
    pub fn matches(&self, actual: &[u8], expected: &[u8]) -> bool {
        match self {
            Comparison::Exact => actual == expected,
            Comparison::IgnoreTrailingWhitespace => trimmed_lines(actual).eq(trimmed_lines(expected)),
            Comparison::Tokens => tokens(actual).eq(tokens(expected)),
            Comparison::Float { abs_tol, rel_tol } => {
                let (a, e): (Vec<_>, Vec<_>) = (tokens(actual).collect(), tokens(expected).collect());
                a.len() == e.len() && a.iter().zip(&e).all(|(a, e)| token_matches(a, e, *abs_tol, *rel_tol))
            }
        }
    }
}

/// Lines without trailing whitespace (and "\r"), trailing blank lines dropped.
fn trimmed_lines(b: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut lines: Vec<&[u8]> = b.split(|c| *c == b'\n').map(|l| l.trim_ascii_end()).collect();
    while lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    lines.into_iter()
}

fn tokens(b: &[u8]) -> impl Iterator<Item = &[u8]> {
    b.split(|c| c.is_ascii_whitespace()).filter(|t| !t.is_empty())
}

fn token_matches(a: &[u8], e: &[u8], abs_tol: f64, rel_tol: f64) -> bool {
    if a == e {
        return true;
    }
    match (parse_f64(a), parse_f64(e)) {
        (Some(a), Some(e)) => floats_close(a, e, abs_tol, rel_tol),
        _ => false,
    }
}

fn parse_f64(t: &[u8]) -> Option<f64> {
    std::str::from_utf8(t).ok()?.parse::<f64>().ok()
}

/// `a` is within `abs_tol` of `e`, or within `rel_tol` relative to `e`.
pub fn floats_close(a: f64, e: f64, abs_tol: f64, rel_tol: f64) -> bool {
    if a.is_nan() || e.is_nan() {
        return false;
    }
    if a == e {
        return true;
    }
    let d = (a - e).abs();
    d <= abs_tol || d <= rel_tol * e.abs()
}

/// Function-call results: JSON equality, numbers within 1e-9 relative; an
/// expected one-element array also matches its element (ScaleBox's `[[output]]` shape).
pub fn json_matches(actual: &serde_json::Value, expected: &serde_json::Value) -> bool {
    json_eq(actual, expected)
        || matches!(expected, serde_json::Value::Array(v) if v.len() == 1 && json_eq(actual, &v[0]))
}

fn json_eq(a: &serde_json::Value, e: &serde_json::Value) -> bool {
    use serde_json::Value as V;
    match (a, e) {
        (V::Number(x), V::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(x), Some(y)) => x == y,
            _ => match (x.as_f64(), y.as_f64()) {
                (Some(x), Some(y)) => floats_close(x, y, 0.0, 1e-9),
                _ => x == y,
            },
        },
        (V::Array(x), V::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(x, y)| json_eq(x, y)),
        (V::Object(x), V::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn default_ignores_trailing_whitespace_only() {
        let c = Comparison::new(Mode::Unspecified, 0.0, 0.0);
        assert!(c.matches(b"3 \r\n7\n\n\n", b"3\n7"));
        assert!(!c.matches(b"3\n 7\n", b"3\n7"));
        assert!(!c.matches(b"3\n\n7\n", b"3\n7"));
        assert!(!c.matches(b"", b"3"));
    }

    #[test]
    fn exact_and_tokens() {
        assert!(!Comparison::Exact.matches(b"3\n", b"3"));
        assert!(Comparison::Exact.matches(b"3\n", b"3\n"));
        assert!(Comparison::Tokens.matches(b"1   2\n\n3", b"1 2 3\n"));
        assert!(!Comparison::Tokens.matches(b"1 2", b"1 2 3"));
    }

    #[test]
    fn float_tolerances() {
        let c = Comparison::new(Mode::Float, 0.0, 0.0);
        assert!(c.matches(b"0.3333333\nabc", b"0.333333333333 abc"));
        assert!(!c.matches(b"0.3334", b"0.3333333"));
        assert!(!c.matches(b"0.3333333 abd", b"0.333333333333 abc"));
        assert!(!c.matches(b"nan", b"1.0"));
        let rel = Comparison::new(Mode::Float, 0.0, 1e-3);
        assert!(rel.matches(b"1000000.5", b"1000000"));
        assert!(!rel.matches(b"0.002", b"0.001"));
        assert!(!c.matches(b"1 2", b"1"));
    }

    #[test]
    fn json_results() {
        assert!(json_matches(&json!(3), &json!([3])));
        assert!(json_matches(&json!([1, 2]), &json!([1, 2])));
        assert!(json_matches(&json!(0.1 + 0.2), &json!(0.3)));
        assert!(!json_matches(&json!(4), &json!([3])));
        assert!(!json_matches(&json!("3"), &json!(3)));
        assert!(!json_matches(&json!({"a": 1}), &json!({"a": 1, "b": 2})));
        assert!(json_matches(&json!({"a": [1.0]}), &json!({"a": [1]})));
    }
}
