//! The language table: data describing how to compile and run each language.
//!
//! Loaded from `languages.toml` (built in) or `--languages FILE`. Nothing in
//! the executor knows about a particular language beyond this table.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

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
}

/// Per-language data for judging (see `docs/judging.md`); every key is optional.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JudgeData {
    /// Markdown fence tags that mean this language, besides its name and aliases.
    #[serde(default)]
    pub fences: Vec<String>,
    /// Code put before the completion in assert tests (default imports/includes).
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
            if lang.compile.as_ref().is_some_and(|c| c.is_empty()) {
                return Err(TableError::Invalid(
                    name,
                    "compile must not be empty when present".into(),
                ));
            }
            crate::sandbox::workdir::validate_rel_path(&lang.source)
                .map_err(|e| TableError::Invalid(name.clone(), e.to_string()))?;
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

    /// Every language, by name.
    pub fn iter(&self) -> impl Iterator<Item = &Language> {
        self.langs.values()
    }

    /// Sorted language names.
    pub fn names(&self) -> Vec<&str> {
        self.langs.keys().map(String::as_str).collect()
    }
}

/// First non-empty line of a version command's output.
pub fn version_line(stdout: &[u8], stderr: &[u8]) -> Option<String> {
    [stdout, stderr]
        .iter()
        .flat_map(|b| {
            String::from_utf8_lossy(b)
                .lines()
                .map(str::trim)
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .find(|l| !l.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(t.get("js").unwrap().judge.assert_prelude.contains("console"));
        assert!(t.get("bash").unwrap().judge.assert_epilogue.is_none());
        assert!(LanguageTable::parse("[x]\nsource='a'\nrun=['a']\nversion=['a']\n[x.judge]\nbogus=1\n").is_err());
    }

    #[test]
    fn bad_entries_are_rejected() {
        assert!(LanguageTable::parse("[x]\nsource='../a'\nrun=['a']\nversion=['a']\n").is_err());
        assert!(LanguageTable::parse("[x]\nsource='a'\nrun=[]\nversion=['a']\n").is_err());
        assert!(LanguageTable::parse("[x]\nsource='a'\nrun=['a']\nversion=['a']\nbogus=1\n").is_err());
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
