-- Embeddings of memory chunks (`[memory.embeddings]`, docs/memory.md "Search"), cached by
-- model and text: `text_hash` is the SHA-256 (hex) of a chunk's text, so a chunk whose text
-- did not change is never embedded again, even after its file was re-indexed (new chunk ids).
-- `vector` holds the numbers as little-endian 32-bit floats. Derived data: deleting rows costs
-- only embedding their text again.
CREATE TABLE memory_embeddings (
    model      TEXT NOT NULL,
    text_hash  TEXT NOT NULL,
    vector     BLOB NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (model, text_hash)
);
