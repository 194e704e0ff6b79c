-- A run's sticky stop: the first step that needed a person (an effect in doubt, a
-- conflict, drift, a budget stop). Set in the transaction that records the stop, cleared
-- by the person's decision or by a later start that gets past that step; while it is set
-- no later position of the run is started, whatever the agent's code caught. A kill switch
-- needs none: its own row stops every step it covers. NULL on every run without one.
ALTER TABLE runs ADD COLUMN stop_seq INTEGER;  -- the position of the step that stopped
ALTER TABLE runs ADD COLUMN stop TEXT;         -- JSON: kind, step_id, key, message
-- Filled in from the journal: the run's last stop entry, unless a later one lifted it.
UPDATE runs SET (stop_seq, stop) = (
    SELECT CASE WHEN j.event != 'stop_lifted' THEN j.seq END, json_extract(j.data, '$.stop')
    FROM journal j
    WHERE j.run_id = runs.run_id AND (j.event IN ('run_stopped', 'stop_lifted')
          OR (j.event = 'unknown' AND json_extract(j.data, '$.stop') IS NOT NULL))
    ORDER BY j.id DESC LIMIT 1
);
