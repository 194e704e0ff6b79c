-- Which life of the server a connection was opened in (issue 15.3, durability modes),
-- no foreign key from a step to its run, no SET clause on the transition functions.
-- Every statement may run again (a test re-applies the later migrations).
--
-- With durability "intent" an outcome, a model call or a read commits without waiting
-- for its WAL flush, and with "process" every write does: a crash of the server (or of a
-- backend, which restarts them all), a power loss or a failover can lose those commits.
-- A process that went on writing its run after such a loss would leave holes in it (a
-- later step recorded after one that is gone) or complete a run whose outcome reverted
-- to in flight. So each pooled connection reads, when it is opened, the id of the
-- server's present life; the store writes a run only on connections of the life in
-- which it made that run's commits not yet flushed (_postgres.py).
--
-- An unlogged table is emptied by crash recovery (and is empty on a promoted standby),
-- and kept by a clean shutdown, after which nothing was lost: its one row is that id,
-- written again by the first connection of a new life.
CREATE UNLOGGED TABLE IF NOT EXISTS server_life (
    one BOOLEAN PRIMARY KEY DEFAULT true CHECK (one),
    id TEXT NOT NULL
);

CREATE OR REPLACE FUNCTION oncelog_server_life() RETURNS TEXT
LANGUAGE sql VOLATILE AS $$
    INSERT INTO server_life (id) VALUES (md5(random()::text || clock_timestamp()::text))
    ON CONFLICT (one) DO NOTHING;
    SELECT id FROM server_life;
$$;

-- The foreign key from a step to its run checked the run's row again at every intent
-- (about 32,000 of a call's instructions on the server). Every writer of a step has
-- already locked that row in the same transaction (the intent's function, and
-- SQLStore._begin_step through _sql_tx.fence, each refusing when it is missing), and no
-- run is ever deleted: the check could never refuse anything.
ALTER TABLE steps DROP CONSTRAINT IF EXISTS steps_run_id_fkey;

-- The transition functions plan their statements generically (see 0016) by the session's
-- setting, which every connection of the store makes (_postgres_settings), rather than a
-- SET clause of their own: a SET clause saved and restored the setting at every call, two
-- calls per effect.
ALTER FUNCTION oncelog_intent(TEXT, TEXT, BIGINT, DOUBLE PRECISION, TEXT, INTEGER, TEXT, TEXT,
    TEXT, TEXT, TEXT, TEXT, TEXT, DOUBLE PRECISION, DOUBLE PRECISION, INTEGER, TEXT, TEXT,
    BOOLEAN) RESET ALL;
ALTER FUNCTION oncelog_outcome(TEXT, TEXT, BIGINT, DOUBLE PRECISION, INTEGER, TEXT, INTEGER,
    TEXT, TEXT, TEXT, INTEGER, INTEGER, DOUBLE PRECISION, DOUBLE PRECISION, TEXT, TEXT)
    RESET ALL;
