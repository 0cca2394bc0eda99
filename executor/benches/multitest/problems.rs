//! Generated stdin/stdout problems for the multi-test benchmark and its tests:
//! a dozen kinds (sum, sort, prefix sums, BFS on a grid, ...), each test's input
//! from a seeded generator and its expected output from a reference written
//! here, and C++ and Python solutions that are correct, wrong on some tests
//! (off by one) or loop forever on some tests (TLE).
//!
//! Everything is deterministic: the same arguments give the same problems.
//! Only `std`: `tests/tests/judge_multitest.rs` includes this file too.

use std::fmt::Write as _;

/// A solution's language.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lang {
    Cpp,
    Python,
}

impl Lang {
    /// The executor's language name.
    pub fn name(self) -> &'static str {
        match self {
            Lang::Cpp => "cpp",
            Lang::Python => "python",
        }
    }
}

/// How a solution behaves on the tests it fails ([`Problem::failing`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// Right on every test.
    Correct,
    /// Off by one on the failing tests.
    Wrong,
    /// Loops forever on the failing tests.
    Tle,
}

impl Variant {
    /// The verdict a judge must give the whole problem.
    pub fn verdict(self) -> &'static str {
        match self {
            Variant::Correct => "OK",
            Variant::Wrong => "WRONG_ANSWER",
            Variant::Tle => "TIME_LIMIT_EXCEEDED",
        }
    }
}

/// One problem: a solution and its tests.
#[derive(Debug, Clone)]
pub struct Problem {
    pub id: String,
    pub kind: &'static str,
    pub lang: Lang,
    pub variant: Variant,
    pub code: String,
    /// (stdin, expected stdout) per test.
    pub tests: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Problem {
    /// Whether test `i` is one a wrong or TLE solution fails (a correct one passes all).
    pub fn failing(&self, i: usize) -> bool {
        self.variant != Variant::Correct && triggers(i)
    }

    /// The first test the solution fails, if any.
    pub fn first_failure(&self) -> Option<usize> {
        (0..self.tests.len()).find(|&i| self.failing(i))
    }
}

/// Tests 6, 16, 26, ...: where wrong and TLE solutions fail (each test's `n` is 7 mod 8
/// exactly there; the solutions misbehave on that condition).
pub fn triggers(i: usize) -> bool {
    i % 10 == 6
}

/// The variant of problem number `p`: 5 in 8 correct, 2 wrong, 1 TLE.
pub fn variant_of(p: usize) -> Variant {
    match p % 8 {
        5 | 6 => Variant::Wrong,
        7 => Variant::Tle,
        _ => Variant::Correct,
    }
}

/// How C++ solutions include the standard library.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CppHeaders {
    /// The headers each program uses, one by one.
    Individual,
    /// `#include <bits/stdc++.h>`, as most competitive programmers write.
    BitsStdc,
}

/// Problems `0..count` in `lang`, `tests` tests each. Problem `p` is the same problem
/// (kind, tests, variant) in every language.
pub fn problems(count: usize, tests: usize, lang: Lang, headers: CppHeaders) -> Vec<Problem> {
    (0..count).map(|p| problem(p, tests, lang, headers)).collect()
}

/// Problem number `p`.
pub fn problem(p: usize, tests: usize, lang: Lang, headers: CppHeaders) -> Problem {
    let kind = &KINDS[p % KINDS.len()];
    let variant = variant_of(p);
    let mut rng = Rng(0x5eed_0000_0000_0000 ^ (p as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let tests = (0..tests)
        .map(|i| {
            let (input, expected) = (kind.generate)(&mut rng, triggers(i));
            (input.into_bytes(), expected.into_bytes())
        })
        .collect();
    let id = format!("{p}-{}-{}-{:?}", kind.name, lang.name(), variant).to_lowercase();
    Problem {
        code: code(kind, lang, variant, headers, &id),
        id,
        kind: kind.name,
        lang,
        variant,
        tests,
    }
}

/// The number of problem kinds.
pub fn kinds() -> usize {
    KINDS.len()
}

fn code(kind: &Kind, lang: Lang, variant: Variant, headers: CppHeaders, id: &str) -> String {
    match lang {
        Lang::Cpp => {
            let tle = match variant {
                Variant::Tle => "{ volatile unsigned long long spin = 0; while (n % 8 == 7) spin = spin + 1; }",
                _ => "",
            };
            let wrong = match variant {
                Variant::Wrong => format!("if (n % 8 == 7) {{ {} }}", kind.wrong_cpp),
                _ => String::new(),
            };
            let includes = match headers {
                CppHeaders::BitsStdc => "#include <bits/stdc++.h>\n".to_owned(),
                CppHeaders::Individual => ["iostream", "vector", "algorithm", "string", "set", "queue", "numeric"]
                    .iter()
                    .fold(String::new(), |mut s, h| {
                        let _ = writeln!(s, "#include <{h}>");
                        s
                    }),
            };
            format!(
                "// problem {id}\n{includes}using namespace std;\n{}",
                kind.cpp.replace("@TLE@", tle).replace("@WRONG@", &wrong)
            )
        }
        Lang::Python => {
            let tle = match variant {
                Variant::Tle => "while n % 8 == 7: pass",
                _ => "pass",
            };
            let wrong = match variant {
                Variant::Wrong => format!("if n % 8 == 7: {}", kind.wrong_py),
                _ => "pass".to_owned(),
            };
            format!(
                "# problem {id}\nimport sys\n{}",
                kind.py.replace("@TLE@", tle).replace("@WRONG@", &wrong)
            )
        }
    }
}

/// splitmix64: small, seeded, the same everywhere.
pub struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % ((hi - lo + 1) as u64)) as i64
    }

    /// A size in `lo..=hi` (lo ≥ 8) that is 7 mod 8 exactly when `trigger`.
    fn size(&mut self, lo: i64, hi: i64, trigger: bool) -> i64 {
        let n = self.range(lo, hi);
        let base = n - n % 8;
        match (trigger, n % 8) {
            (true, _) => base + 7,
            (false, 7) => base + 6,
            (false, _) => n,
        }
    }
}

/// A problem kind: its generator (input, expected output) and solutions with two holes:
/// `@TLE@` right after `n` is read, `@WRONG@` where `wrong_*` can change the answer.
struct Kind {
    name: &'static str,
    generate: fn(&mut Rng, bool) -> (String, String),
    cpp: &'static str,
    wrong_cpp: &'static str,
    py: &'static str,
    wrong_py: &'static str,
}

fn join<T: ToString>(v: &[T], sep: &str) -> String {
    v.iter().map(ToString::to_string).collect::<Vec<_>>().join(sep)
}

fn numbers(rng: &mut Rng, n: i64, lo: i64, hi: i64) -> Vec<i64> {
    (0..n).map(|_| rng.range(lo, hi)).collect()
}

const KINDS: [Kind; 12] = [
    Kind {
        name: "sum",
        generate: |rng, t| {
            let n = rng.size(8, 2000, t);
            let a = numbers(rng, n, -1_000_000_000, 1_000_000_000);
            (
                format!("{n}\n{}\n", join(&a, " ")),
                format!("{}\n", a.iter().sum::<i64>()),
            )
        },
        cpp: r#"int main() {
    ios::sync_with_stdio(false); cin.tie(nullptr);
    long long n; cin >> n;
    @TLE@
    long long s = 0;
    for (long long i = 0; i < n; i++) { long long x; cin >> x; s += x; }
    @WRONG@
    cout << s << "\n";
}
"#,
        wrong_cpp: "s += 1;",
        py: r#"data = sys.stdin.buffer.read().split()
n = int(data[0])
@TLE@
s = sum(map(int, data[1:1 + n]))
@WRONG@
print(s)
"#,
        wrong_py: "s += 1",
    },
    Kind {
        name: "sort",
        generate: |rng, t| {
            let n = rng.size(8, 2000, t);
            let mut a = numbers(rng, n, -1_000_000, 1_000_000);
            let input = format!("{n}\n{}\n", join(&a, " "));
            a.sort();
            (input, format!("{}\n", join(&a, " ")))
        },
        cpp: r#"int main() {
    ios::sync_with_stdio(false); cin.tie(nullptr);
    int n; cin >> n;
    @TLE@
    vector<long long> a(n);
    for (auto &x : a) cin >> x;
    sort(a.begin(), a.end());
    @WRONG@
    for (int i = 0; i < n; i++) cout << a[i] << (i + 1 < n ? ' ' : '\n');
}
"#,
        wrong_cpp: "a[0] += 1;",
        py: r#"data = sys.stdin.buffer.read().split()
n = int(data[0])
@TLE@
a = sorted(map(int, data[1:1 + n]))
@WRONG@
print(" ".join(map(str, a)))
"#,
        wrong_py: "a[0] += 1",
    },
    Kind {
        name: "prefix-sums",
        generate: |rng, t| {
            let n = rng.size(8, 2000, t);
            let a = numbers(rng, n, -1000, 1000);
            let mut p = vec![0i64];
            for x in &a {
                p.push(p[p.len() - 1] + x);
            }
            let mut input = format!("{n}\n{}\n{n}\n", join(&a, " "));
            let mut out = String::new();
            for _ in 0..n {
                let l = rng.range(1, n);
                let r = rng.range(l, n);
                let _ = writeln!(input, "{l} {r}");
                let _ = writeln!(out, "{}", p[r as usize] - p[l as usize - 1]);
            }
            (input, out)
        },
        cpp: r#"int main() {
    ios::sync_with_stdio(false); cin.tie(nullptr);
    int n; cin >> n;
    @TLE@
    vector<long long> p(n + 1, 0);
    for (int i = 1; i <= n; i++) { long long x; cin >> x; p[i] = p[i - 1] + x; }
    int q; cin >> q;
    vector<long long> out(q);
    for (auto &o : out) { int l, r; cin >> l >> r; o = p[r] - p[l - 1]; }
    @WRONG@
    for (auto o : out) cout << o << "\n";
}
"#,
        wrong_cpp: "out[0] += 1;",
        py: r#"data = sys.stdin.buffer.read().split()
n = int(data[0])
@TLE@
p = [0]
for x in data[1:1 + n]:
    p.append(p[-1] + int(x))
q = int(data[1 + n])
it = iter(data[2 + n:])
out = [p[int(r)] - p[int(l) - 1] for l, r in zip(it, it)][:q]
@WRONG@
print("\n".join(map(str, out)))
"#,
        wrong_py: "out[0] += 1",
    },
    Kind {
        name: "grid-bfs",
        generate: |rng, t| {
            let n = rng.size(8, 60, t) as usize;
            let m = rng.range(8, 60) as usize;
            let mut g: Vec<Vec<u8>> = (0..n)
                .map(|_| {
                    (0..m)
                        .map(|_| if rng.range(0, 99) < 28 { b'#' } else { b'.' })
                        .collect()
                })
                .collect();
            g[0][0] = b'.';
            g[n - 1][m - 1] = b'.';
            let mut d = vec![vec![-1i64; m]; n];
            let mut q = std::collections::VecDeque::from([(0usize, 0usize)]);
            d[0][0] = 0;
            while let Some((r, c)) = q.pop_front() {
                let next = [(r.wrapping_sub(1), c), (r + 1, c), (r, c.wrapping_sub(1)), (r, c + 1)];
                for (nr, nc) in next {
                    if nr < n && nc < m && g[nr][nc] == b'.' && d[nr][nc] < 0 {
                        d[nr][nc] = d[r][c] + 1;
                        q.push_back((nr, nc));
                    }
                }
            }
            let rows: Vec<String> = g.iter().map(|r| String::from_utf8_lossy(r).into_owned()).collect();
            (
                format!("{n} {m}\n{}\n", rows.join("\n")),
                format!("{}\n", d[n - 1][m - 1]),
            )
        },
        cpp: r#"int main() {
    ios::sync_with_stdio(false); cin.tie(nullptr);
    int n, m; cin >> n >> m;
    @TLE@
    vector<string> g(n);
    for (auto &r : g) cin >> r;
    vector<vector<int>> d(n, vector<int>(m, -1));
    queue<pair<int, int>> q;
    d[0][0] = 0; q.push({0, 0});
    int dr[] = {-1, 1, 0, 0}, dc[] = {0, 0, -1, 1};
    while (!q.empty()) {
        auto [r, c] = q.front(); q.pop();
        for (int k = 0; k < 4; k++) {
            int nr = r + dr[k], nc = c + dc[k];
            if (nr >= 0 && nr < n && nc >= 0 && nc < m && g[nr][nc] == '.' && d[nr][nc] < 0) {
                d[nr][nc] = d[r][c] + 1; q.push({nr, nc});
            }
        }
    }
    int ans = d[n - 1][m - 1];
    @WRONG@
    cout << ans << "\n";
}
"#,
        wrong_cpp: "ans += 1;",
        py: r#"from collections import deque
data = sys.stdin.read().split()
n, m = int(data[0]), int(data[1])
@TLE@
g = data[2:2 + n]
d = [[-1] * m for _ in range(n)]
d[0][0] = 0
q = deque([(0, 0)])
while q:
    r, c = q.popleft()
    for nr, nc in ((r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1)):
        if 0 <= nr < n and 0 <= nc < m and g[nr][nc] == "." and d[nr][nc] < 0:
            d[nr][nc] = d[r][c] + 1
            q.append((nr, nc))
ans = d[n - 1][m - 1]
@WRONG@
print(ans)
"#,
        wrong_py: "ans += 1",
    },
    Kind {
        name: "max-subarray",
        generate: |rng, t| {
            let n = rng.size(8, 2000, t);
            let a = numbers(rng, n, -1_000_000, 1_000_000);
            let (mut best, mut cur) = (i64::MIN, 0i64);
            for x in &a {
                cur = (cur + x).max(*x);
                best = best.max(cur);
            }
            (format!("{n}\n{}\n", join(&a, " ")), format!("{best}\n"))
        },
        cpp: r#"int main() {
    ios::sync_with_stdio(false); cin.tie(nullptr);
    long long n; cin >> n;
    @TLE@
    long long best = -(1LL << 62), cur = 0;
    for (long long i = 0; i < n; i++) {
        long long x; cin >> x;
        cur = max(cur + x, x);
        best = max(best, cur);
    }
    @WRONG@
    cout << best << "\n";
}
"#,
        wrong_cpp: "best += 1;",
        py: r#"data = sys.stdin.buffer.read().split()
n = int(data[0])
@TLE@
best, cur = None, 0
for x in map(int, data[1:1 + n]):
    cur = max(cur + x, x)
    best = cur if best is None or cur > best else best
@WRONG@
print(best)
"#,
        wrong_py: "best += 1",
    },
    Kind {
        name: "distinct",
        generate: |rng, t| {
            let n = rng.size(8, 2000, t);
            let a = numbers(rng, n, 1, n);
            let d: std::collections::BTreeSet<_> = a.iter().collect();
            (format!("{n}\n{}\n", join(&a, " ")), format!("{}\n", d.len()))
        },
        cpp: r#"int main() {
    ios::sync_with_stdio(false); cin.tie(nullptr);
    int n; cin >> n;
    @TLE@
    set<long long> s;
    for (int i = 0; i < n; i++) { long long x; cin >> x; s.insert(x); }
    long long c = s.size();
    @WRONG@
    cout << c << "\n";
}
"#,
        wrong_cpp: "c += 1;",
        py: r#"data = sys.stdin.buffer.read().split()
n = int(data[0])
@TLE@
c = len(set(data[1:1 + n]))
@WRONG@
print(c)
"#,
        wrong_py: "c += 1",
    },
    Kind {
        name: "gcd-pairs",
        generate: |rng, t| {
            let n = rng.size(8, 1000, t);
            let gcd = |mut a: i64, mut b: i64| {
                while b != 0 {
                    (a, b) = (b, a % b);
                }
                a
            };
            let mut input = format!("{n}\n");
            let mut out = String::new();
            for _ in 0..n {
                let k = rng.range(1, 1000);
                let (a, b) = (k * rng.range(1, 1_000_000), k * rng.range(1, 1_000_000));
                let _ = writeln!(input, "{a} {b}");
                let _ = writeln!(out, "{}", gcd(a, b));
            }
            (input, out)
        },
        cpp: r#"int main() {
    ios::sync_with_stdio(false); cin.tie(nullptr);
    int n; cin >> n;
    @TLE@
    vector<long long> out(n);
    for (auto &o : out) { long long a, b; cin >> a >> b; o = gcd(a, b); }
    @WRONG@
    for (auto o : out) cout << o << "\n";
}
"#,
        wrong_cpp: "out[0] += 1;",
        py: r#"from math import gcd
data = sys.stdin.buffer.read().split()
n = int(data[0])
@TLE@
it = iter(map(int, data[1:1 + 2 * n]))
out = [gcd(a, b) for a, b in zip(it, it)]
@WRONG@
print("\n".join(map(str, out)))
"#,
        wrong_py: "out[0] += 1",
    },
    Kind {
        name: "lis",
        generate: |rng, t| {
            let n = rng.size(8, 2000, t);
            let a = numbers(rng, n, 1, 1_000_000);
            let mut tails: Vec<i64> = Vec::new();
            for x in &a {
                match tails.binary_search(x) {
                    Ok(_) => {}
                    Err(i) if i == tails.len() => tails.push(*x),
                    Err(i) => tails[i] = *x,
                }
            }
            (format!("{n}\n{}\n", join(&a, " ")), format!("{}\n", tails.len()))
        },
        cpp: r#"int main() {
    ios::sync_with_stdio(false); cin.tie(nullptr);
    int n; cin >> n;
    @TLE@
    vector<long long> tails;
    for (int i = 0; i < n; i++) {
        long long x; cin >> x;
        auto it = lower_bound(tails.begin(), tails.end(), x);
        if (it == tails.end()) tails.push_back(x); else *it = x;
    }
    long long len = tails.size();
    @WRONG@
    cout << len << "\n";
}
"#,
        wrong_cpp: "len += 1;",
        py: r#"from bisect import bisect_left
data = sys.stdin.buffer.read().split()
n = int(data[0])
@TLE@
tails = []
for x in map(int, data[1:1 + n]):
    i = bisect_left(tails, x)
    if i == len(tails):
        tails.append(x)
    else:
        tails[i] = x
length = len(tails)
@WRONG@
print(length)
"#,
        wrong_py: "length += 1",
    },
    Kind {
        name: "components",
        generate: |rng, t| {
            let n = rng.size(8, 2000, t);
            let m = rng.range(0, n);
            let mut parent: Vec<usize> = (0..=n as usize).collect();
            fn find(p: &mut [usize], x: usize) -> usize {
                let mut r = x;
                while p[r] != r {
                    r = p[r];
                }
                let mut x = x;
                while p[x] != r {
                    (p[x], x) = (r, p[x]);
                }
                r
            }
            let mut comps = n;
            let mut input = format!("{n} {m}\n");
            for _ in 0..m {
                let (a, b) = (rng.range(1, n) as usize, rng.range(1, n) as usize);
                let _ = writeln!(input, "{a} {b}");
                let (ra, rb) = (find(&mut parent, a), find(&mut parent, b));
                if ra != rb {
                    parent[ra] = rb;
                    comps -= 1;
                }
            }
            (input, format!("{comps}\n"))
        },
        cpp: r#"vector<int> par;
int find(int x) { while (par[x] != x) x = par[x] = par[par[x]]; return x; }
int main() {
    ios::sync_with_stdio(false); cin.tie(nullptr);
    int n, m; cin >> n >> m;
    @TLE@
    par.resize(n + 1);
    iota(par.begin(), par.end(), 0);
    long long comps = n;
    for (int i = 0; i < m; i++) {
        int a, b; cin >> a >> b;
        a = find(a); b = find(b);
        if (a != b) { par[a] = b; comps--; }
    }
    @WRONG@
    cout << comps << "\n";
}
"#,
        wrong_cpp: "comps += 1;",
        py: r#"data = sys.stdin.buffer.read().split()
n, m = int(data[0]), int(data[1])
@TLE@
par = list(range(n + 1))
def find(x):
    while par[x] != x:
        par[x] = par[par[x]]
        x = par[x]
    return x
comps = n
for i in range(m):
    a, b = find(int(data[2 + 2 * i])), find(int(data[3 + 2 * i]))
    if a != b:
        par[a] = b
        comps -= 1
@WRONG@
print(comps)
"#,
        wrong_py: "comps += 1",
    },
    Kind {
        name: "knapsack",
        generate: |rng, t| {
            let n = rng.size(8, 60, t);
            let cap = rng.range(10, 1000) as usize;
            let items: Vec<(usize, i64)> = (0..n)
                .map(|_| (rng.range(1, 100) as usize, rng.range(1, 1000)))
                .collect();
            let mut best = vec![0i64; cap + 1];
            for &(w, v) in &items {
                for c in (w..=cap).rev() {
                    best[c] = best[c].max(best[c - w] + v);
                }
            }
            let mut input = format!("{n} {cap}\n");
            for (w, v) in &items {
                let _ = writeln!(input, "{w} {v}");
            }
            (input, format!("{}\n", best[cap]))
        },
        cpp: r#"int main() {
    ios::sync_with_stdio(false); cin.tie(nullptr);
    int n, cap; cin >> n >> cap;
    @TLE@
    vector<long long> best(cap + 1, 0);
    for (int i = 0; i < n; i++) {
        int w; long long v; cin >> w >> v;
        for (int c = cap; c >= w; c--) best[c] = max(best[c], best[c - w] + v);
    }
    long long ans = best[cap];
    @WRONG@
    cout << ans << "\n";
}
"#,
        wrong_cpp: "ans += 1;",
        py: r#"data = sys.stdin.buffer.read().split()
n, cap = int(data[0]), int(data[1])
@TLE@
best = [0] * (cap + 1)
for i in range(n):
    w, v = int(data[2 + 2 * i]), int(data[3 + 2 * i])
    for c in range(cap, w - 1, -1):
        if best[c - w] + v > best[c]:
            best[c] = best[c - w] + v
ans = best[cap]
@WRONG@
print(ans)
"#,
        wrong_py: "ans += 1",
    },
    Kind {
        name: "count-primes",
        generate: |rng, t| {
            let n = rng.size(1000, 200_000, t) as usize;
            let mut sieve = vec![true; n + 1];
            let mut count = 0;
            for i in 2..=n {
                if sieve[i] {
                    count += 1;
                    for j in (i * i..=n).step_by(i) {
                        sieve[j] = false;
                    }
                }
            }
            (format!("{n}\n"), format!("{count}\n"))
        },
        cpp: r#"int main() {
    long long n; cin >> n;
    @TLE@
    vector<bool> comp(n + 1, false);
    long long c = 0;
    for (long long i = 2; i <= n; i++) {
        if (comp[i]) continue;
        c++;
        for (long long j = i * i; j <= n; j += i) comp[j] = true;
    }
    @WRONG@
    cout << c << "\n";
}
"#,
        wrong_cpp: "c += 1;",
        py: r#"n = int(sys.stdin.readline())
@TLE@
sieve = bytearray([1]) * (n + 1)
sieve[0:2] = b"\x00\x00"
for i in range(2, int(n ** 0.5) + 1):
    if sieve[i]:
        sieve[i * i::i] = bytes(len(range(i * i, n + 1, i)))
c = sum(sieve)
@WRONG@
print(c)
"#,
        wrong_py: "c += 1",
    },
    Kind {
        name: "palindromes",
        generate: |rng, t| {
            let n = rng.size(8, 2000, t);
            let words: Vec<String> = (0..n)
                .map(|_| {
                    let len = rng.range(1, 6);
                    (0..len).map(|_| if rng.range(0, 1) == 0 { 'a' } else { 'b' }).collect()
                })
                .collect();
            let count = words.iter().filter(|w| w.chars().eq(w.chars().rev())).count();
            (format!("{n}\n{}\n", words.join("\n")), format!("{count}\n"))
        },
        cpp: r#"int main() {
    ios::sync_with_stdio(false); cin.tie(nullptr);
    int n; cin >> n;
    @TLE@
    long long c = 0;
    for (int i = 0; i < n; i++) {
        string w; cin >> w;
        if (equal(w.begin(), w.end(), w.rbegin())) c++;
    }
    @WRONG@
    cout << c << "\n";
}
"#,
        wrong_cpp: "c += 1;",
        py: r#"data = sys.stdin.read().split()
n = int(data[0])
@TLE@
c = sum(1 for w in data[1:1 + n] if w == w[::-1])
@WRONG@
print(c)
"#,
        wrong_py: "c += 1",
    },
];
