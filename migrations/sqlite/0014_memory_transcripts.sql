-- Past conversations in memory search (docs/memory.md, "Search").
--
-- Each transcript row remembers the memory scope it was written in (`<agent>/owner`,
-- `<agent>/group:<channel>:<chat_id>`, `<agent>/person:<channel>:<id>`; NULL before this
-- migration and for runs without a scope), so a search finds the conversations of its own
-- scope only: a group's search never reaches the owner's direct chats.
ALTER TABLE transcript ADD COLUMN memory_scope TEXT;
CREATE INDEX transcript_by_memory_scope ON transcript (memory_scope, id) WHERE memory_scope IS NOT NULL;

-- Transcript messages are indexed as chunks of memory_chunks too, with `scope` set, `path`
-- `conversation/<session_key>` and the transcript id as their line. File chunks keep NULL.
ALTER TABLE memory_chunks ADD COLUMN scope TEXT;
CREATE INDEX memory_chunks_by_scope ON memory_chunks (root, scope) WHERE scope IS NOT NULL;

-- How far each scope's transcript is indexed, per workspace: the newest transcript id done.
CREATE TABLE memory_transcripts (
    root            TEXT NOT NULL,
    scope           TEXT NOT NULL,
    indexed_through BIGINT NOT NULL,
    PRIMARY KEY (root, scope)
);
