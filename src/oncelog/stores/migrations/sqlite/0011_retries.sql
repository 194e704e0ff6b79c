-- Retries decided by the state machine (oncelog.runtime._decide): when an effect's key was first
-- sent to the provider (a provider deduplicates for a window from then, however often the
-- effect is sent again), and when a failed attempt that was certainly not performed may
-- be tried next. Both live beside the attempt count, so a crash loop cannot reset them.
ALTER TABLE steps ADD COLUMN first_started_at REAL;  -- NULL until a second attempt
ALTER TABLE steps ADD COLUMN retry_at REAL;          -- NULL: no wait before the next attempt

-- A step written before and run more than once: its first send is its first intent's
-- time (since schema 9 the row's started_at then, to the bit), so verify holds it to that.
UPDATE steps SET first_started_at = (
    SELECT at FROM journal
    WHERE journal.run_id = steps.run_id AND journal.seq = steps.seq AND journal.event = 'intent'
    ORDER BY journal.id LIMIT 1
) WHERE attempts > 1;
