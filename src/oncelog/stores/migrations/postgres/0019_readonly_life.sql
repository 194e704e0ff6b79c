-- A role that may only read the ledger (a dashboard, `oncelog verify` or `show`, the
-- console, an auditor) opens pooled connections again. Every pooled connection reads the
-- server's life (0018), and reading it writes it first when it is missing (after a crash,
-- or on a new ledger): a role without INSERT on server_life could not connect at all.
-- The function now runs as its owner, the role that migrated the ledger, whatever role
-- calls it. What it writes is the one thing any connection of a new life writes anyway:
-- a random id, only where there is none, so calling it lets nobody do more than open a
-- connection. Its search_path is the ledger's schema and then pg_temp (pg_catalog is
-- searched first, implicitly): no object of the caller's can stand in for server_life or
-- for a function it calls. The write path's check is unchanged: the same id, read the
-- same way.
-- Every statement may run again (a test re-applies the later migrations).
CREATE OR REPLACE FUNCTION oncelog_server_life() RETURNS TEXT
LANGUAGE sql VOLATILE SECURITY DEFINER AS $$
    INSERT INTO server_life (id) VALUES (md5(random()::text || clock_timestamp()::text))
    ON CONFLICT (one) DO NOTHING;
    SELECT id FROM server_life;
$$;

-- The schema is named by the URL (options=-csearch_path=NAME), so it is written in here.
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION oncelog_server_life() SET search_path = %I, pg_temp',
                   current_schema());
END;
$$;
