"""WAL pages an effect writes under the ledger's record layout and under the layouts issue
32 (item 3, "a lean record") weighed, on raw SQL, against the floor in the same run.

    python bench/record_layouts.py [--quick] [--write docs/benchmarks.md] [--dir DIR]

Each layout gets the same effects (``bench/_overhead``'s arguments and results), each as
the ledger writes it: an intent committed (the step's row and its chained journal entry),
then an outcome committed. Layouts:

- ``today``: ``steps`` WITHOUT ROWID, key (run_id, seq), unique (run_id, step_id); the
  ``journal`` and its ``journal_by_run`` (run_id, id) index: SQLite migrations 1 to 27.
- ``rowid steps``: the same, ``steps`` an ordinary table (its key an index of its own).
- ``thin steps``: ``today`` with the arguments and the result only in the journal.
- ``events``: one append-only table as both journal and step state: the by-run index, and
  a unique index of a step's first intent by step id; a step's state is its last event.
- ``events + by step``: the same with an index by (run_id, seq, id) to find that event.
- the floor: one table, an INSERT committed and an UPDATE committed.

Two ledgers: a new one with one run, and one that already holds 1,000 effects of two
other runs, where 20 runs write in turn (a used ledger: their rows land inside the b-trees, not
at their ends). Each WAL page is put down to its b-tree through ``dbstat``. Pages are
counted, not timed, so the machine's load does not move them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sqlite3
import sys
import time
from collections import Counter
from pathlib import Path

from _blocks import write_block
from _overhead.workload import EffectInput

_STEP_COLUMNS = (
    "run_id TEXT NOT NULL, seq INTEGER NOT NULL, step_id TEXT NOT NULL, type TEXT NOT NULL, "
    "tool TEXT NOT NULL, kind TEXT NOT NULL, key TEXT NOT NULL, args_hash TEXT NOT NULL, "
    "args TEXT, state TEXT NOT NULL, result TEXT, error TEXT, attempts INTEGER NOT NULL, "
    "tokens_in INTEGER NOT NULL DEFAULT 0, tokens_out INTEGER NOT NULL DEFAULT 0, "
    "started_at REAL NOT NULL, finished_at REAL, cost REAL NOT NULL DEFAULT 0, "
    "irreversible INTEGER NOT NULL DEFAULT 0, first_started_at REAL, retry_at REAL, reason TEXT, "
    "PRIMARY KEY (run_id, seq), UNIQUE (run_id, step_id))"
)
_JOURNAL = (
    "CREATE TABLE journal (id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, seq INTEGER, "
    "event TEXT NOT NULL, data TEXT NOT NULL, at REAL NOT NULL, hash TEXT);"
    "CREATE INDEX journal_by_run ON journal (run_id, id);"
)
_EVENTS = (
    "CREATE TABLE journal (id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, seq INTEGER, "
    "step_id TEXT, event TEXT NOT NULL, state TEXT, data TEXT NOT NULL, at REAL NOT NULL, "
    "hash TEXT);"
    "CREATE INDEX journal_by_run ON journal (run_id, id);"
    "CREATE UNIQUE INDEX journal_first_intents ON journal (run_id, step_id) "
    "WHERE event = 'intent';"
)
# name -> (schema, whether steps are rows of their own, whether they keep their bodies)
LAYOUTS = {
    "today": (f"CREATE TABLE steps ({_STEP_COLUMNS} WITHOUT ROWID;{_JOURNAL}", True, True),
    "rowid steps": (f"CREATE TABLE steps ({_STEP_COLUMNS};{_JOURNAL}", True, True),
    "thin steps": (f"CREATE TABLE steps ({_STEP_COLUMNS} WITHOUT ROWID;{_JOURNAL}", True, False),
    "events": (_EVENTS, False, False),
    "events + by step": (
        _EVENTS + "CREATE INDEX journal_by_step ON journal (run_id, seq, id);",
        False,
        False,
    ),
}
FLOOR = (
    "CREATE TABLE effects (id INTEGER PRIMARY KEY, key TEXT, args TEXT, state TEXT, result TEXT)"
)
_LAST_HASH = "SELECT hash FROM journal WHERE run_id = ? ORDER BY id DESC LIMIT 1"
_INSERT_STEP = (
    "INSERT INTO steps (run_id, seq, step_id, type, tool, kind, key, args_hash, args, state, "
    "attempts, started_at) VALUES (?, ?, ?, 'effect', 'send_email', 'create', ?, ?, ?, "
    "'in_flight', 1, ?)"
)
_END_STEP = (
    "UPDATE steps SET state = 'done', result = ?, finished_at = ? WHERE run_id = ? AND seq = ?"
)


def _append(db: sqlite3.Connection, run: str, seq: int, event: str, data: str, step: str | None,
            events: bool) -> None:  # fmt: skip
    at = time.time()
    prev = (db.execute(_LAST_HASH, (run,)).fetchone() or ("0" * 64,))[0]
    hashed = hashlib.sha256(f"{prev}{json.dumps([run, seq, event, data, at])}".encode())
    if events:
        db.execute(
            "INSERT INTO journal (run_id, seq, step_id, event, state, data, at, hash) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (run, seq, step, event, "in_flight" if step else "done", data, at, hashed.hexdigest()),
        )
    else:
        db.execute(
            "INSERT INTO journal (run_id, seq, event, data, at, hash) VALUES (?, ?, ?, ?, ?, ?)",
            (run, seq, event, data, at, hashed.hexdigest()),
        )


def effect(db: sqlite3.Connection, layout: str, run: str, seq: int, item: EffectInput) -> None:
    """One effect's two commits, as ``layout`` would write them."""
    _, steps, bodies = LAYOUTS[layout]
    intent = json.dumps({"args": json.loads(item.args_json), "args_hash": item.args_hash,
                         "key": item.key, "step_id": item.step_id, "tool": "send_email",
                         "type": "effect"})  # fmt: skip
    outcome = json.dumps({"result": json.loads(item.result_json), "state": "done"})
    db.execute("BEGIN IMMEDIATE")
    if steps:
        row = (run, seq, item.step_id, item.key, item.args_hash, item.args_json if bodies else None)
        db.execute(_INSERT_STEP, (*row, time.time()))
    _append(db, run, seq, "intent", intent, item.step_id, events=not steps)
    db.execute("COMMIT")
    db.execute("BEGIN IMMEDIATE")
    if steps:
        db.execute(_END_STEP, (item.result_json if bodies else None, time.time(), run, seq))
    _append(db, run, seq, "outcome", outcome, None, events=not steps)
    db.execute("COMMIT")


def floor_effect(db: sqlite3.Connection, item: EffectInput) -> None:
    db.execute("BEGIN IMMEDIATE")
    row = db.execute(
        "INSERT INTO effects (key, args, state) VALUES (?, ?, 'in_flight')",
        (item.key, item.args_json),
    ).lastrowid
    db.execute("COMMIT")
    db.execute("BEGIN IMMEDIATE")
    db.execute(
        "UPDATE effects SET state = 'done', result = ? WHERE id = ?", (item.result_json, row)
    )
    db.execute("COMMIT")


def pages(path: Path, layout: str | None, warm: int, runs: int, n: int) -> dict[str, float]:
    """WAL pages per effect by b-tree (``layout`` None: the floor), counted over ``n``
    effects of each of ``runs`` runs, after ``warm`` effects of two other runs."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = OFF")  # pages are counted, not timed
    db.executescript(FLOOR if layout is None else LAYOUTS[layout][0])

    def write(run: str, seq: int) -> None:
        item = EffectInput.make(run, seq)
        if layout is None:
            floor_effect(db, item)
        else:
            effect(db, layout, run, seq, item)

    # Two runs that sort before and after the counted ones, which land between them.
    for seq in range(warm // 2):
        write("a warm", seq)
        write("z warm", seq)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.execute("PRAGMA wal_autocheckpoint = 0")
    for seq in range(n):
        for r in range(runs):
            write(f"run {r}", seq)
    names = dict(db.execute("SELECT pageno, name FROM dbstat"))
    wal = Path(f"{path}-wal").read_bytes()  # before the close, which empties it
    db.close()
    frame = int.from_bytes(wal[8:12], "big") + 24
    counts = Counter(
        "page 1" if page == 1 else names.get(page, "freed")
        for page in (int.from_bytes(wal[at : at + 4], "big") for at in range(32, len(wal), frame))
    )
    return {name: count / (n * runs) for name, count in counts.most_common()}


SCENARIOS = (("a new ledger, one run", 0, 1, 400), ("a used ledger, 20 runs", 1000, 20, 20))


def render(rows: dict[str, list[dict[str, float]]]) -> str:
    scenarios = " | ".join(f"{name}: pages (x floor)" for name, *_ in SCENARIOS)
    lines = [f"| layout | {scenarios} | by b-tree, used ledger |", "|---|" + "---:|" * 2 + "---|"]
    floors = [sum(found.values()) for found in rows["floor"]]
    for layout, found in rows.items():
        totals = [sum(f.values()) for f in found]
        cells = " | ".join(
            f"{total:.2f} ({total / floor:.2f}x)"
            for total, floor in zip(totals, floors, strict=True)
        )
        parts = ", ".join(f"{name} {n:.2f}" for name, n in found[-1].items())
        lines.append(f"| {layout} | {cells} | {parts} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a tenth of the effects")
    parser.add_argument("--write", type=Path, help="update this benchmark's block of this file")
    parser.add_argument("--dir", type=Path, help="where the databases go (default /var/tmp)")
    args = parser.parse_args(argv)
    from overhead import bench_folder  # imports oncelog: the script's business only

    part = 10 if args.quick else 1
    rows: dict[str, list[dict[str, float]]] = {}
    with bench_folder(args.dir, keep=False, allow_tmpfs=True) as folder:
        for layout in ("floor", *LAYOUTS):
            for i, (_, warm, runs, n) in enumerate(SCENARIOS):
                path = folder / f"{len(rows)}-{i}.db"
                measured = None if layout == "floor" else layout
                found = pages(path, measured, warm // part, runs, n // part)
                rows.setdefault(layout, []).append(found)
            print(f"{layout}: {[round(sum(f.values()), 2) for f in rows[layout]]}", file=sys.stderr)
    block = (
        f"Generated by `python bench/record_layouts.py{' --quick' if args.quick else ''}` on "
        f"{time.strftime('%Y-%m-%d %H:%M %Z')}: WAL pages per effect (4096-byte pages).\n\n"
        + render(rows)
    )
    print(block)
    if args.write:
        write_block(args.write, "record_layouts", block, "Record layouts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
