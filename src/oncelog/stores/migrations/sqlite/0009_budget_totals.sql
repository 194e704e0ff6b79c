-- Running totals for budgets, so an intent checks a budget at a constant cost instead of
-- summing the run's (or the agent's day's) steps. The triggers keep them in the very
-- transaction that writes a step, whatever writes it; verify reconciles them with the
-- steps. Totals are kept only where a budget exists: set_budget and set_agent_budget
-- count them afresh when they set one, so every other commit stays as small as before.
--
-- A step counts unless it failed (a definite refusal): steps, tokens, cost, irreversible
-- on its run; for an effect, calls, cost, irreversible on its agent's day (UTC, by the
-- store's clock, the day its latest attempt started).
ALTER TABLE runs ADD COLUMN used_steps INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN used_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN used_cost REAL NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN used_irreversible INTEGER NOT NULL DEFAULT 0;
CREATE TABLE agent_usage (
    agent        TEXT NOT NULL,
    day          INTEGER NOT NULL,  -- midnight UTC, Unix seconds
    calls        INTEGER NOT NULL,
    cost         REAL NOT NULL,
    irreversible INTEGER NOT NULL,
    PRIMARY KEY (agent, day)
) WITHOUT ROWID;

UPDATE runs SET
    used_steps = (SELECT COUNT(*) FROM steps s WHERE s.run_id = runs.run_id AND s.state != 'failed'),
    used_tokens = (SELECT COALESCE(SUM(tokens_in + tokens_out), 0) FROM steps s
                   WHERE s.run_id = runs.run_id AND s.state != 'failed'),
    used_cost = (SELECT COALESCE(SUM(cost), 0) FROM steps s
                 WHERE s.run_id = runs.run_id AND s.state != 'failed'),
    used_irreversible = (SELECT COALESCE(SUM(irreversible), 0) FROM steps s
                         WHERE s.run_id = runs.run_id AND s.state != 'failed')
WHERE budget IS NOT NULL;
INSERT INTO agent_usage (agent, day, calls, cost, irreversible)
SELECT runs.agent, CAST(steps.started_at / 86400 AS INTEGER) * 86400, COUNT(*),
       SUM(steps.cost), SUM(steps.irreversible)
FROM steps JOIN runs ON runs.run_id = steps.run_id
JOIN agent_budgets ON agent_budgets.agent = runs.agent
WHERE steps.type = 'effect' AND steps.state != 'failed'
GROUP BY 1, 2;

CREATE TRIGGER steps_count_new AFTER INSERT ON steps WHEN NEW.state != 'failed'
BEGIN
    UPDATE runs SET used_steps = used_steps + 1,
        used_tokens = used_tokens + NEW.tokens_in + NEW.tokens_out,
        used_cost = used_cost + NEW.cost, used_irreversible = used_irreversible + NEW.irreversible
    WHERE run_id = NEW.run_id AND budget IS NOT NULL;
    INSERT INTO agent_usage (agent, day, calls, cost, irreversible)
    SELECT runs.agent, CAST(NEW.started_at / 86400 AS INTEGER) * 86400, 1, NEW.cost,
           NEW.irreversible
    FROM runs JOIN agent_budgets ON agent_budgets.agent = runs.agent
    WHERE runs.run_id = NEW.run_id AND NEW.type = 'effect'
    ON CONFLICT (agent, day) DO UPDATE SET calls = calls + 1, cost = cost + excluded.cost,
        irreversible = irreversible + excluded.irreversible;
END;

-- An update takes the step's old contribution away and adds its new one.
CREATE TRIGGER steps_count_change
AFTER UPDATE OF state, tokens_in, tokens_out, cost, irreversible, started_at ON steps
BEGIN
    UPDATE runs SET
        used_steps = used_steps + (NEW.state != 'failed') - (OLD.state != 'failed'),
        used_tokens = used_tokens
            + CASE WHEN NEW.state != 'failed' THEN NEW.tokens_in + NEW.tokens_out ELSE 0 END
            - CASE WHEN OLD.state != 'failed' THEN OLD.tokens_in + OLD.tokens_out ELSE 0 END,
        used_cost = used_cost + CASE WHEN NEW.state != 'failed' THEN NEW.cost ELSE 0 END
            - CASE WHEN OLD.state != 'failed' THEN OLD.cost ELSE 0 END,
        used_irreversible = used_irreversible
            + CASE WHEN NEW.state != 'failed' THEN NEW.irreversible ELSE 0 END
            - CASE WHEN OLD.state != 'failed' THEN OLD.irreversible ELSE 0 END
    WHERE run_id = NEW.run_id AND budget IS NOT NULL;
    UPDATE agent_usage SET calls = calls - 1, cost = cost - OLD.cost,
        irreversible = irreversible - OLD.irreversible
    WHERE OLD.type = 'effect' AND OLD.state != 'failed'
      AND agent = (SELECT agent FROM runs WHERE run_id = OLD.run_id)
      AND day = CAST(OLD.started_at / 86400 AS INTEGER) * 86400;
    INSERT INTO agent_usage (agent, day, calls, cost, irreversible)
    SELECT runs.agent, CAST(NEW.started_at / 86400 AS INTEGER) * 86400, 1, NEW.cost,
           NEW.irreversible
    FROM runs JOIN agent_budgets ON agent_budgets.agent = runs.agent
    WHERE runs.run_id = NEW.run_id AND NEW.type = 'effect' AND NEW.state != 'failed'
    ON CONFLICT (agent, day) DO UPDATE SET calls = calls + 1, cost = cost + excluded.cost,
        irreversible = irreversible + excluded.irreversible;
END;
