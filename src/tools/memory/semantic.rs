//! Ranking by meaning for memory search (`[memory.embeddings]`; docs/memory.md, "Search"):
//! the query and the scope's chunks as vectors, compared by cosine similarity, and that
//! ranking fused with the full-text one.
//!
//! Chunk vectors are kept in the index by model and text hash, so each distinct text is
//! embedded once; a search embeds only what is new (at most `max_chunks` chunks are ranked,
//! so also embedded, per search).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use thiserror::Error;

use crate::config::EmbeddingsConfig;
use crate::provider::ProviderError;
use crate::provider::embeddings::Embedder;
use crate::store::StoreError;
use crate::store::memory_index::{
    CONVERSATION_PREFIX, ChunkQuery, IndexedChunk, MemoryHit, MemoryIndex, spoken_by_agent, text_hash,
};

/// Characters of the query that are embedded (a chunk has at most 2,000 too).
const MAX_QUERY_CHARS: usize = 2_000;

/// Characters of a chunk shown as the snippet of a hit only its meaning found.
const SNIPPET_CHARS: usize = 160;

/// The constant of reciprocal rank fusion: a hit's score is the sum, over the rankings that
/// have it, of `1 / (RRF_K + rank)`. 60 is the value of the method's authors (Cormack, Clarke
/// and Büttcher, 2009), widely used since; larger values flatten the difference between the
/// first ranks.
const RRF_K: f64 = 60.0;

/// How long a search goes on embedding chunks not yet cached: after a batch that ends past
/// it, the search ranks what has vectors and leaves the rest to the next searches. A local
/// embedder can take a second per chunk (SmolLM2 under llama-cpp-python on one core), and a
/// first search of a large memory must not hold a turn, or a tool call, for minutes.
pub const EMBEDDING_BUDGET: Duration = Duration::from_secs(5);

/// How ranking by meaning works (from `[memory.embeddings]`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EmbeddingSettings {
    pub batch: usize,
    pub max_chunks: usize,
    pub min_similarity: f32,
    /// See [`EMBEDDING_BUDGET`]; at least one batch is embedded per search.
    pub budget: Duration,
}

impl From<&EmbeddingsConfig> for EmbeddingSettings {
    fn from(config: &EmbeddingsConfig) -> Self {
        Self {
            batch: config.batch.max(1),
            max_chunks: config.max_chunks,
            min_similarity: config.min_similarity,
            budget: EMBEDDING_BUDGET,
        }
    }
}

/// Why a search fell back to the full-text ranking.
#[derive(Debug, Error)]
pub(super) enum SemanticError {
    #[error("the embeddings request failed: {0}")]
    Embed(#[from] ProviderError),
    #[error("the embeddings cache failed: {0}")]
    Store(#[from] StoreError),
    #[error("the embeddings endpoint returned no vector for the query")]
    NoQueryVector,
}

/// A chunk and how close its meaning is to the query's.
#[derive(Debug, Clone)]
pub(super) struct Similar {
    pub chunk: IndexedChunk,
    pub similarity: f32,
}

/// The embedder and its settings, for one agent's searches.
pub(super) struct Semantic {
    embedder: Arc<dyn Embedder>,
    settings: EmbeddingSettings,
}

impl Semantic {
    pub(super) fn new(embedder: Arc<dyn Embedder>, settings: EmbeddingSettings) -> Self {
        Self { embedder, settings }
    }

    /// Chunks a search ranks by meaning at most.
    pub(super) fn max_chunks(&self) -> usize {
        self.settings.max_chunks
    }

    /// The chunks of `chunks` closest in meaning to `text`, best first, at most `depth`, and
    /// only those at least `min_similarity` close.
    pub(super) async fn rank(
        &self,
        index: &dyn MemoryIndex,
        chunks: ChunkQuery<'_>,
        text: &str,
        depth: usize,
    ) -> Result<Vec<Similar>, SemanticError> {
        let query: String = text.chars().take(MAX_QUERY_CHARS).collect();
        let query_vector = self.embedder.embed(&[query]).await?.pop().ok_or(SemanticError::NoQueryVector)?;
        let chunks = index.memory_chunks(&chunks).await?;
        let vectors = self.vectors(index, &chunks).await?;
        let mut ranked: Vec<Similar> = chunks
            .into_iter()
            .filter_map(|chunk| {
                let similarity = cosine(&query_vector, vectors.get(&text_hash(&chunk.text))?)?;
                (similarity >= self.settings.min_similarity).then_some(Similar { chunk, similarity })
            })
            .collect();
        ranked.sort_by(|a, b| b.similarity.total_cmp(&a.similarity).then(a.chunk.id.cmp(&b.chunk.id)));
        ranked.truncate(depth);
        Ok(ranked)
    }

    /// A vector for each chunk's text, by text hash: those kept in the index, and the others
    /// embedded batch by batch and kept (each batch as it comes, so a failure later keeps the
    /// work done) until the budget is spent.
    async fn vectors(
        &self,
        index: &dyn MemoryIndex,
        chunks: &[IndexedChunk],
    ) -> Result<HashMap<String, Vec<f32>>, SemanticError> {
        let model = self.embedder.model();
        let mut seen = HashSet::new();
        let texts: Vec<(String, &str)> = chunks
            .iter()
            .map(|chunk| (text_hash(&chunk.text), chunk.text.as_str()))
            .filter(|(hash, _)| seen.insert(hash.clone()))
            .collect();
        let hashes: Vec<String> = texts.iter().map(|(hash, _)| hash.clone()).collect();
        let mut vectors = index.cached_embeddings(model, &hashes).await?;
        let missing: Vec<&(String, &str)> = texts.iter().filter(|(hash, _)| !vectors.contains_key(hash)).collect();
        let started = Instant::now();
        for batch in missing.chunks(self.settings.batch) {
            let inputs: Vec<String> = batch.iter().map(|(_, text)| (*text).to_owned()).collect();
            let embedded = self.embedder.embed(&inputs).await?;
            let rows: Vec<(String, Vec<f32>)> = batch.iter().map(|(hash, _)| hash.clone()).zip(embedded).collect();
            index.store_embeddings(model, &rows).await?;
            vectors.extend(rows);
            if started.elapsed() >= self.settings.budget {
                tracing::debug!(cached = vectors.len(), "embedding budget spent; the rest waits for later searches");
                break;
            }
        }
        Ok(vectors)
    }
}

/// Cosine similarity; `None` for vectors of different lengths or of length zero.
fn cosine(a: &[f32], b: &[f32]) -> Option<f32> {
    if a.len() != b.len() {
        return None;
    }
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norms = a.iter().map(|x| x * x).sum::<f32>().sqrt() * b.iter().map(|x| x * x).sum::<f32>().sqrt();
    (norms > 0.0).then(|| dot / norms)
}

/// The full-text hits and the chunks ranked by meaning as one ranking, best first, at most
/// `limit`, by reciprocal rank fusion (see [`RRF_K`]).
///
/// Why ranks and not scores: BM25 scores are unbounded and depend on the words and the
/// collection, cosine similarities on the embedding model, so a weighted sum of the two would
/// need tuning per model and per memory. Fusing ranks needs none, and a chunk both rankings
/// find comes before one only one of them finds. A chunk found by meaning only gets the start
/// of its text as its snippet; its `score` is the fused one.
pub(super) fn fuse(full_text: Vec<MemoryHit>, similar: Vec<Similar>, limit: usize) -> Vec<MemoryHit> {
    let mut fused: Vec<MemoryHit> = Vec::with_capacity(full_text.len() + similar.len());
    let mut position: HashMap<i64, usize> = HashMap::new();
    let contribution = |rank: usize| 1.0 / (RRF_K + rank as f64 + 1.0);
    for (rank, hit) in full_text.into_iter().enumerate() {
        position.insert(hit.chunk_id, fused.len());
        fused.push(MemoryHit { score: contribution(rank), ..hit });
    }
    for (rank, Similar { chunk, .. }) in similar.into_iter().enumerate() {
        match position.get(&chunk.id) {
            Some(&at) => fused[at].score += contribution(rank),
            None => fused.push(MemoryHit {
                chunk_id: chunk.id,
                by_agent: chunk.path.starts_with(CONVERSATION_PREFIX) && spoken_by_agent(&chunk.text),
                snippet: opening(&chunk.text),
                path: chunk.path,
                start_line: chunk.start_line,
                end_line: chunk.end_line,
                score: contribution(rank),
            }),
        }
    }
    // Stable: among equal scores, full-text hits keep their order and come first.
    fused.sort_by(|a, b| b.score.total_cmp(&a.score));
    fused.truncate(limit);
    fused
}

/// The start of a chunk's text, cut at a word where it is long.
fn opening(text: &str) -> String {
    let text = text.trim();
    let Some((cut, _)) = text.char_indices().nth(SNIPPET_CHARS) else { return text.to_owned() };
    let head = &text[..cut];
    let head = head.rfind(char::is_whitespace).map_or(head, |space| &head[..space]);
    format!("{}…", head.trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(id: i64, line: u64) -> MemoryHit {
        MemoryHit {
            chunk_id: id,
            path: "MEMORY.md".into(),
            start_line: line,
            end_line: line,
            snippet: "**x**".into(),
            score: 1.0,
            by_agent: false,
        }
    }

    fn similar(id: i64, line: u64, text: &str) -> Similar {
        let chunk = IndexedChunk { id, path: "MEMORY.md".into(), start_line: line, end_line: line, text: text.into() };
        Similar { chunk, similarity: 0.5 }
    }

    fn ids(hits: &[MemoryHit]) -> Vec<i64> {
        hits.iter().map(|hit| hit.chunk_id).collect()
    }

    #[test]
    fn chunks_both_rankings_find_come_first() {
        // Full text: 1, 2, 3. Meaning: 3, 4, 2.
        let fused = fuse(
            vec![hit(1, 1), hit(2, 2), hit(3, 3)],
            vec![similar(3, 3, "c"), similar(4, 4, "d"), similar(2, 2, "b")],
            10,
        );
        assert_eq!(ids(&fused), [3, 2, 1, 4]);
        assert!(fused.windows(2).all(|w| w[0].score >= w[1].score));
        assert_eq!(fused[0].snippet, "**x**", "a full-text hit keeps its snippet");
        assert_eq!(fused[3].snippet, "d", "a hit by meaning only shows its text");
        assert_eq!(ids(&fuse(vec![hit(1, 1), hit(2, 2)], vec![similar(4, 4, "d")], 2)), [1, 4]);
        assert!(fuse(Vec::new(), Vec::new(), 5).is_empty());
    }

    #[test]
    fn a_long_chunk_shows_its_start_cut_at_a_word() {
        let text = "word ".repeat(100);
        let snippet = opening(&text);
        assert!(snippet.ends_with("word…") && snippet.chars().count() <= SNIPPET_CHARS + 1, "{snippet}");
        assert_eq!(opening("  short text \n"), "short text");
    }

    #[test]
    fn cosine_of_vectors_that_do_not_compare_is_none() {
        assert_eq!(cosine(&[1.0, 0.0], &[2.0, 0.0]), Some(1.0));
        assert_eq!(cosine(&[1.0, 0.0], &[0.0, 3.0]), Some(0.0));
        assert_eq!(cosine(&[1.0], &[1.0, 0.0]), None);
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 0.0]), None);
    }
}
