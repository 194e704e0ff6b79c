-- Why an effect is in doubt, on its step row: the first reason recorded since its latest
-- intent (the error its call raised, or what recovery found), kept across restarts so the
-- operator reads the original error, not what the next recovery said about it. An intent
-- clears it. Filled in for ledgers written before it from the journal, by the same rule.
ALTER TABLE steps ADD COLUMN reason TEXT;
UPDATE steps SET reason = (
    SELECT u.data::jsonb ->> 'reason' FROM journal u
    WHERE u.run_id = steps.run_id AND u.seq = steps.seq AND u.event = 'unknown'
      AND u.id > COALESCE((SELECT MAX(i.id) FROM journal i WHERE i.run_id = steps.run_id
                           AND i.seq = steps.seq AND i.event = 'intent'), 0)
    ORDER BY u.id LIMIT 1
) WHERE type = 'effect';
