"""The transition table (``records/_transitions.py``) is the one place a step's writes
are allowed from: every write is tried from every state, on both stores and by every
path that makes it (SQLite's fast path, the general path, PostgreSQL's server
functions), and leaves the step as the table says, or refuses and leaves it as it was.
``verify`` replays a step by the same table, the server functions a ledger ends with
are the functions file's, whatever schema version it was upgraded from, and no copy of
"in doubt" or of a person's decisions is left to disagree with it."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import oncelog
from oncelog import Resolution, StepState, StepType
from oncelog.audit._verify import verify
from oncelog.records import _transitions as transitions
from oncelog.records._serialization import digest
from oncelog.records._transitions import IN_DOUBT, RESOLVED_STATE, Transition
from oncelog.runtime import _decide
from oncelog.stores import Lease, NewStep, Outcome, Store
from oncelog.stores._migrations import migrations
from oncelog.stores._sql_guards import functions, leaves
from oncelog.stores._sql_store import SQLStore
from oncelog.stores._sql_tx import fence
from oncelog.stores._sqlite import SQLiteStore
from oncelog.stores._sqlite_write import end_step

from .conftest import require
from .support.postgres import POSTGRES_REASON, execute, fresh_schema, postgres_is_up
from .test_store_contract import acquire, dead, effect, opened, sql

SRC = Path(__file__).parent.parent / "src" / "oncelog"
STOP = '{"key":null,"kind":"AmbiguousOutcome","message":"crashed","step_id":"a"}'
ARGS = '{"args":[],"kwargs":{}}'
DONE = Outcome(StepState.DONE, '"ok"')


def model(step_id: str = "a") -> NewStep:
    return NewStep(0, step_id, StepType.LLM, "gpt", "llm", f"key-{step_id}", digest(ARGS), ARGS)


def put(store_url: str, run_id: str, state: StepState) -> None:
    """The step's state set behind the store's back: where the write is tried from."""
    sql(store_url, f"UPDATE steps SET state = '{state.value}' WHERE run_id = '{run_id}'")


def state_of(store: Store, run_id: str) -> StepState:
    [step] = store.steps(run_id, 0, 10)
    return step.state


@dataclass(frozen=True)
class Write:
    """One write of a step by one path: how the step is made, then the write itself."""

    transition: Transition
    target: StepState  # the state this write asks for
    make: Callable[[Store, Lease], None]
    write: Callable[[Store, Lease, str], object]


def _effect(store: Store, lease: Lease) -> None:
    store.write_intent(lease, effect(0, "a"), None)


def _resolved(store: Store, lease: Lease) -> None:
    _effect(store, lease)
    resolve(store, lease.run_id, Resolution.DONE)


def _recorded(store: Store, lease: Lease) -> None:
    store.record_step(lease, model(), None, DONE)


def resolve(store: Store, run_id: str, resolution: Resolution) -> object:
    return store.resolve(
        run_id, "a", resolution, result_json=None, by="alice", note=None, force=True
    )


def _general_outcome(store: Store, lease: Lease, _: str) -> None:
    assert isinstance(store, SQLStore)
    with store._tx() as tx:
        fence(tx, lease)
        store._end_step(tx, lease, 0, 1, DONE)


def _restart(store: Store, lease: Lease, state: str) -> object:
    return store.write_intent(lease, effect(0, "a"), StepState(state))


def _record_again(store: Store, lease: Lease, state: str) -> None:
    store.record_step(lease, model(), StepState(state), DONE)


WRITES = {
    "outcome": Write(
        transitions.OUTCOME, StepState.DONE, _effect,
        lambda store, lease, _: store.write_outcome(lease, effect(0, "a"), 1, DONE),
    ),
    "outcome by the general path": Write(
        transitions.OUTCOME, StepState.DONE, _effect, _general_outcome
    ),
    "a later attempt": Write(transitions.RESTART, StepState.IN_FLIGHT, _effect, _restart),
    "a probe's answer": Write(
        transitions.PROBED, StepState.DONE, _effect,
        lambda store, lease, _: store.settle(lease, 0, 1, DONE),
    ),
    "unknown": Write(
        transitions.MARK_UNKNOWN, StepState.UNKNOWN, _effect,
        lambda store, lease, _: store.mark_unknown(lease, 0, "crashed", STOP),
    ),
    "a model call asked again": Write(
        transitions.RECORDED, StepState.DONE, _recorded, _record_again
    ),
    "a person's decision": Write(
        transitions.RESOLVE, StepState.NOT_DONE, _effect,
        lambda store, lease, _: resolve(store, lease.run_id, Resolution.NOT_DONE),
    ),
    "a person's correction": Write(
        transitions.CORRECT, StepState.ABANDONED, _resolved,
        lambda store, lease, _: store.resolve(
            lease.run_id, "a", Resolution.ABANDON, result_json=None, by="alice", note=None,
            force=True, correct=True,
        ),
    ),
    "a person's retry": Write(
        transitions.RETRY, StepState.NOT_DONE, _effect,
        lambda store, lease, _: store.retry_step(
            lease.run_id, "a", by="alice", why="the provider is back", force=True
        ),
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", WRITES)
def test_each_write_goes_only_from_the_states_the_table_allows(store_url: str, name: str) -> None:
    write = WRITES[name]
    assert write.target in write.transition.targets
    with opened(store_url) as store:
        for state in StepState:
            run_id = f"from-{state.value}"
            lease = acquire(store, run_id, "worker")
            write.make(store, lease)
            put(store_url, run_id, state)
            try:
                write.write(store, lease, state.value)
            except oncelog.OnceLogError as exc:
                refused: Exception | None = exc
            else:
                refused = None
            if state in write.transition.sources:
                assert refused is None, (state, refused)
                assert state_of(store, run_id) is write.target, state
            else:
                # ``mark_unknown`` writes its record whatever it finds: its run stops.
                assert refused is not None or name == "unknown", state
                assert state_of(store, run_id) is state


def test_sqlites_fast_outcome_goes_only_from_the_states_the_table_allows(db_path: str) -> None:
    with closing(SQLiteStore(db_path)) as store:
        for state in StepState:
            lease = acquire(store, state.value, "worker")
            _effect(store, lease)
            put(db_path, state.value, state)
            with store._tx() as tx:
                written = end_step(tx, lease, 0, 1, DONE)
            assert written is (state in transitions.OUTCOME.sources), state


def test_a_new_step_is_written_only_where_none_is(store_url: str) -> None:
    assert transitions.INTENT.sources == {None}
    with opened(store_url) as store:
        for state in StepState:
            lease = acquire(store, state.value, "worker")
            _effect(store, lease)
            put(store_url, state.value, state)
            with pytest.raises(oncelog.DuplicateStep):
                store.write_intent(lease, effect(1, "a"), None)
            assert state_of(store, state.value) is state


@pytest.mark.parametrize("resolution", Resolution)
def test_a_persons_decision_leaves_the_tables_state_and_verify_agrees(
    store_url: str, resolution: Resolution
) -> None:
    with opened(store_url) as store:
        for state in IN_DOUBT:
            run_id = f"{resolution.value}-{state.value}"
            lease = acquire(store, run_id, "worker")
            _effect(store, lease)
            if state is StepState.UNKNOWN:
                store.mark_unknown(lease, 0, "crashed", STOP)
            resolve(store, run_id, resolution)
            assert state_of(store, run_id) is RESOLVED_STATE[resolution]
        assert verify(store).ok


def test_verify_replays_each_record_to_the_state_its_write_leaves() -> None:
    after = transitions.state_after
    assert after("intent", {}) == StepState.IN_FLIGHT.value
    assert after("unknown", {}) == StepState.UNKNOWN.value
    for event in ("outcome", "probed", "recorded"):
        assert after(event, {"state": "not_done"}) == "not_done"
    for resolution, state in RESOLVED_STATE.items():
        for event in ("resolved", "corrected"):
            assert after(event, {"resolution": resolution.value}) == state.value
    assert after("lease_acquired", {}) is None
    with pytest.raises(ValueError, match="maybe"):
        after("resolved", {"resolution": "maybe"})


def test_the_table_is_whole() -> None:
    """Every state is reached by some write and left by some write but the settled ones;
    in doubt is what a person decides on, and their decisions name every resolution."""
    reached = set().union(*(t.targets for t in transitions.TRANSITIONS.values()))
    assert reached == set(StepState)
    left = set().union(*(t.sources for t in transitions.TRANSITIONS.values())) - {None}
    assert left == set(StepState)
    assert transitions.RESOLVE.sources == IN_DOUBT
    assert set(RESOLVED_STATE) == set(Resolution)
    assert transitions.RESOLVE.targets == transitions.CORRECT.targets
    assert _decide.IN_DOUBT is IN_DOUBT


def test_no_module_keeps_its_own_copy_of_the_states() -> None:
    """Outside the table, no module spells "in doubt" or a person's decisions as states
    of its own, and the stores write no state as a literal in their SQL: each comes from
    the table (``_sql_guards``), so a transition changed there is changed everywhere."""
    doubt = {StepState.IN_FLIGHT.value, StepState.UNKNOWN.value}
    copies = []
    for path in sorted(SRC.rglob("*.py")):
        if path.name == "_transitions.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            named = _state_names(node)
            if named == doubt or named == {"IN_FLIGHT", "UNKNOWN"}:
                copies.append(f"{path.relative_to(SRC)}:{node.lineno}")  # type: ignore[attr-defined]
            if isinstance(node, ast.Dict) and {"abandon", "abandoned"} <= _strings(node):
                copies.append(f"{path.relative_to(SRC)}:{node.lineno}")
    # A surface uses public names only, and none says "in doubt" yet (issue 31, item 1).
    assert [copy.partition(":")[0] for copy in copies] == ["cli/_runs.py"]
    stores = SRC / "stores"
    sql_states = re.compile(r"state (=|IN \(|<>|!=) ?'(in_flight|unknown|not_done|abandoned)'")
    written = [
        f"{path.name}: {match.group(0)}"
        for path in sorted(stores.glob("_*.py"))
        for match in sql_states.finditer(path.read_text(encoding="utf-8"))
    ]
    assert written == []


def _state_names(node: ast.AST) -> set[str]:
    """The members (``StepState.X``) or values a tuple, set or list literal names."""
    if not isinstance(node, ast.Tuple | ast.Set | ast.List) or len(node.elts) != 2:
        return set()
    names = set()
    for element in node.elts:
        if isinstance(element, ast.Attribute):
            names.add(element.attr)
        elif isinstance(element, ast.Constant) and isinstance(element.value, str):
            names.add(element.value)
    return names


def _strings(node: ast.Dict) -> set[str]:
    return {
        v.value
        for v in (*node.keys, *node.values)
        if isinstance(v, ast.Constant) and isinstance(v.value, str)
    }


def test_the_server_functions_guard_by_the_table() -> None:
    """The functions file names no state a transition leaves from or goes to: it is filled
    in from the table, and the outcome's guard is the table's."""
    with open(SRC / "stores" / "migrations" / "postgres" / "functions.sql") as text:
        raw = text.read()
    assert "'in_flight'" not in raw
    assert "{{ outcome.leaves }}" in raw
    rendered = functions()
    assert "{{" not in rendered
    assert f"AND {leaves(transitions.OUTCOME)};" in rendered
    transition = re.compile(r"CREATE (OR REPLACE )?FUNCTION oncelog_(intent|outcome|recorded)\(")
    assert [m.name for m in migrations("postgres") if transition.search(m.sql)] == []


# -- the functions a PostgreSQL ledger ends with ----------------------------------------


def _functions(schema: str) -> list[tuple[Any, ...]]:
    """Each function of the ledger's schema: its arguments, body, settings and whether it
    runs as its owner."""
    return [
        tuple(row)
        for row in execute(
            "SELECT proname, pg_get_function_identity_arguments(oid), md5(prosrc), "
            "array_to_string(proconfig, ',') IS NOT NULL, prosecdef FROM pg_proc "
            "WHERE pronamespace = %s::regnamespace ORDER BY 1, 2",
            (schema,),
        )
    ]


def _schema(url: str) -> str:
    return url.rsplit("%3D", 1)[1]


def test_a_ledger_upgraded_from_any_version_ends_with_the_functions_files_functions() -> None:
    """A ledger left at each earlier schema version (its migrations applied as they were)
    is opened: it ends with the functions of a new ledger, the live ones the file's."""
    require(postgres_is_up(), POSTGRES_REASON)
    import psycopg

    known = migrations("postgres")
    with fresh_schema() as url:
        oncelog.open(url).close()
        expected = _functions(_schema(url))
        with psycopg.connect(url, autocommit=True) as conn:
            outcome = conn.execute(
                "SELECT prosrc FROM pg_proc WHERE proname = 'oncelog_outcome' AND pronargs = 17 "
                "AND pronamespace = current_schema()::regnamespace"
            ).fetchone()
        assert outcome is not None
        assert f"AND {leaves(transitions.OUTCOME)};" in outcome[0]
    for version in range(0, known[-1].version):
        with fresh_schema() as url:
            with psycopg.connect(url) as conn, conn.transaction():
                conn.execute(
                    "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, "
                    "name TEXT NOT NULL, applied_at DOUBLE PRECISION NOT NULL)"
                )
                for migration in known[:version]:
                    conn.execute(migration.sql)
                    conn.execute(
                        "INSERT INTO schema_migrations VALUES (%s, %s, 0)",
                        (migration.version, migration.name),
                    )
            oncelog.open(url).close()
            assert _functions(_schema(url)) == expected, version


def test_an_old_versions_calls_do_what_this_versions_do() -> None:
    """The functions a process of the previous version calls are this version's: an
    outcome of a step in a state it may not leave is refused by them too."""
    require(postgres_is_up(), POSTGRES_REASON)
    import psycopg

    with fresh_schema() as url, opened(url) as store:
        lease = acquire(store, "r", "worker", owner_is_dead=dead)
        _effect(store, lease)
        settled = next(s for s in StepState if s not in transitions.OUTCOME.sources)
        put(url, "r", settled)
        with psycopg.connect(url, autocommit=True) as conn, pytest.raises(psycopg.Error) as err:
            conn.execute(
                "SELECT oncelog_outcome(%s, %s, %s, %s, 0, 'a', 1, 'done', '1', NULL, 0, 0, "
                "NULL, NULL, '{}', '')",
                ("r", lease.owner, lease.token, lease.ttl),
            )
        assert err.value.sqlstate == "OL003"
        assert state_of(store, "r") is settled


def test_functions_changed_in_a_newer_oncelog_reach_a_current_ledger_at_its_next_open() -> None:
    """A ledger whose schema is current but whose server functions are another oncelog's
    (a transition changed in the table, shipped without a numbered migration) gets this
    oncelog's at its next open; one whose functions are this oncelog's is left alone."""
    require(postgres_is_up(), POSTGRES_REASON)
    import psycopg

    with fresh_schema() as url:
        oncelog.open(url).close()
        expected = _functions(_schema(url))
        with psycopg.connect(url, autocommit=True) as conn:
            # An older oncelog's functions: the outcome's guard lets it leave any state, and
            # the version function answers another digest.
            conn.execute(functions().replace(f"AND {leaves(transitions.OUTCOME)};", ";"))
            conn.execute(
                "CREATE OR REPLACE FUNCTION oncelog_functions_version() RETURNS text "
                "LANGUAGE sql IMMUTABLE AS $$ SELECT 'older'::text $$"
            )
        assert _functions(_schema(url)) != expected
        oncelog.open(url).close()
        assert _functions(_schema(url)) == expected
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("DROP FUNCTION oncelog_functions_version()")  # from before digests
        oncelog.open(url).close()
        assert _functions(_schema(url)) == expected
