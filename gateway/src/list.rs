//! E2B's lists over a whole pool: sandboxes (`GET /sandboxes`, `GET /v2/sandboxes`), which
//! each executor knows only its own of, and snapshots (`GET /snapshots`), which executors
//! sharing a store each know all of (and executors that do not, their own). The gateway asks
//! every executor for one page after the client's cursor and merges those pages into the
//! client's (`limit`, `nextToken`, `x-next-token`), as one executor would page its own list.
//! A page costs at most `limit` entries from each executor, never their whole lists.

use serde_json::Value;

/// Which of E2B's lists a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listing {
    Sandboxes,
    Snapshots,
}

impl Listing {
    /// The field that names an entry.
    fn id_field(self) -> &'static str {
        match self {
            Listing::Sandboxes => "sandboxID",
            Listing::Snapshots => "snapshotID",
        }
    }

    /// An entry's place in the order executors list in: sandboxes oldest first, then by id;
    /// snapshots by id.
    fn key(self, v: &Value) -> (String, String) {
        let id = v[self.id_field()].as_str().unwrap_or_default().to_owned();
        match self {
            Listing::Sandboxes => (v["startedAt"].as_str().unwrap_or_default().to_owned(), id),
            Listing::Snapshots => (String::new(), id),
        }
    }

    /// The cursor after `v`: what an executor's `x-next-token` would be (`<startedAt>_<id>`
    /// for a sandbox, the id for a snapshot), so the same one serves every executor.
    fn cursor(self, v: &Value) -> Option<String> {
        let id = v[self.id_field()].as_str()?;
        match self {
            Listing::Sandboxes => Some(format!("{}_{id}", v["startedAt"].as_str()?)),
            Listing::Snapshots => Some(id.to_owned()),
        }
    }
}

/// Which pool-wide list a request asks for, if any.
pub fn is_list(method: &http::Method, path: &str) -> Option<Listing> {
    if method != http::Method::GET {
        return None;
    }
    match path {
        "/sandboxes" | "/sandboxes/" | "/v2/sandboxes" | "/v2/sandboxes/" => Some(Listing::Sandboxes),
        "/snapshots" | "/snapshots/" => Some(Listing::Snapshots),
        _ => None,
    }
}

/// The client's paging (`limit`, `nextToken`, both as sent) and the rest of its query (its
/// filters), which every executor gets.
pub fn split_query(query: Option<&str>) -> (Option<String>, Option<String>, Vec<String>) {
    let (mut limit, mut token, mut rest) = (None, None, Vec::new());
    for pair in query.unwrap_or_default().split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=').map_or(pair, |(k, _)| k) {
            "limit" => limit = pair.split_once('=').map(|(_, v)| v.to_owned()),
            "nextToken" => token = pair.split_once('=').map(|(_, v)| v.to_owned()),
            _ => rest.push(pair.to_owned()),
        }
    }
    (limit, token, rest)
}

/// The query each executor gets: the client's filters, its page size, and its cursor (a
/// place in the common order, [`Listing::cursor`]).
pub fn executor_query(filters: &[String], limit: usize, token: Option<&str>) -> String {
    let mut q = filters.to_vec();
    q.push(format!("limit={limit}"));
    if let Some(t) = token.filter(|t| !t.is_empty()) {
        q.push(format!("nextToken={t}"));
    }
    q.join("&")
}

/// One page of the executors' pages (each the first `limit` entries after the client's
/// cursor, `more` when any executor had more), in the order an executor lists in, each entry
/// once; and the next page's cursor when there is more.
///
/// Executors sharing a session store each list its paused sandboxes and its snapshots: a
/// sandbox is shown once, running where one executor runs it; a snapshot once.
pub fn page(listing: Listing, lists: Vec<Vec<Value>>, limit: usize, more: bool) -> (Vec<Value>, Option<String>) {
    let mut all: Vec<Value> = lists.into_iter().flatten().collect();
    let id = listing.id_field();
    let running: std::collections::HashSet<String> = all
        .iter()
        .filter(|v| v["state"] != "paused")
        .filter_map(|v| v[id].as_str().map(str::to_owned))
        .collect();
    all.retain(|v| v["state"] != "paused" || !v[id].as_str().is_some_and(|id| running.contains(id)));
    all.sort_by_key(|v| listing.key(v));
    all.dedup_by(|a, b| a[id] == b[id]);
    let more = more || all.len() > limit;
    all.truncate(limit);
    let next = if more {
        all.last().and_then(|v| listing.cursor(v))
    } else {
        None
    };
    (all, next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_page_merges_the_executors_pages() {
        let s = |id: &str, t: &str| json!({"sandboxID": id, "startedAt": t});
        let a = vec![
            s("a1-x", "2026-01-01T00:00:01.000Z"),
            s("a2-x", "2026-01-01T00:00:03.000Z"),
        ];
        let b = vec![s("b1-y", "2026-01-01T00:00:02.000Z")];
        let (p, next) = page(Listing::Sandboxes, vec![a.clone(), b.clone()], 2, false);
        let ids: Vec<&str> = p.iter().filter_map(|v| v["sandboxID"].as_str()).collect();
        assert_eq!(ids, ["a1-x", "b1-y"]);
        assert_eq!(next.as_deref(), Some("2026-01-01T00:00:02.000Z_b1-y"));
        let (p, next) = page(Listing::Sandboxes, vec![a[1..].to_vec(), vec![]], 2, false);
        assert_eq!(p.len(), 1);
        assert_eq!(p[0]["sandboxID"], "a2-x");
        assert_eq!(next, None);
        // An executor that says it has more makes a next page, even when this one is short.
        let (_, next) = page(Listing::Sandboxes, vec![a[..1].to_vec()], 2, true);
        assert_eq!(next.as_deref(), Some("2026-01-01T00:00:01.000Z_a1-x"));
    }

    #[test]
    fn a_paused_sandbox_every_executor_lists_is_shown_once() {
        let s = |id: &str, t: &str, state: &str| json!({"sandboxID": id, "startedAt": t, "state": state});
        let paused = s("p1-x", "2026-01-01T00:00:01.000Z", "paused");
        let a = vec![paused.clone(), s("a1-x", "2026-01-01T00:00:02.000Z", "running")];
        let b = vec![paused.clone(), s("r1-y", "2026-01-01T00:00:03.000Z", "paused")];
        // r1-y was resumed on a third executor meanwhile: running there, paused in the store.
        let c = vec![s("r1-y", "2026-01-01T00:00:04.000Z", "running")];
        let (p, next) = page(Listing::Sandboxes, vec![a, b, c], 10, false);
        let shown: Vec<(&str, &str)> = p
            .iter()
            .filter_map(|v| Some((v["sandboxID"].as_str()?, v["state"].as_str()?)))
            .collect();
        assert_eq!(shown, [("p1-x", "paused"), ("a1-x", "running"), ("r1-y", "running")]);
        assert_eq!(next, None);
    }

    #[test]
    fn the_filters_and_the_page_go_to_every_executor() {
        let (l, t, q) = split_query(Some("metadata=run%3D1&limit=5&nextToken=abc&state=running"));
        assert_eq!((l.as_deref(), t.as_deref()), (Some("5"), Some("abc")));
        assert_eq!(q, ["metadata=run%3D1", "state=running"]);
        assert_eq!(
            executor_query(&q, 5, t.as_deref()),
            "metadata=run%3D1&state=running&limit=5&nextToken=abc"
        );
        assert_eq!(executor_query(&[], 100, None), "limit=100");
        assert_eq!(is_list(&http::Method::GET, "/v2/sandboxes"), Some(Listing::Sandboxes));
        assert_eq!(
            is_list(&http::Method::POST, "/v2/sandboxes"),
            None,
            "create is stateless"
        );
        assert_eq!(
            is_list(&http::Method::GET, "/sandboxes/abc-x"),
            None,
            "one sandbox is its executor's"
        );
        assert_eq!(is_list(&http::Method::GET, "/snapshots"), Some(Listing::Snapshots));
    }

    #[test]
    fn snapshots_are_merged_by_id_once_each_with_the_id_as_cursor() {
        let s = |id: &str| json!({"snapshotID": id, "names": [id]});
        // Two executors sharing a store list the same snapshots; a third, its own.
        let a = vec![s("snap-1"), s("snap-3")];
        let b = vec![s("snap-1"), s("snap-3")];
        let c = vec![s("snap-2")];
        let (p, next) = page(Listing::Snapshots, vec![a, b, c], 2, false);
        let ids: Vec<&str> = p.iter().filter_map(|v| v["snapshotID"].as_str()).collect();
        assert_eq!(ids, ["snap-1", "snap-2"]);
        assert_eq!(next.as_deref(), Some("snap-2"));
        let (p, next) = page(Listing::Snapshots, vec![vec![s("snap-3")], vec![s("snap-3")]], 2, false);
        assert_eq!(p.len(), 1);
        assert_eq!(next, None);
    }
}
