-- Facts about the ledger itself that `oncelog verify` checks the journal against.
-- chain_from: the journal id up to which records may lack a hash (those written before
-- the chain, version 7, existed); every later record must carry one, so removing hashes
-- cannot pass them off as older than the chain.
CREATE TABLE ledger_meta (
    name  TEXT PRIMARY KEY,
    value BIGINT NOT NULL
);
INSERT INTO ledger_meta (name, value) SELECT 'chain_from', COALESCE(
    (SELECT MIN(id) - 1 FROM journal WHERE hash IS NOT NULL), (SELECT MAX(id) FROM journal), 0
);

CREATE TRIGGER ledger_meta_append_only BEFORE UPDATE OR DELETE ON ledger_meta
    FOR EACH ROW EXECUTE FUNCTION oncelog_append_only();
CREATE TRIGGER ledger_meta_no_truncate BEFORE TRUNCATE ON ledger_meta
    FOR EACH STATEMENT EXECUTE FUNCTION oncelog_append_only();
