-- The directories every process of the deployment must share (an agent's workspace, a chat
-- channel's media directory): the first process to start records the mark it found there and
-- the path, and the others compare theirs at start.
CREATE TABLE shared_dirs (
    key TEXT PRIMARY KEY,
    mark TEXT NOT NULL,
    path TEXT NOT NULL,
    host TEXT NOT NULL,
    recorded_at BIGINT NOT NULL
);
