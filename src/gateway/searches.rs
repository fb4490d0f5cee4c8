//! What the `tool_search` mode has seen, for the status page: the most
//! asked queries and how often their first result was the next tool
//! called. A bounded table ([`MAX_QUERIES`] queries of [`MAX_QUERY_CHARS`]
//! characters), whatever clients send.

use std::collections::VecDeque;

use parking_lot::Mutex;

/// Distinct queries the status page's table keeps.
pub(crate) const MAX_QUERIES: usize = 32;
/// A query is kept (and shown) cut to this many characters.
pub(crate) const MAX_QUERY_CHARS: usize = 80;
/// Searches whose first result waits to be called (one per session, the newest kept).
const MAX_PENDING: usize = 1024;
/// A query and what came of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct QueryCount {
    pub(crate) query: String,
    pub(crate) asked: u64,
    /// Times the first result was the next tool the session called.
    pub(crate) hits: u64,
}

/// A search whose first result may be called next.
struct Pending {
    session: String,
    query: String,
    first: String,
}

#[derive(Default)]
struct Table {
    queries: Vec<QueryCount>,
    pending: VecDeque<Pending>,
    /// The size of the index built last.
    index_tools: usize,
    index_bytes: usize,
}

/// What the mode has seen, for the status page. Guards only its table: no
/// I/O under it.
#[derive(Default)]
pub(crate) struct Searches(Mutex<Table>);

impl Searches {
    /// A search of `session` for `query`, whose first result is `first`.
    pub(super) fn asked(&self, session: &str, query: &str, first: Option<&str>) {
        let query = normalise(query);
        let mut t = self.0.lock();
        match t.queries.iter_mut().find(|q| q.query == query) {
            Some(q) => q.asked += 1,
            None => {
                if t.queries.len() == MAX_QUERIES {
                    // The least asked gives its place: the frequent ones stay.
                    if let Some(least) = (0..t.queries.len()).min_by_key(|&i| t.queries[i].asked) {
                        t.queries.swap_remove(least);
                    }
                }
                t.queries.push(QueryCount { query: query.clone(), asked: 1, hits: 0 });
            }
        }
        t.pending.retain(|p| p.session != session);
        if let Some(first) = first {
            if t.pending.len() == MAX_PENDING {
                t.pending.pop_front();
            }
            t.pending.push_back(Pending { session: session.to_string(), query, first: first.to_string() });
        }
    }

    /// `session` calls the tool `exposed`: a hit when it is its last search's first result.
    pub(super) fn called(&self, session: &str, exposed: &str) -> bool {
        let mut t = self.0.lock();
        let Some(at) = t.pending.iter().position(|p| p.session == session) else { return false };
        let Some(pending) = t.pending.remove(at) else { return false };
        if pending.first != exposed {
            return false;
        }
        if let Some(q) = t.queries.iter_mut().find(|q| q.query == pending.query) {
            q.hits += 1;
        }
        true
    }

    pub(super) fn built(&self, tools: usize, bytes: usize) {
        let mut t = self.0.lock();
        (t.index_tools, t.index_bytes) = (tools, bytes);
    }

    /// The queries kept, most asked first.
    pub(crate) fn top(&self) -> Vec<QueryCount> {
        let mut queries = self.0.lock().queries.clone();
        queries.sort_by(|a, b| b.asked.cmp(&a.asked).then_with(|| a.query.cmp(&b.query)));
        queries
    }

    /// The tools and bytes of the index built last.
    pub(crate) fn index_size(&self) -> (usize, usize) {
        let t = self.0.lock();
        (t.index_tools, t.index_bytes)
    }
}

/// A query as the table keeps it: lower case, single spaces, cut.
pub(super) fn normalise(query: &str) -> String {
    let words: Vec<String> = query.split_whitespace().map(str::to_lowercase).collect();
    words.join(" ").chars().take(MAX_QUERY_CHARS).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_table_is_bounded_keeps_the_frequent_and_counts_a_called_first_result() {
        let searches = Searches::default();
        for _ in 0..5 {
            searches.asked("s1", "Read  A File", Some("files__read_file"));
            assert!(searches.called("s1", "files__read_file"));
        }
        searches.asked("s1", "read a file", Some("files__read_file"));
        assert!(!searches.called("s1", "web__fetch"), "another tool: no hit");
        assert!(!searches.called("s1", "files__read_file"), "only the next call counts");
        for i in 0..10 * MAX_QUERIES {
            searches.asked(&format!("s{i}"), &format!("query {i} {}", "x".repeat(500)), None);
        }
        let top = searches.top();
        assert_eq!(top.len(), MAX_QUERIES);
        assert_eq!(top[0], QueryCount { query: "read a file".into(), asked: 6, hits: 5 });
        assert!(top.iter().all(|q| q.query.chars().count() <= MAX_QUERY_CHARS));
        for i in 0..2 * MAX_PENDING {
            searches.asked(&format!("p{i}"), "q", Some("t"));
        }
        assert_eq!(searches.0.lock().pending.len(), MAX_PENDING);
    }
}
