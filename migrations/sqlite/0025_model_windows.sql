-- The context window a model's server named when it refused a request as too long, per model
-- as the chain names it (`provider/model`), so a restart does not pay for the lesson again.
-- `configured` is the window the config gave the model then: a different one now (the server's
-- window was raised, and the config with it) makes the learned one void.
CREATE TABLE model_windows (
    model       TEXT PRIMARY KEY,
    learned     BIGINT NOT NULL,
    configured  BIGINT NOT NULL,
    learned_at  BIGINT NOT NULL
);
