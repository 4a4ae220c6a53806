-- The full-text index of the workspaces' memory files (`memory_search`). Derived data: a
-- file is re-indexed whenever its fingerprint (size and SHA-256 of the indexed bytes)
-- changes, and every row can be rebuilt from the files.
--
-- `root` is the agent's canonical workspace directory and `path` the file relative to it, so
-- agents with different workspaces share one database without seeing each other's files.
CREATE TABLE memory_files (
    root        TEXT NOT NULL,
    path        TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    indexed_at  BIGINT NOT NULL,
    PRIMARY KEY (root, path)
);

-- One chunk of a file (a paragraph or a run of lines), with its 1-based line range.
CREATE TABLE memory_chunks (
    id         INTEGER PRIMARY KEY,
    root       TEXT NOT NULL,
    path       TEXT NOT NULL,
    start_line INTEGER NOT NULL,
    end_line   INTEGER NOT NULL,
    body       TEXT NOT NULL
);
CREATE INDEX memory_chunks_by_file ON memory_chunks (root, path);

-- FTS5 over the chunks' text (external content: the text is stored once, in memory_chunks).
-- The store keeps it in step by hand when it replaces a file's chunks.
CREATE VIRTUAL TABLE memory_fts USING fts5(
    body,
    content = 'memory_chunks',
    content_rowid = 'id',
    tokenize = 'unicode61 remove_diacritics 2'
);
