//! Request shapes: caps on what a request may hold, and the checks that turn a
//! mistake into INVALID_ARGUMENT naming the field instead of a SANDBOX_ERROR
//! found while writing or starting the run.
//!
//! Every check here is linear in the request's size (paths are compared
//! after one sort by components, never prefix by prefix), and the caps keep
//! the work that follows (creating directories, `execve`) small too.

use crate::error::ExecError;
use sandpool_proto::v1 as pb;
use sandpool_sandbox::validate_rel_path;

/// Longest path a request may name, bytes (the kernel's `PATH_MAX`).
pub const MAX_PATH_BYTES: usize = 4096;
/// Most directory levels in a path (the work-dir copy between test runs follows no deeper).
pub const MAX_PATH_DEPTH: usize = 32;
/// Longest path component, bytes (`NAME_MAX`).
pub const MAX_NAME_BYTES: usize = 255;
/// Most entries in `files`.
pub const MAX_FILES: usize = 1024;
/// Most entries in `args`.
pub const MAX_ARGS: usize = 4096;
/// Longest single argument, bytes: the kernel's `MAX_ARG_STRLEN` (128 KiB) less the NUL.
pub const MAX_ARG_BYTES: usize = 128 * 1024 - 1;
/// All arguments together, bytes (with their NULs): well inside `ARG_MAX` with the environment.
pub const MAX_ARGS_TOTAL_BYTES: usize = 1 << 20;
/// Most entries in `fetch_files` (after removing duplicates).
pub const MAX_FETCH_FILES: usize = 256;

/// `path`'s components, without empty ones and `.`; a checked path, see [`path`].
pub fn components(path: &str) -> Vec<&str> {
    path.split('/').filter(|c| !c.is_empty() && *c != ".").collect()
}

/// A quoted, shortened path for messages.
fn shown(p: &str) -> String {
    let cut: String = p.chars().take(80).collect();
    if cut.len() < p.len() {
        format!("{cut:?}...")
    } else {
        format!("{cut:?}")
    }
}

/// Checks one work-dir path: relative, inside, not too long or deep. Returns its components.
pub fn path<'a>(p: &'a str, field: &str) -> Result<Vec<&'a str>, ExecError> {
    if p.len() > MAX_PATH_BYTES {
        return Err(ExecError::invalid(
            field,
            format!("path is {} bytes, more than {MAX_PATH_BYTES}", p.len()),
        ));
    }
    validate_rel_path(p).map_err(|e| ExecError::invalid(field, e.to_string()))?;
    let parts = components(p);
    if parts.len() > MAX_PATH_DEPTH {
        return Err(ExecError::invalid(
            field,
            format!(
                "path {} is {} levels deep, more than {MAX_PATH_DEPTH}",
                shown(p),
                parts.len()
            ),
        ));
    }
    if parts.iter().any(|c| c.len() > MAX_NAME_BYTES) {
        return Err(ExecError::invalid(
            field,
            format!("path {}: a component is longer than {MAX_NAME_BYTES} bytes", shown(p)),
        ));
    }
    Ok(parts)
}

/// Validates the files a run starts with: `source` (the language's source file, holding the
/// program) and `files`. Each must name a file inside the work dir; no two may be the same
/// file, and none may be another's directory. `budget` caps their total size (the work dir's).
pub fn files(files: &[pb::File], field: &str, source: &str, code_len: usize, budget: u64) -> Result<(), ExecError> {
    if files.len() > MAX_FILES {
        return Err(ExecError::invalid(
            field,
            format!("{} entries, more than {MAX_FILES}", files.len()),
        ));
    }
    let total: u64 = files.iter().map(|f| f.content.len() as u64).sum::<u64>() + code_len as u64;
    if total > budget {
        return Err(ExecError::invalid(
            field,
            format!("the program and files hold {total} bytes, more than the work dir's {budget}"),
        ));
    }
    // (components, index); index None is the program's source file.
    let mut all: Vec<(Vec<&str>, Option<usize>)> = Vec::with_capacity(files.len() + 1);
    all.push((components(source), None));
    for (i, f) in files.iter().enumerate() {
        let at = format!("{field}[{i}].path");
        let parts = path(&f.path, &at)?;
        if f.path.ends_with('/') {
            return Err(ExecError::invalid(at, "names a directory, not a file"));
        }
        all.push((parts, Some(i)));
    }
    // Sorted by components, a path's descendants follow it directly: checking
    // neighbours finds every clash in one pass.
    all.sort();
    let name = |i: Option<usize>| match i {
        Some(i) => format!("{field}[{i}].path"),
        None => format!("the program's source file {source:?}"),
    };
    for pair in all.windows(2) {
        let [(a, ai), (b, bi)] = pair else { continue };
        // The one to blame is a request's entry, never the program.
        let (culprit, other) = match (ai, bi) {
            (None, _) => (*bi, *ai),
            _ => (*ai, *bi),
        };
        if a == b {
            return Err(ExecError::invalid(
                name(culprit),
                format!("the same file as {}", name(other)),
            ));
        }
        if b.starts_with(a) {
            let why = match ai {
                None => format!("is below {}, which is a file", name(*ai)),
                Some(_) => format!("is a file, and a directory of {}", name(*bi)),
            };
            return Err(ExecError::invalid(name(culprit), why));
        }
    }
    Ok(())
}

/// Validates a run's extra arguments against what `execve` accepts.
pub fn args(args: &[String]) -> Result<(), ExecError> {
    if args.len() > MAX_ARGS {
        return Err(ExecError::invalid(
            "args",
            format!("{} arguments, more than {MAX_ARGS}", args.len()),
        ));
    }
    let mut total = 0usize;
    for (i, a) in args.iter().enumerate() {
        if a.contains('\0') {
            return Err(ExecError::invalid(format!("args[{i}]"), "contains a NUL byte"));
        }
        if a.len() > MAX_ARG_BYTES {
            return Err(ExecError::invalid(
                format!("args[{i}]"),
                format!(
                    "{} bytes, more than the kernel takes in one argument ({MAX_ARG_BYTES})",
                    a.len()
                ),
            ));
        }
        total += a.len() + 1;
    }
    if total > MAX_ARGS_TOTAL_BYTES {
        return Err(ExecError::invalid(
            "args",
            format!("{total} bytes in all, more than {MAX_ARGS_TOTAL_BYTES}"),
        ));
    }
    Ok(())
}

/// Validates `fetch_files` and returns it without duplicates (the same file, however spelled,
/// is returned once, under its first spelling).
pub fn fetch_files(paths: &[String]) -> Result<Vec<String>, ExecError> {
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for (i, p) in paths.iter().enumerate() {
        let parts = path(p, &format!("fetch_files[{i}]"))?;
        if seen.insert(parts.join("/")) {
            out.push(p.clone());
            if out.len() > MAX_FETCH_FILES {
                return Err(ExecError::invalid(
                    "fetch_files",
                    format!("more than {MAX_FETCH_FILES} distinct files"),
                ));
            }
        }
    }
    Ok(out)
}

/// Validates an Execute request's shape; returns its `fetch_files` without duplicates.
pub fn execute(req: &pb::ExecuteRequest, source: &str, work_dir_bytes: u64) -> Result<Vec<String>, ExecError> {
    files(&req.files, "files", source, req.code.len(), work_dir_bytes)?;
    args(&req.args)?;
    fetch_files(&req.fetch_files)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(p: &str) -> pb::File {
        pb::File {
            path: p.into(),
            ..Default::default()
        }
    }

    fn field(r: Result<(), ExecError>) -> String {
        match r {
            Err(ExecError::InvalidArgument { field, .. }) => field,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn clashes_name_the_request_field() {
        let ok = files(&[f("a/b"), f("a/c"), f("a-b")], "files", "main.py", 0, 100);
        assert!(ok.is_ok(), "{ok:?}");
        assert_eq!(
            field(files(&[f("main.py/x")], "files", "main.py", 0, 100)),
            "files[0].path"
        );
        assert_eq!(
            field(files(&[f("./main.py")], "files", "main.py", 0, 100)),
            "files[0].path"
        );
        assert_eq!(
            field(files(&[f("d/x"), f("d")], "files", "main.py", 0, 100)),
            "files[1].path"
        );
        assert_eq!(
            field(files(&[f("x"), f("y/./x/")], "files", "m", 0, 100)),
            "files[1].path"
        );
        assert_eq!(
            field(files(&[f("src")], "files", "src/Main.java", 0, 100)),
            "files[0].path"
        );
    }

    #[test]
    fn caps_hold() {
        let deep = vec!["a"; MAX_PATH_DEPTH + 1].join("/");
        assert_eq!(field(files(&[f(&deep)], "files", "m", 0, 100)), "files[0].path");
        let long = "a".repeat(MAX_PATH_BYTES + 1);
        assert_eq!(field(files(&[f(&long)], "files", "m", 0, 100)), "files[0].path");
        let big = pb::File {
            path: "x".into(),
            content: vec![0; 101],
            executable: false,
        };
        assert_eq!(field(files(&[big], "files", "m", 0, 100)), "files");
        assert_eq!(field(args(&["a".repeat(MAX_ARG_BYTES + 1)])), "args[0]");
        assert_eq!(field(args(&vec!["a".repeat(1000); 2000])), "args");
        let dup = fetch_files(&["out".into(), "./out".into(), "x/../y".into()]);
        assert!(dup.is_err());
        assert_eq!(
            fetch_files(&["out".into(), "./out".into(), "o".into()]).unwrap(),
            ["out", "o"]
        );
    }
}
