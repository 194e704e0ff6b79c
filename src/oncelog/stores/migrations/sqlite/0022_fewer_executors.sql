-- PostgreSQL's transition functions take their locks without PERFORM, look for the
-- chain's head from a hint the caller gives, and its budget trigger has no WHEN
-- (0022_fewer_executors.sql there). SQLite reads the head inside the journal's INSERT and
-- has no such functions: nothing to change. Kept so both dialects have the same migrations.
SELECT 1;
