-- SQLite drops its budget totals' triggers until a ledger has a budget
-- (0020_budget_totals_on_demand.sql there). PostgreSQL's trigger is skipped already where
-- nothing is counted (0016, 0018): nothing to change. Kept so both dialects have the same
-- migrations.
SELECT 1;
