-- A kill switch set, cleared or removed is announced at its transaction's commit: a store
-- keeps the switches that are on in memory (_postgres_halts) and looks at them before a
-- model call or a read instead of asking the server, LISTENing on the halts table's own
-- channel (named after its oid, so a ledger in another schema of the database wakes no
-- one here) and reading them again when it hears. One notification per statement; the
-- server folds a transaction's identical ones into one. The function's live definition
-- is functions.sql's. Every statement may run again.
CREATE OR REPLACE FUNCTION oncelog_halts_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('oncelog_halts_' || TG_RELID::text, '');
    RETURN NULL;
END;
$$;
DROP TRIGGER IF EXISTS halts_changed ON halts;
CREATE TRIGGER halts_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON halts
    FOR EACH STATEMENT EXECUTE FUNCTION oncelog_halts_changed();
