"""The public surface is deliberate: adding or removing a name is a visible change."""

from __future__ import annotations

import pickle
import types
import typing
from importlib import metadata

import oncelog
from oncelog._exit_codes import EXIT_CODES


def _public() -> list[object]:
    return [getattr(oncelog, name) for name in oncelog.__all__]


def test_every_public_name_is_exported_and_nothing_else() -> None:
    # Computed from the module, as httpx's tests/test_exported_members.py does: a name
    # the module offers without an underscore is public, so it must be in ``__all__``
    # (and ruff's RUF022 keeps that sorted); submodules are reached by import. ``dir``,
    # not ``vars``: most names are imported when first asked for (PEP 562).
    public = {
        name
        for name in dir(oncelog)
        if not name.startswith("_") and not isinstance(getattr(oncelog, name), types.ModuleType)
    }
    assert set(oncelog.__all__) == public
    assert len(oncelog.__all__) == len(public)
    for name in oncelog.__all__:
        value = getattr(oncelog, name)
        # Constants (``DEFAULT_PATH``) and type aliases (``ProbeAnswer``, ``Probe``, ``KindName``).
        exempt = isinstance(value, (int, str)) or typing.get_origin(value) is not None
        assert exempt or value.__module__.startswith("oncelog"), name


def test_the_version_is_the_installed_package_s() -> None:
    assert oncelog.__version__ == metadata.version("oncelog")


def test_every_error_has_one_base_and_pickles() -> None:
    errors = [v for v in _public() if isinstance(v, type) and issubclass(v, Exception)]
    assert len(errors) > 20
    for cls in errors:
        assert issubclass(cls, oncelog.OnceLogError)
        exc = cls("message", run_id="r", step_id="s", key="k")
        copy = pickle.loads(pickle.dumps(exc))
        assert type(copy) is cls
        assert (copy.run_id, copy.step_id, copy.key, str(copy)) == ("r", "s", "k", str(exc))


def test_exit_codes_follow_the_design() -> None:
    assert oncelog.NeedsPerson.exit_code == oncelog.EXIT_HALTED == 3
    assert oncelog.TryLater.exit_code == oncelog.EXIT_TRY_LATER == 75
    assert oncelog.ApprovalRequired.exit_code == oncelog.EXIT_WAITING == 4
    assert oncelog.UsageError.exit_code == 2
    assert oncelog.UnknownName.exit_code == 5
    assert oncelog.ConflictError.exit_code == 6


def test_every_error_exits_with_a_code_of_the_table() -> None:
    errors = [v for v in _public() if isinstance(v, type)
              and issubclass(v, oncelog.OnceLogError)]  # fmt: skip
    assert {cls.exit_code for cls in errors} <= set(EXIT_CODES)


def test_not_found_and_conflicts_are_not_usage_errors() -> None:
    for cls in (oncelog.UnknownRun, oncelog.UnknownStep, oncelog.UnknownApproval,
                oncelog.UnknownHalt, oncelog.InputMismatch, oncelog.InvalidResolution,
                oncelog.AlreadyResolved):  # fmt: skip
        assert not issubclass(cls, oncelog.UsageError), cls


def test_a_message_has_no_repr_tail_and_keeps_its_fields() -> None:
    exc = oncelog.AmbiguousOutcome("it may have happened", run_id="r", step_id="s", key="k")
    assert str(exc) == "it may have happened"
    assert exc.fields() == {"run_id": "r", "step_id": "s", "key": "k"}
