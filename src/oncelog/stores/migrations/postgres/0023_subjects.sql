-- Subjects: what an effect acts on, claimed by its intent for one step of any run of the
-- ledger (stores/_sql_subjects.py). The holder's state is its step's row; a done claim
-- with an expiry is free once ``expires_at`` (by the store's clock) has passed.
CREATE TABLE IF NOT EXISTS subjects (
    subject TEXT PRIMARY KEY,
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    step_id TEXT NOT NULL,
    claimed_at DOUBLE PRECISION NOT NULL,
    expires_at DOUBLE PRECISION
);
CREATE INDEX IF NOT EXISTS subjects_by_holder ON subjects (run_id, seq);
