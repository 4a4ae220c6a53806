//! Embeddings in the SQLite memory index: the chunks a search ranks by meaning, and the vector
//! cache by model and text hash (`migrations/sqlite/0015_memory_embeddings.sql`).

use super::{SqliteStore, sql_limit};
use crate::store::StoreError;
use crate::store::memory_index::ChunkQuery;
use crate::store::shared::memory_index::ChunkRow;

/// The files' chunks in the order of `query.paths`, `query.limit` at most.
pub(super) async fn file_chunks(store: &SqliteStore, query: &ChunkQuery<'_>) -> Result<Vec<ChunkRow>, StoreError> {
    let paths = serde_json::to_string(query.paths).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    Ok(sqlx::query_as(
        "SELECT c.id, c.path, c.start_line, c.end_line, c.body \
         FROM json_each($2) AS p JOIN memory_chunks c ON c.root = $1 AND c.path = p.value \
         ORDER BY p.key, c.start_line, c.id LIMIT $3",
    )
    .bind(query.root)
    .bind(paths)
    .bind(sql_limit(query.limit))
    .fetch_all(store.pool())
    .await?)
}

/// The kept vectors of `model` for `hashes`, as stored.
pub(super) async fn cached_vectors(
    store: &SqliteStore,
    model: &str,
    hashes: &[String],
) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
    let hashes = serde_json::to_string(hashes).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    Ok(sqlx::query_as(
        "SELECT text_hash, vector FROM memory_embeddings \
         WHERE model = $1 AND text_hash IN (SELECT value FROM json_each($2))",
    )
    .bind(model)
    .bind(hashes)
    .fetch_all(store.pool())
    .await?)
}

#[cfg(test)]
mod tests {
    use crate::store::memory_index::{ChunkQuery, MemoryChunk, MemoryIndex, text_hash};
    use crate::store::sqlite::SqliteStore;

    fn chunk(line: u32, text: &str) -> MemoryChunk {
        MemoryChunk { start_line: line, end_line: line, text: text.into() }
    }

    async fn open() -> (tempfile::TempDir, SqliteStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("s.db")).await.unwrap();
        (dir, store)
    }

    #[tokio::test]
    async fn vectors_are_kept_by_model_and_text_and_outlive_reindexing() {
        let (_dir, store) = open().await;
        store
            .index_memory_file("/a", "MEMORY.md", "1:x", &[chunk(1, "I drive a car."), chunk(3, "Tea.")])
            .await
            .unwrap();
        let car = text_hash("I drive a car.");
        let tea = text_hash("Tea.");
        store.store_embeddings("small", &[(car.clone(), vec![0.25, -1.5, 3.0])]).await.unwrap();
        store.store_embeddings("large", &[(car.clone(), vec![9.0])]).await.unwrap();

        let hashes = [car.clone(), tea.clone()];
        let cached = store.cached_embeddings("small", &hashes).await.unwrap();
        assert_eq!(cached.len(), 1, "tea has no vector yet");
        assert_eq!(cached[&car], [0.25, -1.5, 3.0], "the numbers come back exactly");
        assert_eq!(store.cached_embeddings("large", &hashes).await.unwrap()[&car], [9.0]);
        assert!(store.cached_embeddings("other", &hashes).await.unwrap().is_empty());

        // The file is edited: the unchanged paragraph gets a new chunk id, its vector stays.
        store
            .index_memory_file("/a", "MEMORY.md", "2:x", &[chunk(1, "New line."), chunk(3, "I drive a car.")])
            .await
            .unwrap();
        let query = ChunkQuery { root: "/a", paths: &["MEMORY.md".to_owned()], scope: None, limit: 10 };
        let chunks = store.memory_chunks(&query).await.unwrap();
        let texts: Vec<&str> = chunks.iter().map(|c| c.text.as_str()).collect();
        assert_eq!(texts, ["New line.", "I drive a car."]);
        assert_eq!(store.cached_embeddings("small", &[text_hash(texts[1])]).await.unwrap()[&car], [0.25, -1.5, 3.0]);
        // Storing again replaces.
        store.store_embeddings("small", &[(car.clone(), vec![1.0])]).await.unwrap();
        assert_eq!(store.cached_embeddings("small", std::slice::from_ref(&car)).await.unwrap()[&car], [1.0]);
    }

    #[tokio::test]
    async fn a_row_that_is_no_vector_counts_as_missing() {
        let (_dir, store) = open().await;
        sqlx::query(
            "INSERT INTO memory_embeddings (model, text_hash, vector, created_at) VALUES ('m', 'h', x'010203', 0)",
        )
        .execute(store.pool())
        .await
        .unwrap();
        assert!(store.cached_embeddings("m", &["h".to_owned()]).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn chunks_come_files_first_in_their_order_then_newest_conversation_within_the_limit() {
        let (_dir, store) = open().await;
        store.index_memory_file("/a", "MEMORY.md", "1", &[chunk(1, "m1"), chunk(2, "m2")]).await.unwrap();
        store.index_memory_file("/a", "USER.md", "1", &[chunk(1, "u1")]).await.unwrap();
        store.index_memory_file("/a", "other.md", "1", &[chunk(1, "not searched")]).await.unwrap();
        store.index_memory_file("/b", "MEMORY.md", "1", &[chunk(1, "another workspace")]).await.unwrap();
        for (id, scope, body) in [(1, "main/owner", "old"), (2, "main/group:x:1", "group"), (3, "main/owner", "new")] {
            sqlx::query(
                "INSERT INTO memory_chunks (root, path, start_line, end_line, body, scope) \
                 VALUES ('/a', 'conversation/s', $1, $1, $2, $3)",
            )
            .bind(id)
            .bind(body)
            .bind(scope)
            .execute(store.pool())
            .await
            .unwrap();
        }
        let paths = ["USER.md".to_owned(), "MEMORY.md".to_owned()];
        let texts = |limit| {
            let store = &store;
            let paths = &paths;
            async move {
                let query = ChunkQuery { root: "/a", paths, scope: Some("main/owner"), limit };
                let chunks = store.memory_chunks(&query).await.unwrap();
                chunks.into_iter().map(|c| c.text).collect::<Vec<_>>()
            }
        };
        assert_eq!(texts(10).await, ["u1", "m1", "m2", "new", "old"]);
        assert_eq!(texts(4).await, ["u1", "m1", "m2", "new"]);
        assert_eq!(texts(2).await, ["u1", "m1"]);
    }
}
