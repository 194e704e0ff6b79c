-- Daily budgets per agent (the named scope many runs share), counted over the effects of
-- its runs that started since midnight UTC by the store's clock.
CREATE TABLE agent_budgets (
    agent  TEXT PRIMARY KEY,
    budget TEXT NOT NULL,   -- JSON limits: calls, cost, irreversible
    set_by TEXT NOT NULL,
    set_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX runs_by_agent ON runs (agent);
