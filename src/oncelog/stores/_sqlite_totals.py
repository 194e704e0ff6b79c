"""SQLite's budget totals' triggers, kept only in a ledger that has had a budget.

The triggers (0009_budget_totals.sql, the update's narrowed by 0017) keep ``runs.used_*``
and ``agent_usage`` in the transaction that writes each step. In a ledger where no run and
no agent has a budget they change nothing, yet each still costs every write of a step:
SQLite loads the row's old and new values and enters the trigger's program, about 20 k
instructions per insert and 16 k per update (callgrind), a twentieth of an effect.

So migration 20 drops them, and they are created again, the same text, in the transaction
that first gives the ledger a budget (``keep``), which is also the one that counts the
totals afresh (a new run has none yet; ``set_budget`` and ``set_agent_budget`` count the
steps). Nothing drops them afterwards. A writer in another process that prepared its
statements without them prepares them again at its next statement: the schema's cookie
changed, and its next write transaction begins after this one committed.
"""

from __future__ import annotations

from ._sql import Tx

# Whether the ledger holds a budget: read once, when migration 20 drops the triggers.
BUDGETED = (
    "SELECT EXISTS (SELECT 1 FROM runs WHERE budget IS NOT NULL) "
    "OR EXISTS (SELECT 1 FROM agent_budgets)"
)
# The migration that drops them (the store then creates them again where a budget exists).
ON_DEMAND = "0020_budget_totals_on_demand.sql"

_NEW = """
CREATE TRIGGER IF NOT EXISTS steps_count_new AFTER INSERT ON steps WHEN NEW.state != 'failed'
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
END
"""

# Its body runs only where a counted value changes (0017).
_CHANGE = """
CREATE TRIGGER IF NOT EXISTS steps_count_change
AFTER UPDATE OF state, tokens_in, tokens_out, cost, irreversible, started_at ON steps
WHEN (OLD.state = 'failed') IS NOT (NEW.state = 'failed')
    OR (NEW.state != 'failed' AND (OLD.tokens_in IS NOT NEW.tokens_in
        OR OLD.tokens_out IS NOT NEW.tokens_out OR OLD.cost IS NOT NEW.cost
        OR OLD.irreversible IS NOT NEW.irreversible OR OLD.started_at IS NOT NEW.started_at))
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
END
"""


def keep(tx: Tx) -> None:
    """Have the triggers keep the totals from this transaction on. Once they exist each
    statement is prepared as a no-op, which the connection's cache keeps."""
    tx.execute(_NEW)
    tx.execute(_CHANGE)
