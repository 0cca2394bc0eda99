//! E2B's list (`GET /sandboxes`, `GET /v2/sandboxes`) over a whole pool: each executor
//! knows only its own sandboxes, so the gateway asks every executor and merges their
//! answers, then pages the merged list itself (`limit`, `nextToken`, `x-next-token`) as
//! one executor would.

use serde_json::Value;

/// Whether a request is a pool-wide list.
pub fn is_list(method: &http::Method, path: &str) -> bool {
    method == http::Method::GET && matches!(path, "/sandboxes" | "/sandboxes/" | "/v2/sandboxes" | "/v2/sandboxes/")
}

/// The client's paging (`limit`, `nextToken`), and the query each executor gets: the rest
/// of the client's (its filters), asking for everything.
pub fn split_query(query: Option<&str>) -> (Option<String>, Option<String>, String) {
    let (mut limit, mut token, mut rest) = (None, None, Vec::new());
    for pair in query.unwrap_or_default().split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=').map_or(pair, |(k, _)| k) {
            "limit" => limit = pair.split_once('=').map(|(_, v)| v.to_owned()),
            "nextToken" => token = pair.split_once('=').map(|(_, v)| v.to_owned()),
            _ => rest.push(pair),
        }
    }
    rest.push("limit=1000");
    (limit, token, rest.join("&"))
}

/// One page of the merged lists: oldest first (then by id, as an executor orders them),
/// after the sandbox named by `token`; and the next page's token when there is more.
pub fn page(lists: Vec<Vec<Value>>, limit: usize, token: Option<&str>) -> (Vec<Value>, Option<String>) {
    let mut all: Vec<Value> = lists.into_iter().flatten().collect();
    let key = |v: &Value| {
        (
            v["startedAt"].as_str().unwrap_or_default().to_owned(),
            v["sandboxID"].as_str().unwrap_or_default().to_owned(),
        )
    };
    all.sort_by_key(key);
    let start = match token.filter(|t| !t.is_empty()) {
        Some(t) => all
            .iter()
            .position(|v| v["sandboxID"] == t)
            .map_or(all.len(), |p| p + 1),
        None => 0,
    };
    let more = all.len() > start + limit;
    let page: Vec<Value> = all.into_iter().skip(start).take(limit).collect();
    let next = if more {
        page.last().and_then(|v| v["sandboxID"].as_str()).map(str::to_owned)
    } else {
        None
    };
    (page, next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paging_is_over_the_merged_lists() {
        let s = |id: &str, t: &str| json!({"sandboxID": id, "startedAt": t});
        let a = vec![
            s("a1-x", "2026-01-01T00:00:01.000Z"),
            s("a2-x", "2026-01-01T00:00:03.000Z"),
        ];
        let b = vec![s("b1-y", "2026-01-01T00:00:02.000Z")];
        let (p, next) = page(vec![a.clone(), b.clone()], 2, None);
        let ids: Vec<&str> = p.iter().filter_map(|v| v["sandboxID"].as_str()).collect();
        assert_eq!(ids, ["a1-x", "b1-y"]);
        assert_eq!(next.as_deref(), Some("b1-y"));
        let (p, next) = page(vec![a, b], 2, Some("b1-y"));
        assert_eq!(p.len(), 1);
        assert_eq!(p[0]["sandboxID"], "a2-x");
        assert_eq!(next, None);
    }

    #[test]
    fn the_filters_go_to_every_executor_the_paging_stays_here() {
        let (l, t, q) = split_query(Some("metadata=run%3D1&limit=5&nextToken=abc&state=running"));
        assert_eq!((l.as_deref(), t.as_deref()), (Some("5"), Some("abc")));
        assert_eq!(q, "metadata=run%3D1&state=running&limit=1000");
        assert!(is_list(&http::Method::GET, "/v2/sandboxes"));
        assert!(!is_list(&http::Method::POST, "/v2/sandboxes"), "create is stateless");
        assert!(
            !is_list(&http::Method::GET, "/sandboxes/abc-x"),
            "one sandbox is its executor's"
        );
    }
}
