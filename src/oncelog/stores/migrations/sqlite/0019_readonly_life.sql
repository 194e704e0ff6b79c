-- PostgreSQL lets a role that may only read the ledger read the server's life, which a
-- pooled connection needs (0019_readonly_life.sql there). SQLite has no roles and no
-- server life: a reader needs only read access to the file. Kept so both dialects have
-- the same migrations.
SELECT 1;
