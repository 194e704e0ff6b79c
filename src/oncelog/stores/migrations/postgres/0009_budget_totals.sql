-- Running totals for budgets, so an intent checks a budget at a constant cost instead of
-- summing the run's (or the agent's day's) steps. The trigger keeps them in the very
-- transaction that writes a step, whatever writes it; verify reconciles them with the
-- steps. Totals are kept only where a budget exists: set_budget and set_agent_budget
-- count them afresh when they set one, so every other commit stays as small as before.
--
-- A step counts unless it failed (a definite refusal): steps, tokens, cost, irreversible
-- on its run; for an effect, calls, cost, irreversible on its agent's day (UTC, by the
-- store's clock, the day its latest attempt started). Lock order (_sql_tx): the run's row
-- is held already by whoever writes its steps; the agent's day row comes after its budget.
ALTER TABLE runs ADD COLUMN used_steps BIGINT NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN used_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN used_cost DOUBLE PRECISION NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN used_irreversible BIGINT NOT NULL DEFAULT 0;
CREATE TABLE agent_usage (
    agent        TEXT NOT NULL,
    day          DOUBLE PRECISION NOT NULL,  -- midnight UTC, Unix seconds
    calls        BIGINT NOT NULL,
    cost         DOUBLE PRECISION NOT NULL,
    irreversible BIGINT NOT NULL,
    PRIMARY KEY (agent, day)
);

UPDATE runs SET (used_steps, used_tokens, used_cost, used_irreversible) = (
    SELECT COUNT(*), COALESCE(SUM(tokens_in + tokens_out), 0), COALESCE(SUM(cost), 0),
           COALESCE(SUM(irreversible), 0)
    FROM steps s WHERE s.run_id = runs.run_id AND s.state != 'failed')
WHERE budget IS NOT NULL;
INSERT INTO agent_usage (agent, day, calls, cost, irreversible)
SELECT runs.agent, floor(steps.started_at / 86400) * 86400, COUNT(*), SUM(steps.cost),
       SUM(steps.irreversible)
FROM steps JOIN runs ON runs.run_id = steps.run_id
JOIN agent_budgets ON agent_budgets.agent = runs.agent
WHERE steps.type = 'effect' AND steps.state != 'failed'
GROUP BY 1, 2;

-- Add (direction 1) or take away (-1) what one version of a step row counts.
CREATE FUNCTION oncelog_count_step(s steps, direction INTEGER) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF s.state = 'failed' THEN
        RETURN;
    END IF;
    UPDATE runs SET used_steps = used_steps + direction,
        used_tokens = used_tokens + direction * (s.tokens_in + s.tokens_out),
        used_cost = used_cost + direction * s.cost,
        used_irreversible = used_irreversible + direction * s.irreversible
    WHERE run_id = s.run_id AND budget IS NOT NULL;
    IF s.type != 'effect' THEN
        RETURN;
    END IF;
    IF direction < 0 THEN
        UPDATE agent_usage SET calls = calls - 1, cost = cost - s.cost,
            irreversible = irreversible - s.irreversible
        WHERE agent = (SELECT agent FROM runs WHERE run_id = s.run_id)
          AND day = floor(s.started_at / 86400) * 86400;
    ELSE
        INSERT INTO agent_usage AS u (agent, day, calls, cost, irreversible)
        SELECT runs.agent, floor(s.started_at / 86400) * 86400, 1, s.cost, s.irreversible
        FROM runs JOIN agent_budgets ON agent_budgets.agent = runs.agent
        WHERE runs.run_id = s.run_id
        ON CONFLICT (agent, day) DO UPDATE SET calls = u.calls + 1,
            cost = u.cost + excluded.cost, irreversible = u.irreversible + excluded.irreversible;
    END IF;
END;
$$;
CREATE FUNCTION oncelog_count_steps() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        PERFORM oncelog_count_step(OLD, -1);
    END IF;
    PERFORM oncelog_count_step(NEW, 1);
    RETURN NULL;
END;
$$;
CREATE TRIGGER steps_count AFTER INSERT OR UPDATE OF state, tokens_in, tokens_out, cost,
    irreversible, started_at ON steps FOR EACH ROW EXECUTE FUNCTION oncelog_count_steps();
