//! The stdio comparison (every mode, any tolerances) and the JSON comparison of function-call
//! tests: never panic; any output matches itself; the modes without tolerance are symmetric.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sandpool_executor::judge::compare::{Comparison, json_matches};
use sandpool_proto::v1::comparison::Mode;

fuzz_target!(|data: &[u8]| {
    if data.len() < 17 {
        return;
    }
    let (head, rest) = data.split_at(17);
    let mode = Mode::try_from(i32::from(head[0] % 5)).unwrap_or(Mode::Unspecified);
    let abs_tol = f64::from_le_bytes(head[1..9].try_into().expect("8 bytes"));
    let rel_tol = f64::from_le_bytes(head[9..17].try_into().expect("8 bytes"));
    let cut = rest.iter().position(|&b| b == 0xff).unwrap_or(rest.len() / 2);
    let (actual, expected) = (&rest[..cut], rest.get(cut + 1..).unwrap_or(&[]));
    let c = Comparison::new(mode, abs_tol, rel_tol);
    let m = c.matches(actual, expected);
    assert!(
        c.matches(actual, actual) && c.matches(expected, expected),
        "not reflexive: {c:?}"
    );
    if !matches!(c, Comparison::Float { .. }) {
        assert_eq!(m, c.matches(expected, actual), "not symmetric: {c:?}");
    }
    if let (Ok(a), Ok(e)) = (
        serde_json::from_slice::<serde_json::Value>(actual),
        serde_json::from_slice::<serde_json::Value>(expected),
    ) {
        let _ = json_matches(&a, &e);
        assert!(json_matches(&a, &a), "JSON value does not match itself: {a}");
    }
});
