//! BM25 ranking of a few hundred short documents held in memory (skills for `skill_search`,
//! MCP tools for `mcp_tool_search`). A document is a few fields, each with a weight: a skill's
//! name counts three times and its description twice, so a query that names what a skill is
//! for finds it before one that merely mentions the words.

use std::collections::HashMap;

/// BM25's usual constants: how fast repeated terms stop adding up, and how much a long
/// document is held against its matches.
const K1: f64 = 1.2;
const B: f64 = 0.75;

/// Term counts of every skill, built once per catalog.
#[derive(Debug, Default)]
pub struct Index {
    docs: Vec<Doc>,
    /// Documents each term occurs in.
    doc_freq: HashMap<String, usize>,
    average_len: f64,
}

#[derive(Debug)]
struct Doc {
    terms: HashMap<String, u32>,
    len: usize,
}

impl Index {
    /// An index of `docs`, each given as its fields with their weights.
    pub fn new<'a>(docs: impl IntoIterator<Item = Vec<(&'a str, u32)>>) -> Self {
        let docs: Vec<Doc> = docs.into_iter().map(|fields| Doc::of(&fields)).collect();
        let mut doc_freq = HashMap::new();
        for doc in &docs {
            for term in doc.terms.keys() {
                *doc_freq.entry(term.clone()).or_insert(0) += 1;
            }
        }
        let total: usize = docs.iter().map(|doc| doc.len).sum();
        let average_len = if docs.is_empty() { 0.0 } else { total as f64 / docs.len() as f64 };
        Self { docs, doc_freq, average_len }
    }

    /// The score of each document for `query`, by position; 0 where nothing matched.
    pub fn scores(&self, query: &str) -> Vec<f64> {
        let mut query_terms = terms(query);
        query_terms.sort();
        query_terms.dedup();
        let count = self.docs.len() as f64;
        self.docs
            .iter()
            .map(|doc| {
                query_terms
                    .iter()
                    .filter_map(|term| {
                        let tf = f64::from(*doc.terms.get(term)?);
                        let df = self.doc_freq.get(term).copied().unwrap_or(0) as f64;
                        let idf = ((count - df + 0.5) / (df + 0.5) + 1.0).ln();
                        let norm = 1.0 - B + B * doc.len as f64 / self.average_len.max(1.0);
                        Some(idf * tf * (K1 + 1.0) / (tf + K1 * norm))
                    })
                    .sum()
            })
            .collect()
    }
}

impl Doc {
    fn of(fields: &[(&str, u32)]) -> Self {
        let mut terms_of = HashMap::new();
        let mut len = 0;
        for &(text, weight) in fields {
            for term in terms(text) {
                *terms_of.entry(term).or_insert(0) += weight;
                len += weight as usize;
            }
        }
        Self { terms: terms_of, len }
    }
}

/// Lower-cased words and numbers; `meeting-notes` is two terms.
fn terms(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric()).filter(|word| !word.is_empty()).map(str::to_lowercase).collect()
}
