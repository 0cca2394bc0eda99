//! Markdown code extraction from completions: never panics, and what it returns is a part of
//! the completion (never made-up code).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sandpool_executor::judge::extract;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let tags: Vec<String> = ["python", "py", "python3", "cpp", "c++"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let range = text.as_ptr() as usize..=text.as_ptr() as usize + text.len();
    for b in extract::blocks(text) {
        let p = b.body.as_ptr() as usize;
        assert!(
            range.contains(&p) && range.contains(&(p + b.body.len())),
            "a block outside the text"
        );
    }
    for t in [&tags[..], &[][..]] {
        let code = extract::extract(text, t);
        let p = code.as_ptr() as usize;
        assert!(
            code.is_empty() || (range.contains(&p) && range.contains(&(p + code.len()))),
            "extracted code is not part of the completion"
        );
    }
});
