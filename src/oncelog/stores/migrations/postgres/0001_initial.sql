-- The SQLite schema in PostgreSQL's types: times are Unix seconds by the server's clock
-- (double precision), JSON is kept as the exact canonical text that was hashed.

-- Runs: one row per durable unit of work, with its plan and its lease. Every write
-- transaction that checks a fencing token locks its run's row (SELECT ... FOR UPDATE).
CREATE TABLE runs (
    run_id           TEXT PRIMARY KEY,
    status           TEXT NOT NULL,
    plan             TEXT,                       -- JSON list of step ids, or NULL
    reason           TEXT,                       -- why it is halted, waiting or failed
    created_at       DOUBLE PRECISION NOT NULL,  -- budgets on wall clock count from here
    updated_at       DOUBLE PRECISION NOT NULL,
    owner            TEXT,                       -- host|pid|start|nonce of the lease holder
    lease_expires_at DOUBLE PRECISION,
    fencing_token    BIGINT NOT NULL DEFAULT 0   -- grows with every acquisition
);
CREATE INDEX runs_by_status ON runs (status, updated_at);

-- Steps: the current state of every recorded call, by its position in the run.
CREATE TABLE steps (
    run_id      TEXT NOT NULL REFERENCES runs (run_id),
    seq         INTEGER NOT NULL,
    step_id     TEXT NOT NULL,
    type        TEXT NOT NULL,    -- effect | read | llm
    tool        TEXT NOT NULL,
    kind        TEXT NOT NULL,    -- read | upsert | create | payment | destructive | llm
    key         TEXT NOT NULL,    -- the idempotency key handed to the provider
    args_hash   TEXT NOT NULL,
    args        TEXT NOT NULL,
    state       TEXT NOT NULL,
    result      TEXT,
    error       TEXT,
    attempts    INTEGER NOT NULL, -- intents written: more than one means it was retried
    tokens_in   INTEGER NOT NULL DEFAULT 0,
    tokens_out  INTEGER NOT NULL DEFAULT 0,
    started_at  DOUBLE PRECISION NOT NULL,
    finished_at DOUBLE PRECISION,
    PRIMARY KEY (run_id, seq),
    UNIQUE (run_id, step_id)
);

-- Journal: every change above, appended in the same transaction and never rewritten.
-- Within one run, ids follow commit order: each append holds a lock on its run's journal
-- until the commit (see _sql_tx.append).
CREATE TABLE journal (
    id     BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id TEXT NOT NULL,
    seq    INTEGER,
    event  TEXT NOT NULL,
    data   TEXT NOT NULL,
    at     DOUBLE PRECISION NOT NULL
);
CREATE INDEX journal_by_run ON journal (run_id, id);
