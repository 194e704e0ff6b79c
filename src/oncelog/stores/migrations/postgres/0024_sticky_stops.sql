-- A run's sticky stop: the first step that needed a person (an effect in doubt, a
-- conflict, drift, a budget stop). Set in the transaction that records the stop, cleared
-- by the person's decision or by a later start that gets past that step; while it is set
-- no later position of the run is started, whatever the agent's code caught. A kill switch
-- needs none: its own row stops every step it covers. NULL on every run without one.
-- Every statement may run again (a test re-applies the last migration).
ALTER TABLE runs ADD COLUMN IF NOT EXISTS stop_seq INTEGER;  -- the position of the step that stopped
ALTER TABLE runs ADD COLUMN IF NOT EXISTS stop TEXT;         -- JSON: kind, step_id, key, message
-- Filled in from the journal: the run's last stop entry, unless a later one lifted it.
UPDATE runs SET stop_seq = last.seq, stop = last.stop
FROM (
    SELECT DISTINCT ON (run_id) run_id,
           CASE WHEN event <> 'stop_lifted' THEN seq END AS seq,
           (data::jsonb -> 'stop')::text AS stop
    FROM journal
    WHERE event IN ('run_stopped', 'stop_lifted')
       OR (event = 'unknown' AND data::jsonb ? 'stop')
    ORDER BY run_id, id DESC
) AS last
WHERE last.run_id = runs.run_id;
