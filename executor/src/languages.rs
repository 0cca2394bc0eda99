//! The language table: data describing how to compile and run each language.
//!
//! Loaded from `languages.toml` (built in) or `--languages FILE`. Nothing in
//! the executor knows about a particular language beyond this table.

use serde::Deserialize;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The table shipped with the executor.
pub const BUILTIN: &str = include_str!("../languages.toml");

/// One language's entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Language {
    #[serde(skip)]
    pub name: String,
    #[serde(default)]
    pub aliases: Vec<String>,
    /// File the code is written to, relative to the work dir.
    pub source: String,
    /// Compile argv, if the language has a compile step.
    #[serde(default)]
    pub compile: Option<Vec<String>>,
    /// Run argv; request args are appended.
    pub run: Vec<String>,
    /// Argv printing the toolchain version.
    pub version: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Runs get the GPU.
    #[serde(default)]
    pub gpu: bool,
    /// Debian packages (and `npm:` packages) providing the toolchain.
    #[serde(default)]
    pub packages: Vec<String>,
    /// How the judge assembles test programs in this language.
    #[serde(default)]
    pub judge: JudgeData,
    /// Argv printing the packages programs can import, one `name version` a line
    /// (probed at start-up; GetCapabilities lists them).
    #[serde(default)]
    pub list_packages: Option<Vec<String>>,
    /// The variable naming import directories (`PYTHONPATH`): `--python-path`
    /// directories are added to it.
    #[serde(default)]
    pub import_path_env: Option<String>,
    /// Warm starts: runs fork from a per-slot interpreter that has already
    /// started and imported `preload` (see docs/warm-starts.md).
    #[serde(default)]
    pub warm: Option<WarmData>,
    /// Directories of packages programs may import (e.g. test harnesses' npm packages), put in
    /// `import_path_env` and shown to runs read-only; those that do not exist are skipped.
    #[serde(default)]
    pub import_dirs: Vec<PathBuf>,
    /// Java: the class named in `source`, `compile` and `run` (`Main`); a program whose public
    /// top-level class has another name is written to, compiled and run as that class.
    #[serde(default)]
    pub public_class: Option<String>,
    /// Commands used instead of `compile` and `run` by a `restricted`-mode executor.
    #[serde(default)]
    pub restricted: Option<ModeCommands>,
    /// Artifacts built once that this language's runs share read-only (precompiled headers):
    /// see [`SharedData`] and docs/warm-starts.md.
    #[serde(default)]
    pub shared: Option<SharedData>,
}

/// A language's shared artifacts: built once per executor (on the language's first run that
/// may use them) by `build`, in a work dir holding `files`; what the build leaves there is
/// what runs see, read-only, at `{shared}` (`/sandpool/shared/LANG`). Runs that start warm get
/// the extra arguments; cold ones (`cold_start`, `--warm-starts false`) do not.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SharedData {
    /// Files written into the build's work dir first: path → content.
    #[serde(default)]
    pub files: BTreeMap<String, String>,
    /// A file the judge's `assert_prelude` is written to, for `prelude_args`.
    #[serde(default)]
    pub prelude_file: Option<String>,
    /// Argv that builds the artifacts, run in the sandbox like a compile.
    #[serde(default)]
    pub build: Vec<String>,
    /// After `build`, the language's own compile command with these after its program name
    /// compiles `files`' source, then its run command with `train_run_args` runs it: class
    /// archives recorded by the very commands runs use (their flags must match).
    #[serde(default)]
    pub train_compile_args: Vec<String>,
    #[serde(default)]
    pub train_run_args: Vec<String>,
    /// Put after the compile command's program name.
    #[serde(default)]
    pub compile_args: Vec<String>,
    /// Put after `compile_args` when the source starts with the judge's `assert_prelude`
    /// (a precompiled prelude may stand in only for a program that includes exactly it).
    #[serde(default)]
    pub prelude_args: Vec<String>,
    /// Put after the run command's program name.
    #[serde(default)]
    pub run_args: Vec<String>,
    /// Set in the environment of every phase (over the entry's `env`).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

/// A language's commands for one isolation mode: `restricted = { run = [...] }`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModeCommands {
    #[serde(default)]
    pub compile: Option<Vec<String>>,
    #[serde(default)]
    pub run: Option<Vec<String>>,
}

/// A language's warm-start entry: `warm = { preload = ["math", ...], heavy = ["numpy"] }`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WarmData {
    /// Modules imported once, before the first run forks.
    #[serde(default)]
    pub preload: Vec<String>,
    /// Modules dear to carry in every fork (numpy makes each fork and exit
    /// about 1.5 ms dearer): a second zygote imports them too, and serves only
    /// runs whose program names one of them (`import numpy`, `numpy.array`).
    #[serde(default)]
    pub heavy: Vec<String>,
}

impl WarmData {
    /// True when `text` names one of the heavy modules (or a submodule of
    /// one) as a whole word: the run then forks from the heavy zygote.
    pub fn names_heavy(&self, text: &[u8]) -> bool {
        self.heavy.iter().any(|m| {
            let top = m.split('.').next().unwrap_or(m).as_bytes();
            names_word(text, top)
        })
    }
}

/// True when `word` occurs in `text` with no identifier character either side.
/// Runs on the request path over every file of a request: linear, SIMD.
fn names_word(text: &[u8], word: &[u8]) -> bool {
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    !word.is_empty()
        && memchr::memmem::find_iter(text, word)
            .any(|i| (i == 0 || !ident(text[i - 1])) && text.get(i + word.len()).is_none_or(|b| !ident(*b)))
}

impl Language {
    /// The interpreter and its flags: the run command before the source file,
    /// for a language with warm starts (checked when the table is parsed).
    pub fn warm_interpreter(&self) -> Option<&[String]> {
        self.warm.as_ref()?;
        let i = self.run.iter().position(|a| *a == self.source)?;
        (i >= 1 && i + 1 == self.run.len()).then(|| &self.run[..i])
    }

    /// The environment a run of this language gets: [`base_env`], then the entry's `env`,
    /// then the GPU this executor was given (all of them unless it says which).
    pub fn run_env(&self) -> Vec<(String, String)> {
        let mut env = base_env();
        env.extend(self.env.iter().map(|(k, v)| (k.clone(), v.clone())));
        if self.gpu {
            env.push((
                "CUDA_VISIBLE_DEVICES".into(),
                std::env::var("CUDA_VISIBLE_DEVICES").unwrap_or_else(|_| "all".into()),
            ));
        }
        env
    }
}

/// Environment every run starts from; the language's `env` is added to it.
pub fn base_env() -> Vec<(String, String)> {
    [
        ("PATH", sandpool_sandbox::PATH),
        ("HOME", "/tmp"),
        ("TMPDIR", "/tmp"),
        ("LANG", "C.UTF-8"),
        ("LC_ALL", "C.UTF-8"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

/// Per-language data for judging (see `docs/judging.md`); every key is optional.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JudgeData {
    /// Markdown fence tags that mean this language, besides its name and aliases.
    #[serde(default)]
    pub fences: Vec<String>,
    /// Code put first in assert tests whatever the prelude setting: what the judge's integrity
    /// needs (JavaScript: a `console.assert` that throws).
    #[serde(default)]
    pub assert_setup: String,
    /// Code put before the completion in assert tests (default imports/includes); requests
    /// may go without it (`options.prelude`).
    #[serde(default)]
    pub assert_prelude: String,
    /// Keep a prelude line `import X` / `import X as Y` only when the program names `Y` (start-up cost).
    #[serde(default)]
    pub prelude_imports_on_use: bool,
    /// With `prelude_imports_on_use`: other prelude lines kept only when the program names one of these.
    #[serde(default)]
    pub prelude_triggers: BTreeMap<String, Vec<String>>,
    /// HumanEval style: code calling `check` after the tests; `{entry_point}` is replaced.
    #[serde(default)]
    pub assert_call: Option<String>,
    /// Code appended last that prints `{nonce}` on its own line once every test ran.
    #[serde(default)]
    pub assert_epilogue: Option<String>,
    /// Interpreted languages: a program run once, trusted, before the first test; every
    /// test's work dir starts with a copy of what it left (e.g. a warm build cache).
    #[serde(default)]
    pub warm_up: Option<String>,
    /// function_call harness appended to the code; `{fn_name}` and `{json_input}` are replaced.
    #[serde(default)]
    pub function_call_harness: Option<String>,
    /// The check function assert tests may define: without an entry_point, a test_code that
    /// defines it but never calls it is refused (it would pass any code).
    #[serde(default)]
    pub check_function: Option<CheckFunction>,
}

/// How test code defines and calls its check function (Python: `def check(` / `check(`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckFunction {
    /// A test_code line starting with this (after indentation) defines it.
    pub define: String,
    /// This, not preceded by a name character or `.`, calls it.
    pub call: String,
    /// Starts a line comment (calls after it do not count).
    #[serde(default)]
    pub comment: String,
}

impl Language {
    /// This language as it runs `code`: with `public_class`, a public top-level class of another
    /// name renames the source file and the class compiled and run (javac wants `X.java` for
    /// `public class X`); else as it is.
    pub fn for_code(&self, code: &str) -> Cow<'_, Language> {
        let Some(default) = self.public_class.as_deref() else {
            return Cow::Borrowed(self);
        };
        let Some(class) = public_top_level_class(code).filter(|c| c != default) else {
            return Cow::Borrowed(self);
        };
        let Some(ext) = self.source.strip_prefix(default) else {
            return Cow::Borrowed(self);
        };
        let mut lang = self.clone();
        let source = format!("{class}{ext}");
        let rename = |argv: &mut Vec<String>| {
            for a in argv.iter_mut() {
                if *a == self.source {
                    a.clone_from(&source);
                } else if a == default {
                    a.clone_from(&class);
                }
            }
        };
        if let Some(c) = lang.compile.as_mut() {
            rename(c);
        }
        rename(&mut lang.run);
        lang.source = source;
        Cow::Owned(lang)
    }
}

/// The first public top-level class (or interface, enum, record) of Java `code`, when its name
/// is a plain identifier: comments, strings and nested braces are skipped.
pub fn public_top_level_class(code: &str) -> Option<String> {
    let b = code.as_bytes();
    let (mut i, mut depth, mut words): (usize, usize, Vec<&str>) = (0, 0, Vec::new());
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b'$';
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                i = code[i..].find('\n').map_or(b.len(), |n| i + n);
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i = code[i + 2..].find("*/").map_or(b.len(), |n| i + n + 4);
            }
            q @ (b'"' | b'\'') => {
                i += 1;
                while i < b.len() && b[i] != q {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
                words.clear();
            }
            b'{' => {
                depth += 1;
                i += 1;
                words.clear();
            }
            b'}' => {
                depth = depth.saturating_sub(1);
                i += 1;
                words.clear();
            }
            b';' => {
                i += 1;
                words.clear();
            }
            c if word(c) => {
                let start = i;
                while i < b.len() && word(b[i]) {
                    i += 1;
                }
                if depth > 0 {
                    continue;
                }
                let w = &code[start..i];
                let after_public = words.iter().rposition(|w| *w == "public").map(|p| &words[p + 1..]);
                if let Some([mods @ .., kind]) = after_public
                    && ["class", "interface", "enum", "record"].contains(kind)
                    && mods
                        .iter()
                        .all(|m| ["final", "abstract", "static", "strictfp", "sealed"].contains(m))
                    && w.len() <= 200
                    && w.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                {
                    return Some(w.to_owned());
                }
                words.push(w);
            }
            _ => i += 1,
        }
    }
    None
}

/// Whether a language can be used on this executor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Availability {
    Available { version: String },
    Unavailable { reason: String },
}

/// Errors loading a table.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    #[error("reading {0}: {1}")]
    Read(String, std::io::Error),
    #[error("parsing the language table: {0}")]
    Parse(#[from] toml::de::Error),
    #[error("language {0}: {1}")]
    Invalid(String, String),
    #[error("--python-path {0}: {1}")]
    ImportPath(String, String),
}

/// One package a language's programs can import.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Package {
    pub name: String,
    pub version: String,
}

/// Parses `list_packages` output: `name version` lines; others are skipped.
pub fn package_lines(stdout: &[u8]) -> Vec<Package> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let (name, version) = (it.next()?, it.next()?);
            it.next().is_none().then(|| Package {
                name: name.to_owned(),
                version: version.to_owned(),
            })
        })
        .collect()
}

/// Mount points every run gets privately: a directory under them is not the host's.
const PER_RUN_MOUNTS: &[&str] = &["/work", "/tmp", "/dev", "/proc"];

/// Resolves `--python-path` arguments (see [`resolve_import_dir`]) and adds each
/// directory to `ro_paths` unless a listed path already covers it; returns the import directories.
pub fn expose_import_dirs(dirs: &[PathBuf], ro_paths: &mut Vec<PathBuf>) -> Result<Vec<PathBuf>, TableError> {
    let mut imports = Vec::new();
    for d in dirs {
        let (exposed, import) = resolve_import_dir(d)?;
        if !ro_paths.iter().any(|p| exposed.starts_with(p)) {
            ro_paths.push(exposed);
        }
        imports.push(import);
    }
    Ok(imports)
}

/// A `--python-path` argument: the directory to expose (symlinks resolved: the
/// sandbox binds the real directory, and a link's target may be somewhere runs
/// do not see) and where its packages are: a venv's (with `pyvenv.cfg`) single
/// `lib/python3.*/site-packages`, or the directory itself.
pub fn resolve_import_dir(given: &Path) -> Result<(PathBuf, PathBuf), TableError> {
    let err = |why: &str| TableError::ImportPath(given.display().to_string(), why.to_owned());
    if !given.is_absolute() {
        return Err(err("must be an absolute path"));
    }
    if !given.is_dir() {
        return Err(err("is not a directory"));
    }
    let dir = given.canonicalize().map_err(|e| err(&e.to_string()))?;
    let text = dir.to_str().ok_or_else(|| err("must be valid UTF-8"))?;
    if text.contains(':') || text.contains(',') {
        return Err(err("must not contain ':' or ','"));
    }
    if PER_RUN_MOUNTS.iter().any(|m| dir.starts_with(m)) {
        return Err(err(
            "is under a directory each run gets privately (/work, /tmp, /dev, /proc); runs would not see it",
        ));
    }
    if !dir.join("pyvenv.cfg").exists() {
        return Ok((dir.clone(), dir));
    }
    let sites: Vec<PathBuf> = std::fs::read_dir(dir.join("lib"))
        .map_err(|e| err(&format!("a venv without lib/: {e}")))?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
        .map(|e| e.path().join("site-packages"))
        .filter(|p| p.is_dir())
        .collect();
    match sites.as_slice() {
        [one] => {
            let site = one.canonicalize().map_err(|e| err(&e.to_string()))?;
            if !site.starts_with(&dir) {
                return Err(err(
                    "its site-packages is outside the venv; pass that directory instead",
                ));
            }
            Ok((dir, site))
        }
        _ => Err(err(
            "a venv needs exactly one lib/python3.*/site-packages; pass that directory instead",
        )),
    }
}

/// Checks a language's `shared` entry: what it writes and where its arguments go.
fn validate_shared(sh: &SharedData, lang: &Language) -> Result<(), String> {
    if sh.build.is_empty() && sh.train_compile_args.is_empty() && sh.train_run_args.is_empty() {
        return Err("needs build or train_compile_args / train_run_args".into());
    }
    if !sh.train_compile_args.is_empty() && lang.compile.is_none() {
        return Err("train_compile_args needs a compile command".into());
    }
    for f in sh.files.keys().chain(&sh.prelude_file) {
        sandpool_sandbox::validate_rel_path(f).map_err(|e| e.to_string())?;
    }
    if !sh.compile_args.is_empty() && lang.compile.is_none() {
        return Err("compile_args needs a compile command".into());
    }
    if !sh.prelude_args.is_empty()
        && (lang.compile.is_none() || sh.prelude_file.is_none() || lang.judge.assert_prelude.trim().is_empty())
    {
        return Err("prelude_args needs a compile command, prelude_file and judge.assert_prelude".into());
    }
    Ok(())
}

/// The parsed table, with aliases resolved.
#[derive(Debug, Clone)]
pub struct LanguageTable {
    langs: BTreeMap<String, Language>,
    aliases: BTreeMap<String, String>,
}

impl LanguageTable {
    /// Parses a table from TOML text.
    pub fn parse(text: &str) -> Result<Self, TableError> {
        let raw: BTreeMap<String, Language> = toml::from_str(text)?;
        let mut langs = BTreeMap::new();
        let mut aliases = BTreeMap::new();
        for (name, mut lang) in raw {
            if lang.run.is_empty() || lang.version.is_empty() {
                return Err(TableError::Invalid(name, "run and version must not be empty".into()));
            }
            if lang.list_packages.as_ref().is_some_and(|c| c.is_empty()) {
                return Err(TableError::Invalid(
                    name,
                    "list_packages must not be empty when present".into(),
                ));
            }
            if lang.compile.as_ref().is_some_and(|c| c.is_empty()) {
                return Err(TableError::Invalid(
                    name,
                    "compile must not be empty when present".into(),
                ));
            }
            if let Some(r) = &lang.restricted {
                if r.run.as_ref().is_some_and(|c| c.is_empty()) || r.compile.as_ref().is_some_and(|c| c.is_empty()) {
                    return Err(TableError::Invalid(
                        name,
                        "restricted.run and restricted.compile must not be empty when present".into(),
                    ));
                }
                if r.compile.is_some() && lang.compile.is_none() {
                    return Err(TableError::Invalid(
                        name,
                        "restricted.compile needs compile (an interpreted language has no compile phase)".into(),
                    ));
                }
            }
            if lang.warm.is_some() {
                if lang.compile.is_some() || lang.gpu {
                    return Err(TableError::Invalid(
                        name,
                        "warm starts are for interpreted, non-GPU languages".into(),
                    ));
                }
                let module = |m: &String| {
                    !m.is_empty()
                        && m.split('.')
                            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_alphanumeric() || c == '_'))
                };
                if lang.warm.as_ref().is_some_and(|w| !w.preload.iter().all(module)) {
                    return Err(TableError::Invalid(
                        name,
                        "warm.preload must name modules (a.b_c)".into(),
                    ));
                }
                if lang.warm.as_ref().is_some_and(|w| !w.heavy.iter().all(module)) {
                    return Err(TableError::Invalid(name, "warm.heavy must name modules (a.b_c)".into()));
                }
                lang.name = name.clone();
                if lang.warm_interpreter().is_none() {
                    return Err(TableError::Invalid(
                        name,
                        "warm starts need a run command ending with the source file, after the interpreter".into(),
                    ));
                }
            }
            sandpool_sandbox::validate_rel_path(&lang.source)
                .map_err(|e| TableError::Invalid(name.clone(), e.to_string()))?;
            if !lang.import_dirs.is_empty() && lang.import_path_env.is_none() {
                return Err(TableError::Invalid(name, "import_dirs needs import_path_env".into()));
            }
            if let Some(d) = lang.import_dirs.iter().find(|d| !d.is_absolute()) {
                return Err(TableError::Invalid(
                    name,
                    format!("import_dirs: {} is not an absolute path", d.display()),
                ));
            }
            if let Some(sh) = &lang.shared {
                validate_shared(sh, &lang)
                    .map_err(|why| TableError::Invalid(name.clone(), format!("shared: {why}")))?;
            }
            if let Some(c) = &lang.public_class
                && !lang.source.starts_with(c.as_str())
            {
                return Err(TableError::Invalid(
                    name,
                    format!("public_class {c:?}: source must start with it"),
                ));
            }
            lang.name = name.clone();
            for a in &lang.aliases {
                aliases.insert(a.to_lowercase(), name.clone());
            }
            langs.insert(name, lang);
        }
        Ok(LanguageTable { langs, aliases })
    }

    /// The built-in table, or the file at `path`.
    pub fn load(path: Option<&Path>) -> Result<Self, TableError> {
        match path {
            None => Self::parse(BUILTIN),
            Some(p) => {
                let text = std::fs::read_to_string(p).map_err(|e| TableError::Read(p.display().to_string(), e))?;
                Self::parse(&text)
            }
        }
    }

    /// Puts each language's `restricted` commands in place of `compile` and `run`: what a
    /// `restricted`-mode executor runs (e.g. a JVM told the memory limit it cannot read from a cgroup).
    pub fn use_restricted_commands(&mut self) {
        for lang in self.langs.values_mut() {
            let Some(r) = lang.restricted.take() else { continue };
            if let Some(c) = r.compile {
                lang.compile = Some(c);
            }
            if let Some(c) = r.run {
                lang.run = c;
            }
        }
    }

    /// Keeps only the named languages (and their aliases).
    pub fn retain(&mut self, names: &[String]) {
        self.langs
            .retain(|n, _| names.iter().any(|x| x.eq_ignore_ascii_case(n)));
        let langs = &self.langs;
        self.aliases.retain(|_, n| langs.contains_key(n));
    }

    /// Looks a language up by name or alias (case-insensitive).
    pub fn get(&self, name: &str) -> Option<&Language> {
        let lower = name.to_lowercase();
        self.langs
            .get(&lower)
            .or_else(|| self.aliases.get(&lower).and_then(|n| self.langs.get(n)))
    }

    /// Puts `dirs` first in the `var` import path (e.g. `PYTHONPATH`) of every
    /// language whose `import_path_env` is `var`.
    pub fn add_import_dirs(&mut self, var: &str, dirs: &[PathBuf]) {
        if dirs.is_empty() {
            return;
        }
        for lang in self.langs.values_mut() {
            if lang.import_path_env.as_deref() != Some(var) {
                continue;
            }
            let mut parts: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
            if let Some(own) = lang.env.get(var).filter(|v| !v.is_empty()) {
                parts.push(own.clone());
            }
            lang.env.insert(var.to_owned(), parts.join(":"));
        }
    }

    /// Puts each language's existing `import_dirs` in its `import_path_env` (before what its
    /// `env` sets) and adds them to `ro_paths` unless a listed path covers them; the directories
    /// skipped because they do not exist, as `(language, dir)`.
    pub fn expose_own_import_dirs(&mut self, ro_paths: &mut Vec<PathBuf>) -> Vec<(String, PathBuf)> {
        let mut skipped = Vec::new();
        for lang in self.langs.values_mut() {
            let Some(var) = lang.import_path_env.clone() else {
                continue;
            };
            let mut parts = Vec::new();
            for d in &lang.import_dirs {
                let Ok(real) = d.canonicalize().and_then(|r| {
                    if r.is_dir() {
                        Ok(r)
                    } else {
                        Err(std::io::ErrorKind::NotADirectory.into())
                    }
                }) else {
                    skipped.push((lang.name.clone(), d.clone()));
                    continue;
                };
                if !ro_paths.iter().any(|p| real.starts_with(p)) {
                    ro_paths.push(real.clone());
                }
                parts.push(real.display().to_string());
            }
            if parts.is_empty() {
                continue;
            }
            if let Some(own) = lang.env.get(&var).filter(|v| !v.is_empty()) {
                parts.push(own.clone());
            }
            lang.env.insert(var, parts.join(":"));
        }
        skipped
    }

    /// Every language, by name.
    pub fn iter(&self) -> impl Iterator<Item = &Language> {
        self.langs.values()
    }

    /// Sorted language names.
    pub fn names(&self) -> Vec<&str> {
        self.langs.keys().map(String::as_str).collect()
    }
}

/// First non-empty line of a version command's output that is not a JVM warning, without an
/// `info: ` prefix (kotlinc prints `info: kotlinc-jvm ...`).
pub fn version_line(stdout: &[u8], stderr: &[u8]) -> Option<String> {
    [stdout, stderr]
        .iter()
        .flat_map(|b| {
            String::from_utf8_lossy(b)
                .lines()
                .map(str::trim)
                .map(|l| l.strip_prefix("info: ").unwrap_or(l).to_owned())
                .collect::<Vec<_>>()
        })
        .find(|l| !l.is_empty() && !l.contains("VM warning:") && !l.starts_with("Picked up JAVA_"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restricted_commands_replace_compile_and_run_only_when_asked() {
        let text = r#"
[j]
source = "Main.java"
compile = ["javac", "Main.java"]
run = ["java", "Main"]
version = ["java", "-version"]
restricted = { run = ["java", "-Xss8m", "Main"] }
"#;
        let mut t = LanguageTable::parse(text).unwrap();
        assert_eq!(t.get("j").unwrap().run, ["java", "Main"]);
        t.use_restricted_commands();
        let j = t.get("j").unwrap();
        assert_eq!(j.run, ["java", "-Xss8m", "Main"]);
        assert_eq!(
            j.compile.as_deref(),
            Some(&["javac".to_string(), "Main.java".to_string()][..])
        );
        let empty = text.replace(r#"run = ["java", "-Xss8m", "Main"]"#, "run = []");
        assert!(LanguageTable::parse(&empty).is_err());
        let interpreted = "[p]\nsource = \"m.py\"\nrun = [\"python3\", \"m.py\"]\nversion = [\"python3\"]\nrestricted = { compile = [\"x\"] }\n";
        assert!(LanguageTable::parse(interpreted).is_err());
    }

    #[test]
    fn builtin_table_parses_with_required_languages() {
        let t = LanguageTable::parse(BUILTIN).unwrap();
        for n in [
            "python",
            "c",
            "cpp",
            "java",
            "javascript",
            "typescript",
            "go",
            "rust",
            "bash",
            "cuda",
            "python_gpu",
            "sql",
        ] {
            assert!(t.get(n).is_some(), "{n} missing");
        }
        assert_eq!(t.get("Python3").unwrap().name, "python");
        assert!(t.get("cobol").is_none());
        assert!(t.get("cuda").unwrap().gpu);
    }

    #[test]
    fn judge_data_is_parsed_and_optional() {
        let t = LanguageTable::parse(BUILTIN).unwrap();
        let py = &t.get("python").unwrap().judge;
        assert!(py.assert_call.as_deref().unwrap().contains("{entry_point}"));
        assert!(py.assert_epilogue.as_deref().unwrap().contains("{nonce}"));
        assert!(py.function_call_harness.as_deref().unwrap().contains("{fn_name}"));
        assert!(t.get("js").unwrap().judge.assert_setup.contains("console"));
        assert!(t.get("bash").unwrap().judge.assert_epilogue.is_none());
        assert!(LanguageTable::parse("[x]\nsource='a'\nrun=['a']\nversion=['a']\n[x.judge]\nbogus=1\n").is_err());
    }

    #[test]
    fn warm_entries_are_parsed_and_checked() {
        let t = LanguageTable::parse(BUILTIN).unwrap();
        let py = t.get("python").unwrap();
        let warm = py.warm.as_ref().expect("python has warm starts");
        // numpy is carried only by the zygote for runs that name it.
        assert!(!warm.preload.iter().any(|m| m == "numpy"));
        assert!(warm.heavy.iter().any(|m| m == "numpy"));
        assert!(warm.names_heavy(b"import numpy as np\n"));
        assert!(warm.names_heavy(b"from numpy.linalg import norm"));
        assert!(warm.names_heavy(b"x = __import__('numpy')"));
        assert!(!warm.names_heavy(b"import numpyish\nmy_numpy = 1\n"));
        assert!(!warm.names_heavy(b"import math"));
        assert_eq!(
            py.warm_interpreter(),
            Some(&["python3".to_owned(), "-B".to_owned()][..])
        );
        assert!(t.get("c").unwrap().warm_interpreter().is_none());
        let entry = |run: &str, extra: &str| {
            LanguageTable::parse(&format!(
                "[x]\nsource='m.py'\nrun={run}\nversion=['a']\n{extra}warm={{preload=['os']}}\n"
            ))
        };
        assert!(entry("['py','m.py']", "").is_ok());
        assert!(entry("['m.py']", "").is_err(), "no interpreter");
        assert!(entry("['py','m.py','x']", "").is_err(), "arguments after the source");
        assert!(entry("['py','-c','1']", "").is_err(), "no source file");
        assert!(entry("['py','m.py']", "compile=['cc']\n").is_err(), "compiled");
        assert!(
            LanguageTable::parse("[x]\nsource='m.py'\nrun=['py','m.py']\nversion=['a']\nwarm={preload=['os; rm']}\n")
                .is_err()
        );
        let heavy = LanguageTable::parse(
            "[x]\nsource='m.py'\nrun=['py','m.py']\nversion=['a']\nwarm={preload=['os'],heavy=['np; rm']}\n",
        );
        assert!(
            heavy.as_ref().is_err_and(|e| e.to_string().contains("warm.heavy")),
            "{heavy:?}"
        );
    }

    #[test]
    fn bad_entries_are_rejected() {
        assert!(LanguageTable::parse("[x]\nsource='../a'\nrun=['a']\nversion=['a']\n").is_err());
        assert!(LanguageTable::parse("[x]\nsource='a'\nrun=[]\nversion=['a']\n").is_err());
        assert!(LanguageTable::parse("[x]\nsource='a'\nrun=['a']\nversion=['a']\nbogus=1\n").is_err());
    }

    #[test]
    fn python_entries_list_packages_and_take_import_dirs() {
        let mut t = LanguageTable::parse(BUILTIN).unwrap();
        let py = t.get("python").unwrap();
        assert!(py.list_packages.is_some());
        assert_eq!(t.get("python_gpu").unwrap().list_packages, py.list_packages);
        for p in ["python3-numpy", "python3-pandas", "python3-scipy", "python3-sympy"] {
            assert!(py.packages.iter().any(|x| x == p), "{p} missing");
        }
        assert_eq!(py.env.get("OPENBLAS_NUM_THREADS").map(String::as_str), Some("1"));
        t.add_import_dirs("PYTHONPATH", &["/opt/a".into(), "/opt/b".into()]);
        for n in ["python", "pytest", "python_gpu"] {
            assert_eq!(t.get(n).unwrap().env["PYTHONPATH"], "/opt/a:/opt/b", "{n}");
        }
        assert!(!t.get("ruby").unwrap().env.contains_key("PYTHONPATH"));
        let mut own = LanguageTable::parse(
            "[x]\nsource='a'\nrun=['a']\nversion=['a']\nimport_path_env='PYTHONPATH'\nenv={PYTHONPATH='/own'}\n",
        )
        .unwrap();
        own.add_import_dirs("PYTHONPATH", &["/opt/a".into()]);
        assert_eq!(own.get("x").unwrap().env["PYTHONPATH"], "/opt/a:/own");
        assert!(LanguageTable::parse("[x]\nsource='a'\nrun=['a']\nversion=['a']\nlist_packages=[]\n").is_err());
    }

    #[test]
    fn package_lines_keep_name_version_pairs() {
        let got = package_lines(b"numpy 1.24.2\n\nWarning: something odd\npandas 1.5.3\n");
        assert_eq!(
            got,
            vec![
                Package {
                    name: "numpy".into(),
                    version: "1.24.2".into()
                },
                Package {
                    name: "pandas".into(),
                    version: "1.5.3".into()
                },
            ]
        );
    }

    #[test]
    fn import_dirs_are_checked_and_venvs_resolved() {
        let bad = |p: &str| resolve_import_dir(Path::new(p)).unwrap_err().to_string();
        assert!(bad("relative/dir").contains("absolute"), "{}", bad("relative/dir"));
        assert!(bad("/tmp").contains("privately"));
        assert!(bad("/proc/self").contains("privately"));
        assert!(bad("/nonexistent-sandpool-dir").contains("not a directory"));
        // Not under /tmp or /work: runs get those privately.
        let dir = tempfile::Builder::new().tempdir_in("/var/tmp").unwrap();
        let d = dir.path().to_owned();
        assert_eq!(resolve_import_dir(&d).unwrap(), (d.clone(), d.clone()));
        std::fs::create_dir(d.join("a:b")).unwrap();
        assert!(
            resolve_import_dir(&d.join("a:b"))
                .unwrap_err()
                .to_string()
                .contains("':'")
        );
        // A link is followed to the directory that is bound; one into /tmp is refused.
        std::os::unix::fs::symlink(&d, d.join("link")).unwrap();
        assert_eq!(resolve_import_dir(&d.join("link")).unwrap().0, d);
        std::os::unix::fs::symlink("/tmp", d.join("to-tmp")).unwrap();
        assert!(
            resolve_import_dir(&d.join("to-tmp"))
                .unwrap_err()
                .to_string()
                .contains("privately")
        );
        std::fs::write(d.join("pyvenv.cfg"), "home = /usr/bin\n").unwrap();
        assert!(resolve_import_dir(&d).is_err(), "a venv without site-packages");
        let site = d.join("lib/python3.11/site-packages");
        std::fs::create_dir_all(&site).unwrap();
        assert_eq!(resolve_import_dir(&d).unwrap(), (d.clone(), site.clone()));
        let mut ro = vec![PathBuf::from("/usr")];
        let got = expose_import_dirs(std::slice::from_ref(&d), &mut ro).unwrap();
        assert_eq!(got, vec![site]);
        assert_eq!(ro, vec![PathBuf::from("/usr"), d.clone()]);
        let mut ro = vec![PathBuf::from("/")];
        expose_import_dirs(&[d], &mut ro).unwrap();
        assert_eq!(ro, vec![PathBuf::from("/")], "already visible: not bound again");
    }

    #[test]
    fn java_is_named_after_its_public_class() {
        let code = r#"
            import java.util.*; // public class Commented {
            /* public class Blocked { */
            class Helper { public class Inner {} String s = "public class Quoted {"; char c = '{'; }
            @SuppressWarnings("x")
            public final class Solution<T> { public static void main(String[] a) {} }
            public class Later {}
        "#;
        assert_eq!(public_top_level_class(code).as_deref(), Some("Solution"));
        assert_eq!(public_top_level_class("class Main {}\nclass Solution {}"), None);
        assert_eq!(
            public_top_level_class("public interface Shape {}").as_deref(),
            Some("Shape")
        );
        let t = LanguageTable::parse(BUILTIN).unwrap();
        let java = t.get("java").unwrap();
        let l = java.for_code("public class Solution { public static void main(String[] a) {} }");
        assert_eq!(l.source, "Solution.java");
        assert_eq!(
            l.compile.as_ref().unwrap().last().map(String::as_str),
            Some("Solution.java")
        );
        assert_eq!(l.run.last().map(String::as_str), Some("Solution"));
        assert!(l.run.iter().all(|a| a != "Main"), "{:?}", l.run);
        assert!(matches!(java.for_code("public class Main {}"), Cow::Borrowed(_)));
        assert!(matches!(java.for_code("class Solution {}"), Cow::Borrowed(_)));
        let py = t.get("python").unwrap();
        assert!(matches!(py.for_code("public class X {}"), Cow::Borrowed(_)));
        assert!(LanguageTable::parse("[x]\nsource='a.java'\nrun=['a']\nversion=['a']\npublic_class='Main'\n").is_err());
    }

    #[test]
    fn version_lines_skip_jvm_warnings() {
        let err = b"OpenJDK 64-Bit Server VM warning: Options -Xverify:none and -noverify were deprecated\ninfo: kotlinc-jvm 1.3-SNAPSHOT (JRE 17)\n";
        assert_eq!(
            version_line(b"", err).as_deref(),
            Some("kotlinc-jvm 1.3-SNAPSHOT (JRE 17)")
        );
        assert_eq!(version_line(b"Python 3.11.2\n", b"").as_deref(), Some("Python 3.11.2"));
    }

    #[test]
    fn own_import_dirs_go_in_the_import_path_and_are_shown() {
        let dir = tempfile::Builder::new().tempdir_in("/var/tmp").unwrap();
        let d = dir.path().canonicalize().unwrap();
        let table = format!(
            "[x]\nsource='a'\nrun=['a']\nversion=['a']\nimport_path_env='NODE_PATH'\nenv={{NODE_PATH='/own'}}\nimport_dirs=['{}', '/nonexistent-sandpool-dir']\n",
            d.display()
        );
        let mut t = LanguageTable::parse(&table).unwrap();
        let mut ro = vec![PathBuf::from("/usr")];
        let skipped = t.expose_own_import_dirs(&mut ro);
        assert_eq!(
            skipped,
            vec![("x".to_string(), PathBuf::from("/nonexistent-sandpool-dir"))]
        );
        assert_eq!(t.get("x").unwrap().env["NODE_PATH"], format!("{}:/own", d.display()));
        assert_eq!(ro, vec![PathBuf::from("/usr"), d]);
        assert!(LanguageTable::parse("[x]\nsource='a'\nrun=['a']\nversion=['a']\nimport_dirs=['/opt']\n").is_err());
        assert!(
            LanguageTable::parse(
                "[x]\nsource='a'\nrun=['a']\nversion=['a']\nimport_path_env='P'\nimport_dirs=['rel']\n"
            )
            .is_err()
        );
        let js = LanguageTable::parse(BUILTIN).unwrap();
        assert_eq!(js.get("js").unwrap().import_path_env.as_deref(), Some("NODE_PATH"));
    }

    #[test]
    fn retain_filters_languages_and_aliases() {
        let mut t = LanguageTable::parse(BUILTIN).unwrap();
        t.retain(&["python".into()]);
        assert_eq!(t.names(), vec!["python"]);
        assert!(t.get("py").is_some());
        assert!(t.get("js").is_none());
    }
}
