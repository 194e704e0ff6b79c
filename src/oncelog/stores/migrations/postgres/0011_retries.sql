-- Retries decided by the state machine (oncelog._decide): when an effect's key was first
-- sent to the provider (a provider deduplicates for a window from then, however often the
-- effect is sent again), and when a failed attempt that was certainly not performed may
-- be tried next. Both live beside the attempt count, so a crash loop cannot reset them.
ALTER TABLE steps ADD COLUMN first_started_at DOUBLE PRECISION;  -- NULL on rows written before
ALTER TABLE steps ADD COLUMN retry_at DOUBLE PRECISION;  -- NULL: no wait before the next attempt
