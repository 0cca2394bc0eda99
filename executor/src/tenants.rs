//! Tenants: who is calling and on what terms (docs/tenants.md).
//!
//! A tenant is a caller identity, found by its bearer token, with a weight (its share of
//! slots beside other tenants at the same priority) and caps on this executor: runs at once,
//! requests waiting, sessions open, the highest priority it may ask for. The table comes
//! from a tenants file (TOML), from the single `--auth-token-file` token (one tenant,
//! `default`), or is open (every caller is `anonymous`). A file's table is re-read while the
//! executor runs ([`Tenants::watch`]); a change that does not parse keeps the old table.
//!
//! Admission ([`crate::admission`]) schedules by [`Priority`] and tenant; the adapters find
//! the caller's tenant here ([`Tenants::authenticate`]).

use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;
use subtle::ConstantTimeEq;

/// How soon a request is served beside others waiting (docs/tenants.md, "Fair share").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    Interactive,
    Normal,
    Batch,
}

impl Priority {
    /// Every priority, highest first; [`Priority::index`] indexes it.
    pub const ALL: [Priority; 3] = [Priority::Interactive, Priority::Normal, Priority::Batch];

    /// 0 for interactive, 1 normal, 2 batch.
    pub fn index(self) -> usize {
        self as usize
    }

    /// Its share of slots beside the other priorities: interactive 16 : normal 4 : batch 1.
    /// Weights, not strict order, so that no priority starves (docs/tenants.md).
    pub fn weight(self) -> u64 {
        match self {
            Priority::Interactive => 16,
            Priority::Normal => 4,
            Priority::Batch => 1,
        }
    }

    /// Lower-case name (metrics labels, messages, the HTTP header).
    pub fn name(self) -> &'static str {
        match self {
            Priority::Interactive => "interactive",
            Priority::Normal => "normal",
            Priority::Batch => "batch",
        }
    }

    /// From a name, any case, with or without the proto's `PRIORITY_` prefix.
    pub fn parse(s: &str) -> Option<Priority> {
        let s = s.trim();
        let s = s
            .get(..9)
            .filter(|p| p.eq_ignore_ascii_case("priority_"))
            .map_or(s, |_| &s[9..]);
        Priority::ALL.into_iter().find(|p| p.name().eq_ignore_ascii_case(s))
    }

    /// From the proto enum: None when unspecified, Err when not a known value.
    pub fn from_proto(v: i32) -> Result<Option<Priority>, i32> {
        use sandpool_proto::v1::Priority as P;
        match P::try_from(v) {
            Ok(P::Unspecified) => Ok(None),
            Ok(P::Interactive) => Ok(Some(Priority::Interactive)),
            Ok(P::Normal) => Ok(Some(Priority::Normal)),
            Ok(P::Batch) => Ok(Some(Priority::Batch)),
            Err(_) => Err(v),
        }
    }

    /// As the proto enum.
    pub fn to_proto(self) -> sandpool_proto::v1::Priority {
        use sandpool_proto::v1::Priority as P;
        match self {
            Priority::Interactive => P::Interactive,
            Priority::Normal => P::Normal,
            Priority::Batch => P::Batch,
        }
    }
}

impl std::fmt::Display for Priority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A tenant's terms on this executor. `None` caps take the executor's defaults (`--slots`,
/// `--queue`, `--max-sessions`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenant {
    pub name: Arc<str>,
    pub weight: u32,
    pub max_concurrency: Option<usize>,
    pub max_queue: Option<usize>,
    pub max_sessions: Option<usize>,
    pub max_priority: Priority,
    /// Found by a token: its name and identity scope sessions and cached results. False for
    /// `anonymous`, whose callers are kept apart by what they send (see [`crate::call::Caller`]).
    pub authenticated: bool,
    /// Which tenant of that name this is: given when the name comes into the table, kept
    /// while each reloaded table still has the name (new terms, a rotated token), never
    /// given again. A tenant removed and later added back under its old name is a new
    /// tenant: it owns none of the old one's sessions (docs/tenants.md, "Identity").
    /// 0 for `anonymous`.
    pub identity: u64,
}

/// The next [`Tenant::identity`] to give (0 is `anonymous`'s).
static NEXT_IDENTITY: AtomicU64 = AtomicU64::new(1);

/// A tenant identity never given before in this process.
pub fn new_identity() -> u64 {
    NEXT_IDENTITY.fetch_add(1, Ordering::Relaxed)
}

/// A request asked for more than its tenant may.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("tenant {tenant:?} may ask for priority {max} at most, not {asked}")]
pub struct PriorityDenied {
    pub tenant: Arc<str>,
    pub max: Priority,
    pub asked: Priority,
}

/// The name of the tenant every caller is without auth.
pub const ANONYMOUS: &str = "anonymous";
/// The name of the single `--auth-token-file` token's tenant.
pub const DEFAULT: &str = "default";

impl Tenant {
    /// Every caller when the executor has no auth: the executor's defaults, weight 1.
    pub fn anonymous() -> Arc<Tenant> {
        static ANON: OnceLock<Arc<Tenant>> = OnceLock::new();
        ANON.get_or_init(|| {
            let mut t = Tenant::with_defaults(ANONYMOUS, false);
            t.identity = 0;
            Arc::new(t)
        })
        .clone()
    }

    fn with_defaults(name: &str, authenticated: bool) -> Tenant {
        Tenant {
            name: name.into(),
            weight: 1,
            max_concurrency: None,
            max_queue: None,
            max_sessions: None,
            max_priority: Priority::Interactive,
            authenticated,
            identity: new_identity(),
        }
    }

    /// The priority of a request that asked for `asked` (None: the default, normal or the
    /// tenant's highest if that is lower).
    pub fn priority(&self, asked: Option<Priority>) -> Result<Priority, PriorityDenied> {
        match asked {
            None => Ok(Priority::Normal.max(self.max_priority)),
            Some(p) if p >= self.max_priority => Ok(p),
            Some(p) => Err(PriorityDenied {
                tenant: self.name.clone(),
                max: self.max_priority,
                asked: p,
            }),
        }
    }

    /// As `Capabilities.tenant`, caps resolved against the executor's defaults.
    pub fn to_proto(&self, slots: usize, queue: usize, sessions: usize) -> sandpool_proto::v1::Tenant {
        let n = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
        sandpool_proto::v1::Tenant {
            name: self.name.to_string(),
            weight: self.weight,
            max_concurrency: n(self.max_concurrency.unwrap_or(slots).min(slots)),
            max_queue: n(self.max_queue.unwrap_or(queue)),
            max_sessions: n(self.max_sessions.unwrap_or(sessions)),
            max_priority: self.max_priority.to_proto() as i32,
        }
    }
}

/// Why a tenants file was refused.
#[derive(Debug, thiserror::Error)]
pub enum TenantsError {
    #[error("{0}: {1}")]
    Read(String, std::io::Error),
    #[error("{0}: {1}")]
    Parse(String, String),
    #[error("{file}: tenant {tenant}: {rule}")]
    Invalid { file: String, tenant: String, rule: String },
    #[error("{0}: no [[tenant]]: with no tenants nobody could call; remove --tenants-file to run without auth")]
    Empty(String),
}

/// One `[[tenant]]` of the file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: String,
    token: Option<String>,
    token_file: Option<PathBuf>,
    weight: Option<u32>,
    max_concurrency: Option<usize>,
    max_queue: Option<usize>,
    max_sessions: Option<usize>,
    max_priority: Option<Priority>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileDoc {
    #[serde(default)]
    tenant: Vec<Entry>,
}

/// Shortest token a tenants file accepts: a guessable token is no identity.
pub const MIN_TOKEN_BYTES: usize = 16;
/// Largest weight: shares stay within what the scheduler's fixed-point strides resolve.
pub const MAX_WEIGHT: u32 = 1000;

/// One table of tenants, immutable; [`Tenants`] swaps in a new one on a change.
#[derive(Debug, Default)]
pub struct Directory {
    entries: Vec<(Box<[u8]>, Arc<Tenant>)>,
    /// The `token_file`s it was read from.
    token_files: Vec<PathBuf>,
}

fn valid_name(n: &str) -> bool {
    let b = n.as_bytes();
    let ok = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.len() <= 63
        && b.iter().all(|c| ok(c) || *c == b'-')
        && b.first().is_some_and(ok)
        && b.last().is_some_and(ok)
}

impl Directory {
    /// The table a tenants file's `text` describes; `read` reads each `token_file`.
    pub fn parse(
        file: &str,
        text: &str,
        read: impl Fn(&Path) -> std::io::Result<String>,
    ) -> Result<Directory, TenantsError> {
        let doc: FileDoc = toml::from_str(text).map_err(|e| TenantsError::Parse(file.to_owned(), e.to_string()))?;
        if doc.tenant.is_empty() {
            return Err(TenantsError::Empty(file.to_owned()));
        }
        let mut entries: Vec<(Box<[u8]>, Arc<Tenant>)> = Vec::with_capacity(doc.tenant.len());
        let mut token_files = Vec::new();
        for e in doc.tenant {
            let bad = |rule: String| TenantsError::Invalid {
                file: file.to_owned(),
                tenant: format!("{:?}", e.name),
                rule,
            };
            if !valid_name(&e.name) {
                return Err(bad(
                    "name: lower-case letters, digits and '-', starting and ending with a letter or digit, at most 63"
                        .into(),
                ));
            }
            if e.name == ANONYMOUS {
                return Err(bad(format!(
                    "name: {ANONYMOUS:?} is the tenant of callers without auth"
                )));
            }
            if entries.iter().any(|(_, t)| *t.name == *e.name) {
                return Err(bad("name: another tenant has it".into()));
            }
            let token = match (&e.token, &e.token_file) {
                (Some(t), None) => t.clone(),
                (None, Some(p)) => {
                    token_files.push(p.clone());
                    read(p).map_err(|err| bad(format!("token_file {}: {err}", p.display())))?
                }
                _ => return Err(bad("set one of token and token_file".into())),
            };
            let token = token.trim();
            if token.len() < MIN_TOKEN_BYTES {
                return Err(bad(format!("the token is shorter than {MIN_TOKEN_BYTES} bytes")));
            }
            if !token.bytes().all(|c| c.is_ascii_graphic()) {
                return Err(bad(
                    "the token: printable ASCII without spaces only (an HTTP header value)".into(),
                ));
            }
            if entries
                .iter()
                .any(|(t, _)| bool::from(t.as_ref().ct_eq(token.as_bytes())))
            {
                return Err(bad("the token: another tenant has the same token".into()));
            }
            let weight = e.weight.unwrap_or(1);
            if !(1..=MAX_WEIGHT).contains(&weight) {
                return Err(bad(format!("weight: 1 to {MAX_WEIGHT}, not {weight}")));
            }
            if e.max_concurrency == Some(0) {
                return Err(bad("max_concurrency: at least 1 (leave it out for every slot)".into()));
            }
            let tenant = Tenant {
                name: e.name.as_str().into(),
                weight,
                max_concurrency: e.max_concurrency,
                max_queue: e.max_queue,
                max_sessions: e.max_sessions,
                max_priority: e.max_priority.unwrap_or(Priority::Interactive),
                authenticated: true,
                identity: new_identity(),
            };
            entries.push((token.as_bytes().into(), Arc::new(tenant)));
        }
        Ok(Directory { entries, token_files })
    }

    /// The `token_file`s the table was read from.
    pub fn token_files(&self) -> &[PathBuf] {
        &self.token_files
    }

    /// One tenant, `default`, with `token` (the single-token mode).
    pub fn single(token: &[u8]) -> Directory {
        Directory {
            entries: vec![(token.into(), Arc::new(Tenant::with_defaults(DEFAULT, true)))],
            token_files: Vec::new(),
        }
    }

    /// The tenant whose token `authorization` (`Bearer <token>`) carries. Every token is
    /// compared, each in constant time.
    pub fn authenticate(&self, authorization: Option<&[u8]>) -> Option<Arc<Tenant>> {
        let given = authorization.and_then(strip_bearer)?;
        let mut found = None;
        for (token, tenant) in &self.entries {
            if bool::from(given.ct_eq(token)) {
                found = Some(tenant.clone());
            }
        }
        found
    }

    /// The tenants, in file order.
    pub fn tenants(&self) -> impl Iterator<Item = &Arc<Tenant>> {
        self.entries.iter().map(|(_, t)| t)
    }

    /// Whether the tenant of `identity` is in this table.
    pub fn has_identity(&self, identity: u64) -> bool {
        self.entries.iter().any(|(_, t)| t.identity == identity)
    }

    /// Gives each tenant whose name `before` has that tenant's identity: the same tenant
    /// with new terms or a rotated token. A name `before` lacks keeps its new identity.
    fn carry_identities(&mut self, before: &Directory) {
        for (_, t) in &mut self.entries {
            if let Some(old) = before.tenants().find(|o| o.name == t.name) {
                Arc::make_mut(t).identity = old.identity;
            }
        }
    }
}

/// The token of `Bearer <token>` (scheme in any case, blanks around the token ignored).
pub fn strip_bearer(h: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = h.split_at_checked(7)?;
    scheme.eq_ignore_ascii_case(b"bearer ").then(|| rest.trim_ascii())
}

/// Where the table comes from.
#[derive(Debug)]
enum Source {
    /// No auth: every caller is `anonymous`.
    Open,
    /// Fixed at start-up (the single token, or a table built in code).
    Fixed,
    /// A tenants file, re-read by [`Tenants::watch`].
    File(PathBuf),
    /// The single token's file (`--auth-token-file`), re-read by [`Tenants::watch`]: a
    /// rotated token takes effect without a restart.
    TokenFile(PathBuf),
}

/// The executor's live tenant table.
#[derive(Debug)]
pub struct Tenants {
    source: Source,
    table: RwLock<Arc<Directory>>,
    /// What the table was read from (the file and its token files), to spot changes.
    read: std::sync::Mutex<Vec<u8>>,
    reloads: AtomicU64,
    reload_errors: AtomicU64,
    /// Directories runs can read (restricted mode): a reloaded table whose files lie under
    /// one is refused, as it would be at start-up.
    runs_read: std::sync::OnceLock<Vec<PathBuf>>,
}

/// The first of `dirs` that holds `file` (both resolved through symlinks where they exist).
pub fn under_any<'a>(file: &Path, dirs: &'a [PathBuf]) -> Option<&'a PathBuf> {
    let real = file.canonicalize().unwrap_or_else(|_| file.to_owned());
    dirs.iter()
        .find(|d| real.starts_with(d.canonicalize().unwrap_or_else(|_| d.to_path_buf())))
}

/// No tenant has the token presented.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("missing or unknown bearer token (`authorization: Bearer <token>`)")]
pub struct Unauthenticated;

/// Reads a tenants file and its token files; also returns every byte read, to spot changes.
fn read_file(path: &Path) -> Result<(Directory, Vec<u8>), TenantsError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| TenantsError::Read(name.clone(), e))?;
    let seen = std::cell::RefCell::new(Vec::with_capacity(text.len() + 64));
    let note = |b: &[u8]| {
        let mut s = seen.borrow_mut();
        s.extend_from_slice(&(b.len() as u64).to_le_bytes());
        s.extend_from_slice(b);
    };
    note(text.as_bytes());
    let dir = Directory::parse(&name, &text, |p| {
        let t = std::fs::read_to_string(p)?;
        note(t.as_bytes());
        Ok(t)
    })?;
    Ok((dir, seen.into_inner()))
}

/// Reads the single token's file: one tenant, `default`.
fn read_token_file(path: &Path) -> Result<(Directory, Vec<u8>), TenantsError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| TenantsError::Read(name.clone(), e))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(TenantsError::Parse(name, "the token is empty".into()));
    }
    Ok((Directory::single(token.as_bytes()), text.into_bytes()))
}

/// Reads what `source` names (a file and what it refers to); None for sources without files.
fn read_source(source: &Source) -> Option<Result<(Directory, Vec<u8>), TenantsError>> {
    match source {
        Source::File(p) => Some(read_file(p)),
        Source::TokenFile(p) => Some(read_token_file(p)),
        Source::Open | Source::Fixed => None,
    }
}

impl Tenants {
    /// No auth: every caller is `anonymous`.
    pub fn open() -> Arc<Tenants> {
        Tenants::new(Source::Open, Directory::default(), Vec::new())
    }

    /// A fixed table (the single token: [`Directory::single`]).
    pub fn fixed(dir: Directory) -> Arc<Tenants> {
        Tenants::new(Source::Fixed, dir, Vec::new())
    }

    /// The table in the tenants file at `path` (read now; [`Tenants::watch`] re-reads it).
    /// Blocks on the file: call it at start-up or off the runtime.
    pub fn from_file(path: &Path) -> Result<Arc<Tenants>, TenantsError> {
        let (dir, read) = read_file(path)?;
        Ok(Tenants::new(Source::File(path.to_owned()), dir, read))
    }

    /// The single token in the file at `path` (read now; [`Tenants::watch`] re-reads it).
    pub fn from_token_file(path: &Path) -> Result<Arc<Tenants>, TenantsError> {
        let (dir, read) = read_token_file(path)?;
        Ok(Tenants::new(Source::TokenFile(path.to_owned()), dir, read))
    }

    fn new(source: Source, dir: Directory, read: Vec<u8>) -> Arc<Tenants> {
        Arc::new(Tenants {
            source,
            table: RwLock::new(Arc::new(dir)),
            read: std::sync::Mutex::new(read),
            reloads: AtomicU64::new(0),
            reload_errors: AtomicU64::new(0),
            runs_read: std::sync::OnceLock::new(),
        })
    }

    /// Refuses, from now on, reloaded tables whose files lie under `dirs` (what runs can
    /// read in restricted mode); the start-up check is the caller's.
    pub fn refuse_files_under(&self, dirs: Vec<PathBuf>) {
        let _ = self.runs_read.set(dirs);
    }

    /// True when callers need no token.
    pub fn is_open(&self) -> bool {
        matches!(self.source, Source::Open)
    }

    /// The table now.
    pub fn table(&self) -> Arc<Directory> {
        self.table.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The caller's tenant, from its `authorization` value.
    pub fn authenticate(&self, authorization: Option<&[u8]>) -> Result<Arc<Tenant>, Unauthenticated> {
        if self.is_open() {
            return Ok(Tenant::anonymous());
        }
        self.table().authenticate(authorization).ok_or(Unauthenticated)
    }

    /// Tables swapped in, and changes refused, since start-up.
    pub fn reloads(&self) -> (u64, u64) {
        (
            self.reloads.load(Ordering::Relaxed),
            self.reload_errors.load(Ordering::Relaxed),
        )
    }

    /// Re-reads the tenants file or the single token's file (off the runtime) and swaps in
    /// its table if anything read changed. Ok(true) when swapped; an error leaves the old table in force.
    pub async fn reload(&self) -> Result<bool, TenantsError> {
        let source = match &self.source {
            Source::File(p) => Source::File(p.clone()),
            Source::TokenFile(p) => Source::TokenFile(p.clone()),
            Source::Open | Source::Fixed => return Ok(false),
        };
        let read = tokio::task::spawn_blocking(move || read_source(&source))
            .await
            .map_err(|e| TenantsError::Read("tenants file".into(), std::io::Error::other(e.to_string())))?;
        let Some(read) = read else { return Ok(false) };
        let checked = read.and_then(|(dir, bytes)| {
            let dirs = self.runs_read.get().map_or(&[][..], Vec::as_slice);
            let files = dir.token_files().iter().chain(match &self.source {
                Source::File(p) | Source::TokenFile(p) => Some(p),
                _ => None,
            });
            for f in files {
                if let Some(d) = under_any(f, dirs) {
                    return Err(TenantsError::Parse(
                        f.display().to_string(),
                        format!(
                            "runs can read it (it is under {}): a token there would leak",
                            d.display()
                        ),
                    ));
                }
            }
            Ok((dir, bytes))
        });
        let (dir, bytes) = match checked {
            Ok(r) => r,
            Err(e) => {
                self.reload_errors.fetch_add(1, Ordering::Relaxed);
                return Err(e);
            }
        };
        let mut last = self.read.lock().unwrap_or_else(|p| p.into_inner());
        if *last == bytes {
            return Ok(false);
        }
        *last = bytes;
        let mut dir = dir;
        let mut table = self.table.write().unwrap_or_else(|p| p.into_inner());
        dir.carry_identities(&table);
        *table = Arc::new(dir);
        drop(table);
        self.reloads.fetch_add(1, Ordering::Relaxed);
        Ok(true)
    }

    /// Re-reads the file every `every` until the table is dropped (a no-op without a file);
    /// `counted(true)` on each change swapped in, `counted(false)` on each refused (logged
    /// once per distinct error; the old table stays).
    pub fn watch(self: &Arc<Self>, every: Duration, counted: impl Fn(bool) + Send + 'static) {
        if !matches!(self.source, Source::File(_) | Source::TokenFile(_)) {
            return;
        }
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut last_error = String::new();
            loop {
                tokio::time::sleep(every).await;
                let Some(t) = weak.upgrade() else { return };
                match t.reload().await {
                    Ok(true) => {
                        counted(true);
                        last_error.clear();
                        let names: Vec<String> = t.table().tenants().map(|t| t.name.to_string()).collect();
                        tracing::info!(tenants = ?names, "tenants file changed: new table in force");
                    }
                    Ok(false) => last_error.clear(),
                    Err(e) => {
                        counted(false);
                        let msg = e.to_string();
                        if msg != last_error {
                            tracing::error!(error = %msg, "tenants file changed but is refused; the old table stays");
                            last_error = msg;
                        }
                    }
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "aaaaaaaaaaaaaaaa-token";
    const B: &str = "bbbbbbbbbbbbbbbb-token";

    fn parse(text: &str) -> Result<Directory, TenantsError> {
        Directory::parse("t.toml", text, |p| match p.to_str() {
            Some("/b") => Ok(format!("{B}\n")),
            _ => Err(std::io::Error::from(std::io::ErrorKind::NotFound)),
        })
    }

    #[test]
    fn a_file_maps_each_token_to_its_tenant_with_defaults_filled_in() {
        let d = parse(&format!(
            "[[tenant]]\nname = \"rl\"\ntoken = \"{A}\"\nweight = 3\nmax_concurrency = 2\nmax_priority = \"interactive\"\n\n\
             [[tenant]]\nname = \"sweeps\"\ntoken_file = \"/b\"\nmax_priority = \"batch\"\nmax_queue = 7\n"
        ))
        .unwrap();
        let rl = d.authenticate(Some(format!("Bearer {A}").as_bytes())).unwrap();
        assert_eq!((&*rl.name, rl.weight, rl.max_concurrency), ("rl", 3, Some(2)));
        let sw = d.authenticate(Some(format!("bearer  {B} ").as_bytes())).unwrap();
        assert_eq!((&*sw.name, sw.weight, sw.max_queue), ("sweeps", 1, Some(7)));
        assert_eq!(sw.max_priority, Priority::Batch);
        assert!(d.authenticate(Some(b"Bearer aaaaaaaaaaaaaaaa-toke")).is_none());
        assert!(d.authenticate(Some(A.as_bytes())).is_none(), "the scheme is required");
        assert!(d.authenticate(None).is_none());
    }

    #[test]
    fn each_rule_of_the_file_is_enforced_and_named() {
        let one = |body: &str| parse(&format!("[[tenant]]\n{body}\n")).unwrap_err().to_string();
        assert!(one(&format!("name = \"Bad\"\ntoken = \"{A}\"")).contains("name:"));
        assert!(one(&format!("name = \"anonymous\"\ntoken = \"{A}\"")).contains("anonymous"));
        assert!(one("name = \"a\"\ntoken = \"short\"").contains("shorter than 16"));
        assert!(one("name = \"a\"").contains("set one of token and token_file"));
        assert!(one(&format!("name = \"a\"\ntoken = \"{A}\"\ntoken_file = \"/b\"")).contains("set one of"));
        assert!(one("name = \"a\"\ntoken_file = \"/missing\"").contains("token_file /missing"));
        assert!(one(&format!("name = \"a\"\ntoken = \"{A}\"\nweight = 0")).contains("weight: 1 to 1000"));
        assert!(one(&format!("name = \"a\"\ntoken = \"{A}\"\nweight = 1001")).contains("weight"));
        assert!(one(&format!("name = \"a\"\ntoken = \"{A}\"\nmax_concurrency = 0")).contains("max_concurrency"));
        assert!(one(&format!("name = \"a\"\ntoken = \"{A}\"\nmax_priority = \"urgent\"")).contains("urgent"));
        assert!(one(&format!("name = \"a\"\ntoken = \"{A}\"\nwieght = 2")).contains("wieght"));
        assert!(one("name = \"a\"\ntoken = \"has a space in it!!\"").contains("printable"));
        let twice = |a: &str, b: &str| {
            parse(&format!(
                "[[tenant]]\nname = \"{a}\"\ntoken = \"{A}\"\n[[tenant]]\nname = \"{b}\"\ntoken = \"{B}\"\n"
            ))
        };
        assert!(
            twice("x", "x")
                .unwrap_err()
                .to_string()
                .contains("another tenant has it")
        );
        assert!(twice("x", "y").is_ok());
        let same_token = parse(&format!(
            "[[tenant]]\nname = \"x\"\ntoken = \"{A}\"\n[[tenant]]\nname = \"y\"\ntoken = \"{A}\"\n"
        ));
        assert!(same_token.unwrap_err().to_string().contains("same token"));
        assert!(matches!(parse(""), Err(TenantsError::Empty(_))));
    }

    #[test]
    fn priorities_default_to_normal_within_the_tenants_highest() {
        let mut t = Tenant::with_defaults("t", true);
        assert_eq!(t.priority(None), Ok(Priority::Normal));
        assert_eq!(t.priority(Some(Priority::Interactive)), Ok(Priority::Interactive));
        t.max_priority = Priority::Batch;
        assert_eq!(t.priority(None), Ok(Priority::Batch));
        assert_eq!(t.priority(Some(Priority::Batch)), Ok(Priority::Batch));
        let denied = t.priority(Some(Priority::Normal)).unwrap_err();
        assert_eq!(
            denied.to_string(),
            "tenant \"t\" may ask for priority batch at most, not normal"
        );
        assert_eq!(Priority::parse("PRIORITY_BATCH"), Some(Priority::Batch));
        assert_eq!(Priority::parse(" Interactive "), Some(Priority::Interactive));
        assert_eq!(Priority::parse("urgent"), None);
        assert_eq!(Priority::from_proto(3), Ok(Some(Priority::Batch)));
        assert_eq!(Priority::from_proto(0), Ok(None));
        assert_eq!(Priority::from_proto(9), Err(9));
    }

    #[tokio::test]
    async fn a_changed_file_is_picked_up_and_a_broken_one_keeps_the_old_table() {
        let dir = tempfile::tempdir().unwrap();
        let (file, tok) = (dir.path().join("tenants.toml"), dir.path().join("tok"));
        std::fs::write(&tok, A).unwrap();
        let body = |name: &str| format!("[[tenant]]\nname = \"{name}\"\ntoken_file = \"{}\"\n", tok.display());
        std::fs::write(&file, body("first")).unwrap();
        let t = Tenants::from_file(&file).unwrap();
        let who = |t: &Tenants, tok: &str| {
            t.authenticate(Some(format!("Bearer {tok}").as_bytes()))
                .map(|t| t.name.to_string())
                .ok()
        };
        assert_eq!(who(&t, A).as_deref(), Some("first"));
        assert!(!t.reload().await.unwrap(), "nothing changed");
        std::fs::write(&file, body("second")).unwrap();
        assert!(t.reload().await.unwrap());
        assert_eq!(who(&t, A).as_deref(), Some("second"));
        // A rotated token in its own file is a change too.
        std::fs::write(&tok, B).unwrap();
        assert!(t.reload().await.unwrap());
        assert_eq!(who(&t, A), None);
        assert_eq!(who(&t, B).as_deref(), Some("second"));
        std::fs::write(&file, "[[tenant]]\nname = \"BROKEN\"\n").unwrap();
        assert!(t.reload().await.is_err());
        assert_eq!(who(&t, B).as_deref(), Some("second"), "the old table stays");
        assert_eq!(t.reloads(), (2, 1));
    }

    #[tokio::test]
    async fn a_tenant_keeps_its_identity_while_its_name_stays_and_a_returning_name_is_new() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("tenants.toml");
        let t = |name: &str, tok: &str| format!("[[tenant]]\nname = \"{name}\"\ntoken = \"{tok}\"\n");
        std::fs::write(&file, t("x", A) + &t("y", B)).unwrap();
        let table = Tenants::from_file(&file).unwrap();
        let id = |tok: &str| {
            table
                .authenticate(Some(format!("Bearer {tok}").as_bytes()))
                .map(|t| t.identity)
        };
        let (x, y) = (id(A).unwrap(), id(B).unwrap());
        assert_ne!(x, y);
        assert_ne!(x, 0, "0 is anonymous'");
        // New terms and a rotated token: the same tenant.
        const A2: &str = "aaaaaaaaaaaaaaaa-rotated";
        std::fs::write(&file, t("x", A2) + &t("y", B) + "weight = 5\n").unwrap();
        assert!(table.reload().await.unwrap());
        assert_eq!((id(A2).unwrap(), id(B).unwrap()), (x, y));
        // Removed, then a tenant given the name again: another identity.
        std::fs::write(&file, t("y", B)).unwrap();
        assert!(table.reload().await.unwrap());
        assert!(!table.table().has_identity(x));
        std::fs::write(&file, t("x", A) + &t("y", B)).unwrap();
        assert!(table.reload().await.unwrap());
        assert_ne!(id(A).unwrap(), x, "a returning name is a new tenant");
        assert_eq!(id(B).unwrap(), y);
    }

    #[tokio::test]
    async fn a_rotated_single_token_takes_effect_without_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("token");
        std::fs::write(&f, "first-token\n").unwrap();
        let t = Tenants::from_token_file(&f).unwrap();
        assert!(t.authenticate(Some(b"Bearer first-token")).is_ok());
        std::fs::write(&f, "second-token\n").unwrap();
        assert!(t.reload().await.unwrap());
        assert!(t.authenticate(Some(b"Bearer first-token")).is_err());
        assert_eq!(&*t.authenticate(Some(b"Bearer second-token")).unwrap().name, DEFAULT);
        std::fs::write(&f, "\n").unwrap();
        assert!(t.reload().await.is_err(), "an emptied file is refused");
        assert!(t.authenticate(Some(b"Bearer second-token")).is_ok());
    }

    #[tokio::test]
    async fn a_reloaded_table_naming_a_token_file_runs_can_read_is_refused() {
        let (dir, runs) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let file = dir.path().join("tenants.toml");
        let (safe, exposed) = (dir.path().join("tok"), runs.path().join("tok"));
        std::fs::write(&safe, A).unwrap();
        std::fs::write(&exposed, B).unwrap();
        let body = |tok: &Path| format!("[[tenant]]\nname = \"t\"\ntoken_file = \"{}\"\n", tok.display());
        std::fs::write(&file, body(&safe)).unwrap();
        let t = Tenants::from_file(&file).unwrap();
        t.refuse_files_under(vec![runs.path().to_owned()]);
        std::fs::write(&file, body(&exposed)).unwrap();
        let e = t.reload().await.unwrap_err();
        assert!(e.to_string().contains("runs can read it"), "{e}");
        assert!(
            t.authenticate(Some(format!("Bearer {A}").as_bytes())).is_ok(),
            "the old table stays"
        );
        assert!(t.authenticate(Some(format!("Bearer {B}").as_bytes())).is_err());
    }

    #[test]
    fn open_tables_let_everyone_in_as_anonymous() {
        let t = Tenants::open();
        assert_eq!(&*t.authenticate(None).unwrap().name, ANONYMOUS);
        let single = Tenants::fixed(Directory::single(b"tok"));
        assert_eq!(&*single.authenticate(Some(b"Bearer tok")).unwrap().name, DEFAULT);
        assert!(single.authenticate(Some(b"Bearer other")).is_err());
    }
}
