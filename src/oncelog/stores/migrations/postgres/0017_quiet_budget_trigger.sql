-- SQLite's budget trigger runs its body only where a counted value changes
-- (0017_quiet_budget_trigger.sql there), as PostgreSQL's does since 0015: nothing to
-- change. Kept so both dialects have the same migrations.
SELECT 1;
