-- The decision links (a person-needed notice's signed links) that decided something: a
-- link is the credential for its one decision, taken once. The row is written by the
-- decision's own transaction, so two confirmations of one link at once record one
-- decision: the second finds the key taken and decides nothing (LinkUsed, naming who
-- used it). A decision that fails leaves no row, and the link still works. Removed with
-- its run when the run is pruned.
CREATE TABLE IF NOT EXISTS used_links (
    nonce     TEXT PRIMARY KEY,  -- the link's signed nonce: one per link made
    run_id    TEXT NOT NULL,
    decision  TEXT NOT NULL,     -- what it decided: done, not_done, approved, retried, ...
    used_by   TEXT NOT NULL,
    used_at   DOUBLE PRECISION NOT NULL
);
CREATE INDEX IF NOT EXISTS used_links_run ON used_links (run_id);
