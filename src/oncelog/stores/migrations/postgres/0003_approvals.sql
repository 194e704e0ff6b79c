-- Approvals: a request for one effect, bound to its run, step and exact arguments. A person
-- approves (optionally until a time) or denies; an approval is used by one attempt only.
CREATE TABLE approvals (
    id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id       TEXT NOT NULL REFERENCES runs (run_id),
    step_id      TEXT NOT NULL,
    tool         TEXT NOT NULL,
    args_hash    TEXT NOT NULL,
    args         TEXT NOT NULL,
    status       TEXT NOT NULL,   -- pending | approved | denied | used | expired
    requested_at DOUBLE PRECISION NOT NULL,
    decided_by   TEXT,
    decided_at   DOUBLE PRECISION,
    expires_at   DOUBLE PRECISION,
    note         TEXT,
    used_at      DOUBLE PRECISION
);
CREATE INDEX approvals_by_step ON approvals (run_id, step_id, args_hash);
CREATE INDEX approvals_pending ON approvals (status) WHERE status = 'pending';
