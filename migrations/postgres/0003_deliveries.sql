-- What the chat adapters delivered (distributed shape): an outbound id sent whole
-- (steps = -1) or its first `steps` parts, so that a redelivery after the adapter restarted, or
-- after the bus lost its ack, is neither sent twice nor cut short. Kept two days.
CREATE TABLE deliveries (
    channel TEXT NOT NULL,
    id TEXT NOT NULL,
    steps BIGINT NOT NULL,
    recorded_at BIGINT NOT NULL,
    PRIMARY KEY (channel, id)
);
CREATE INDEX deliveries_recorded_at ON deliveries (recorded_at);
