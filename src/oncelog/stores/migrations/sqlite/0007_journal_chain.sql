-- The journal's hash chain (oncelog.records._chain): each record carries the hash that covers the
-- record before it in its run. Records written before this version have none.
ALTER TABLE journal ADD COLUMN hash TEXT;

-- Signed checkpoints: a run's chain length and head at a moment, signed with Ed25519, so
-- a truncated tail or a rewritten chain is found by a holder of the public key.
CREATE TABLE checkpoints (
    id        INTEGER PRIMARY KEY,
    run_id    TEXT NOT NULL,
    entries   INTEGER NOT NULL,  -- records in the run's chain up to and including head
    head      TEXT NOT NULL,
    at        REAL NOT NULL,
    key_id    TEXT NOT NULL,
    signature TEXT NOT NULL      -- base64 Ed25519 over oncelog._checkpoints.payload
);
CREATE INDEX checkpoints_by_run ON checkpoints (run_id, id);

-- Append-only, as an extra layer under the chain: the ledger never updates or deletes
-- these rows, so any statement that tries is refused.
CREATE TRIGGER journal_no_update BEFORE UPDATE ON journal
BEGIN SELECT RAISE(ABORT, 'the oncelog journal is append-only'); END;
CREATE TRIGGER journal_no_delete BEFORE DELETE ON journal
BEGIN SELECT RAISE(ABORT, 'the oncelog journal is append-only'); END;
CREATE TRIGGER checkpoints_no_update BEFORE UPDATE ON checkpoints
BEGIN SELECT RAISE(ABORT, 'oncelog checkpoints are append-only'); END;
CREATE TRIGGER checkpoints_no_delete BEFORE DELETE ON checkpoints
BEGIN SELECT RAISE(ABORT, 'oncelog checkpoints are append-only'); END;
