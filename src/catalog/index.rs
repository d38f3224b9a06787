//! The search index over deferred tools: BM25 over name, title, description and parameter
//! names, built once per registry snapshot (lazily, on the first search) and read by every
//! search of that snapshot; a query that looks like a regular expression is matched instead.

use std::collections::HashMap;

use regex::Regex;

/// BM25 constants (the usual ones).
const K1: f32 = 1.2;
const B: f32 = 0.75;
/// Field weights, applied as repeated term frequency: a word in the name says more about
/// what a tool does than the same word in its description.
const NAME_WEIGHT: f32 = 3.0;
const TITLE_WEIGHT: f32 = 2.0;
const PARAM_WEIGHT: f32 = 1.0;
const DESC_WEIGHT: f32 = 1.0;

/// What one tool contributes to the index.
pub struct Doc<'a> {
    pub name: &'a str,
    pub title: Option<&'a str>,
    pub description: &'a str,
    pub params: Vec<&'a str>,
}

pub struct Index {
    names: Vec<String>,
    /// Lowercased `name \n title \n description \n params`, for regex queries.
    texts: Vec<String>,
    terms: HashMap<String, u32>,
    /// Per term: (doc, weighted term frequency).
    postings: Vec<Vec<(u32, f32)>>,
    doc_len: Vec<f32>,
    avg_len: f32,
}

impl Index {
    pub fn build<'a>(docs: impl Iterator<Item = Doc<'a>>) -> Index {
        let mut index = Index {
            names: Vec::new(),
            texts: Vec::new(),
            terms: HashMap::new(),
            postings: Vec::new(),
            doc_len: Vec::new(),
            avg_len: 0.0,
        };
        let mut tf: HashMap<String, f32> = HashMap::new();
        for doc in docs {
            let id = u32::try_from(index.names.len()).unwrap_or(u32::MAX);
            tf.clear();
            let mut len = 0.0;
            let mut add = |text: &str, weight: f32| {
                for t in tokens(text) {
                    *tf.entry(t).or_default() += weight;
                    len += weight;
                }
            };
            add(doc.name, NAME_WEIGHT);
            if let Some(t) = doc.title {
                add(t, TITLE_WEIGHT);
            }
            add(doc.description, DESC_WEIGHT);
            for p in &doc.params {
                add(p, PARAM_WEIGHT);
            }
            for (term, f) in tf.drain() {
                let next = u32::try_from(index.postings.len()).unwrap_or(u32::MAX);
                let tid = *index.terms.entry(term).or_insert(next);
                if tid == next {
                    index.postings.push(Vec::new());
                }
                if let Some(p) = index.postings.get_mut(tid as usize) {
                    p.push((id, f));
                }
            }
            let mut text = String::with_capacity(doc.name.len() + doc.description.len() + 32);
            text.push_str(doc.name);
            text.push('\n');
            if let Some(t) = doc.title {
                text.push_str(t);
                text.push('\n');
            }
            text.push_str(doc.description);
            for p in &doc.params {
                text.push('\n');
                text.push_str(p);
            }
            index.texts.push(text);
            index.names.push(doc.name.to_owned());
            index.doc_len.push(len);
        }
        let n = index.doc_len.len().max(1) as f32;
        index.avg_len = index.doc_len.iter().sum::<f32>() / n;
        index
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// The best `limit` tools for `query`, best first, with their scores.
    pub fn search(&self, query: &str, limit: usize) -> Vec<(&str, f64)> {
        let query = query.trim();
        if query.is_empty() || limit == 0 {
            return Vec::new();
        }
        if let Some(re) = as_regex(query) {
            return self.search_regex(&re, limit);
        }
        let n = self.names.len() as f32;
        // Dense scores: a search touches a fraction of the tools, but a flat array beats a
        // map at any fraction, and `touched` keeps the ranking to the tools that matched.
        let mut scores = vec![0f32; self.names.len()];
        let mut touched: Vec<u32> = Vec::new();
        let mut seen = Vec::new();
        for term in tokens(query) {
            if seen.contains(&term) {
                continue;
            }
            let postings = self
                .terms
                .get(&term)
                .and_then(|t| self.postings.get(*t as usize));
            seen.push(term);
            let Some(p) = postings else { continue };
            let df = p.len() as f32;
            let idf = ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
            for &(doc, tf) in p {
                let dl = self.doc_len.get(doc as usize).copied().unwrap_or(1.0);
                let s = idf * tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * dl / self.avg_len));
                if let Some(slot) = scores.get_mut(doc as usize) {
                    if *slot == 0.0 {
                        touched.push(doc);
                    }
                    *slot += s;
                }
            }
        }
        // An exact name match wins outright.
        if let Some(i) = self.names.iter().position(|n| n == query) {
            if let (Some(slot), Ok(doc)) = (scores.get_mut(i), u32::try_from(i)) {
                if *slot == 0.0 {
                    touched.push(doc);
                }
                *slot += 1000.0;
            }
        }
        let score = |d: u32| scores.get(d as usize).copied().unwrap_or(0.0);
        let order = |a: &u32, b: &u32| score(*b).total_cmp(&score(*a)).then(a.cmp(b));
        if touched.len() > limit {
            touched.select_nth_unstable_by(limit, order);
            touched.truncate(limit);
        }
        touched.sort_unstable_by(order);
        touched
            .into_iter()
            .filter_map(|d| {
                let name = self.names.get(d as usize)?;
                Some((name.as_str(), f64::from(score(d))))
            })
            .collect()
    }

    /// Regex queries: a name match ranks above a match elsewhere; otherwise listing order.
    fn search_regex(&self, re: &Regex, limit: usize) -> Vec<(&str, f64)> {
        let mut name_hits = Vec::new();
        let mut other_hits = Vec::new();
        for (name, text) in self.names.iter().zip(&self.texts) {
            if re.is_match(name) {
                name_hits.push((name.as_str(), 2.0));
            } else if other_hits.len() < limit && re.is_match(text) {
                other_hits.push((name.as_str(), 1.0));
            }
            if name_hits.len() >= limit {
                break;
            }
        }
        name_hits.extend(other_hits);
        name_hits.truncate(limit);
        name_hits
    }
}

/// A query is read as a regular expression when it carries regex syntax that words never
/// do, and compiles (case-insensitively).
fn as_regex(query: &str) -> Option<Regex> {
    let looks = query.starts_with('^')
        || query.ends_with('$')
        || [".*", ".+", "\\", "|", "[", "(?"]
            .iter()
            .any(|s| query.contains(s));
    if !looks {
        return None;
    }
    regex::RegexBuilder::new(query)
        .case_insensitive(true)
        .size_limit(1 << 20)
        .build()
        .ok()
}

/// Lowercased words, split at non-alphanumerics and camelCase humps, lightly stemmed.
pub fn tokens(text: &str) -> impl Iterator<Item = String> + '_ {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut prev_lower = false;
    for c in text.chars() {
        if c.is_alphanumeric() {
            if c.is_uppercase() && prev_lower && !cur.is_empty() {
                words.push(std::mem::take(&mut cur));
            }
            prev_lower = c.is_lowercase() || c.is_ascii_digit();
            cur.extend(c.to_lowercase());
        } else {
            prev_lower = false;
            if !cur.is_empty() {
                words.push(std::mem::take(&mut cur));
            }
        }
    }
    if !cur.is_empty() {
        words.push(cur);
    }
    words
        .into_iter()
        .filter(|w| !STOP.contains(&w.as_str()))
        .map(stem)
}

const STOP: &[&str] = &[
    "a", "an", "the", "and", "or", "of", "to", "in", "on", "for", "with", "by", "is", "it", "this",
    "that", "from", "as", "at", "be", "are", "its", "into", "i", "me", "my",
];

/// A crude plural stemmer: enough to meet "issues"/"issue", "queries"/"query".
fn stem(mut w: String) -> String {
    for (suffix, min) in [("ies", 5), ("s", 4)] {
        if w.len() >= min && w.ends_with(suffix) && !w.ends_with("ss") {
            w.truncate(w.len() - suffix.len());
            if suffix == "ies" {
                w.push('y');
            }
            break;
        }
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc<'a>(name: &'a str, description: &'a str, params: Vec<&'a str>) -> Doc<'a> {
        Doc {
            name,
            title: None,
            description,
            params,
        }
    }

    #[test]
    fn ranks_by_words_and_regex() {
        let idx = Index::build(
            [
                doc(
                    "mcp_gh_create_issue",
                    "Create an issue in a repository.",
                    vec!["repo", "title"],
                ),
                doc(
                    "mcp_gh_list_pulls",
                    "List pull requests of a repository.",
                    vec!["repo"],
                ),
                doc(
                    "mcp_db_query",
                    "Run a read-only SQL query against Postgres.",
                    vec!["sql"],
                ),
            ]
            .into_iter(),
        );
        assert_eq!(
            idx.search("open a new github issue", 3)[0].0,
            "mcp_gh_create_issue"
        );
        assert_eq!(idx.search("sql postgres", 3)[0].0, "mcp_db_query");
        assert_eq!(idx.search("pull requests", 1)[0].0, "mcp_gh_list_pulls");
        let re: Vec<&str> = idx
            .search("^mcp_gh_.*", 5)
            .into_iter()
            .map(|m| m.0)
            .collect();
        assert_eq!(re, vec!["mcp_gh_create_issue", "mcp_gh_list_pulls"]);
        assert_eq!(idx.search("mcp_db_query", 1)[0].0, "mcp_db_query");
        assert!(idx.search("zebra", 3).is_empty());
    }

    #[test]
    fn tokens_split_camel_and_snake_case() {
        let t: Vec<String> = tokens("createIssue list_files HTTPServer").collect();
        assert_eq!(t, vec!["create", "issue", "list", "file", "httpserver"]);
    }
}
