"""A run's sticky stop: the first step of a run that needed a person. Once one is raised,
every later position of the run raises it again, whatever the agent's code caught, and
the run cannot end ``completed``. It is recorded on the run's row (``stores/_sql_stops``)
in the transaction that records the stop, so the next process of the run holds it too: it
replays the steps before the stop, decides the stopped step afresh (a person may have
decided, the code been fixed, the probe found it), and refuses any other step at or after
it. A kill switch is not recorded here: its own row stops every step it covers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from .._exceptions import (
    AmbiguousOutcome,
    ArgumentDrift,
    BudgetExceeded,
    NeedsPerson,
    PreflightConflict,
    ReplayDivergence,
    RunHalted,
)

_STOPS = (
    AmbiguousOutcome, ArgumentDrift, BudgetExceeded, PreflightConflict, ReplayDivergence,
    RunHalted,
)  # fmt: skip
_KINDS: dict[str, type[NeedsPerson]] = {kind.__name__: kind for kind in _STOPS}


@dataclass(frozen=True)
class Stop:
    """The stop raised at position ``seq`` of the run."""

    seq: int
    kind: str  # the name of the ``NeedsPerson`` raised
    step_id: str | None
    key: str | None
    message: str

    @classmethod
    def of(cls, seq: int, error: NeedsPerson) -> Stop:
        kind = next((k.__name__ for k in type(error).__mro__ if k.__name__ in _KINDS), "")
        return cls(seq, kind or RunHalted.__name__, error.step_id, error.key, error.message)

    @classmethod
    def from_row(cls, seq: int, stop_json: str) -> Stop:
        data = json.loads(stop_json)
        return cls(seq, data["kind"], data["step_id"], data["key"], data["message"])

    @property
    def durable(self) -> bool:
        """Whether the run's row records it: a kill switch's own row is its record."""
        return self.kind != RunHalted.__name__

    def to_json(self) -> str:
        """Canonical JSON, which the journal splices into its entry as it is."""
        fields = {"kind": self.kind, "step_id": self.step_id, "key": self.key}
        return json.dumps(
            {**fields, "message": self.message},
            sort_keys=True, separators=(",", ":"), ensure_ascii=False,
        )  # fmt: skip

    def error(self, run_id: str) -> NeedsPerson:
        """The stop, raised again."""
        return _KINDS[self.kind](self.message, run_id=run_id, step_id=self.step_id, key=self.key)

    def refusal(self, run_id: str, asked: str) -> NeedsPerson:
        """The stop, raised at ``asked``, a step the code asked for after it."""
        return _KINDS[self.kind](
            f"{asked!r} was not started: step {self.step_id!r} of this run needs a person "
            f"first, and a later step of a stopped run never starts, even where the code "
            f"caught the stop ({self.message})",
            run_id=run_id, step_id=self.step_id, key=self.key,
        )  # fmt: skip
