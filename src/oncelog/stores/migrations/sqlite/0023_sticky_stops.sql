-- A run's sticky stop: the first step that needed a person (an effect in doubt, a
-- conflict, drift, a budget stop). Set in the transaction that records the stop, cleared
-- by the person's decision or by a later start that gets past that step; while it is set
-- no later position of the run is started, whatever the agent's code caught. A kill switch
-- needs none: its own row stops every step it covers. NULL on every run without one.
ALTER TABLE runs ADD COLUMN stop_seq INTEGER;  -- the position of the step that stopped
ALTER TABLE runs ADD COLUMN stop TEXT;         -- JSON: kind, step_id, key, message
