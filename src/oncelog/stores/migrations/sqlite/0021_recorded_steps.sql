-- A model call or a read is one journal record, "recorded", where it was an intent and an
-- outcome (0021_recorded_steps.sql there adds PostgreSQL's function for it). SQLite
-- writes it from the store's own statements (stores/_sqlite_write.py): no schema changes.
-- Kept so both dialects have the same migrations.
SELECT 1;
