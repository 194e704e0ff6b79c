"""Every install line a person can copy works as written today.

oncelog is not on a package index, and whoever registers the name there would be installed
by anyone who typed ``pip install oncelog``. So every ``pip install`` in the README, the
docs, the examples, the benchmarks and oncelog's own messages installs it from a checkout
(``'.[extra]'``, editable or not) or from a wheel built there, names only extras that
pyproject.toml declares, and never names ``oncelog`` itself. One of them is run for real,
in a fresh virtualenv.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import venv
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT: dict[str, Any]
if sys.version_info >= (3, 11):
    import tomllib

    PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
else:
    pytest.skip("reads pyproject.toml with tomllib (Python 3.11)", allow_module_level=True)
EXTRAS = set(PYPROJECT["project"]["optional-dependencies"])
VERSION = PYPROJECT["project"]["version"]
WHEEL = f"dist/oncelog-{VERSION}-py3-none-any.whl"
WHERE = ("README.md", "docs", "examples", "bench", "src")
SUFFIXES = {".md", ".py", ".yaml", ".yml", ".toml", ".txt", ".html", ".j2"}
# What follows ``pip install``: its options and requirements, up to the first word of prose,
# a shell operator, a comment, the end of a code span or of the line (a docstring may break
# the line before the first one).
ITEM = r"(-e|--no-deps|--editable|'[^'\s]+'|\"[^\"\s]+\"|[\w.\-/]+(?:\[[^\]\s]*\])?)"
FIRST = re.compile(r"(?:[ \t]+|[ \t]*\n[ \t]*)" + ITEM)
NEXT = re.compile(r"[ \t]+" + ITEM)
PROSE = {"in", "or", "and", "to", "from", "through", "with", "then", "on"}
SPEC = re.compile(r"(?P<base>[^\[]+)(?:\[(?P<extras>[^\]]*)\])?(?P<pin>[<>=!~].*)?")


def sources() -> list[Path]:
    found = []
    for where in WHERE:
        path = ROOT / where
        found += [path] if path.is_file() else sorted(path.rglob("*"))
    return [p for p in found if p.is_file() and p.suffix in SUFFIXES]


def install_lines(text: str) -> list[list[str]]:
    """Each ``pip install`` in ``text``, as the options and requirements it names."""
    lines = []
    for found in re.finditer(r"pip install", text):
        tokens, token = [], FIRST.match(text, found.end())
        while token is not None and token[1] not in PROSE:
            tokens.append(token[1])
            token = NEXT.match(text, token.end())
        if tokens:  # prose ("from `pip install` to ...") names nothing
            lines.append(tokens)
    return lines


def problems_of(tokens: list[str]) -> list[str]:
    """Why this install line would not install this oncelog as written; none if it does."""
    problems = []
    for token in tokens:
        if token.startswith("-"):
            continue
        spec = SPEC.fullmatch(token.strip("'\""))
        assert spec is not None, token
        base, extras = spec["base"], spec["extras"]
        if re.sub(r"[-_.]+", "-", base.lower()) == "oncelog":
            problems.append(f"{token} installs whatever the index holds under the name")
        if base == "." or base.endswith(".whl"):
            if base.endswith(".whl") and base != WHEEL:
                problems.append(f"{token}: the wheel built from this checkout is {WHEEL}")
            named = [] if not extras or "{" in extras else extras.split(",")
            problems += [
                f"{token}: no extra {e!r} in pyproject.toml" for e in named if e not in EXTRAS
            ]
    return problems


def test_every_install_line_installs_this_checkout() -> None:
    checked, wrong = 0, []
    for path in sources():
        for tokens in install_lines(path.read_text(encoding="utf-8", errors="replace")):
            checked += 1
            where = path.relative_to(ROOT)
            wrong += [f"{where}: pip install {' '.join(tokens)}: {p}" for p in problems_of(tokens)]
    assert checked > 40
    assert wrong == []


def test_the_checker_refuses_what_the_index_would_answer() -> None:
    [line] = install_lines("run `pip install 'oncelog[celery]'` first")
    assert problems_of(line) == [
        "'oncelog[celery]' installs whatever the index holds under the name"
    ]
    [line] = install_lines("needs pika: pip install '.[rabit]' in oncelog's checkout")
    assert problems_of(line) == ["'.[rabit]': no extra 'rabit' in pyproject.toml"]
    [line] = install_lines(".venv/bin/pip install -e '.[dev]' && .venv/bin/python -m pytest")
    assert line == ["-e", "'.[dev]'"]
    assert problems_of(line) == []
    assert install_lines("from `pip install` to an agent proven safe") == []


def test_the_readme_install_runs_in_a_fresh_virtualenv(tmp_path: Path) -> None:
    """``pip install '.[EXTRAS]'`` from the checkout, as the README's first line, with every
    extra named (without their dependencies, which the index serves under their own names):
    pip knows each extra, and the installed command runs."""
    env = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env)
    every = ",".join(sorted(EXTRAS))
    installed = subprocess.run(
        [str(env / "bin" / "pip"), "install", "--no-deps", "--disable-pip-version-check",
         f".[{every}]"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PIP_NO_INPUT": "1"},
    )  # fmt: skip
    output = installed.stdout + installed.stderr
    unreachable = installed.returncode != 0 and re.search(
        r"hatchling|No matching distribution|Could not find a version|connection", output, re.I
    )
    require(not unreachable, f"pip could not fetch the build backend (hatchling):\n{output[-800:]}")
    assert installed.returncode == 0, output
    assert "does not provide the extra" not in output
    ran = subprocess.run(
        [str(env / "bin" / "oncelog"), "--help"], capture_output=True, text=True, timeout=120,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )  # fmt: skip
    # click is a dependency --no-deps left out: the command starts, then says it is missing.
    assert "oncelog" in ran.stdout + ran.stderr
    shown = subprocess.run(
        [str(env / "bin" / "python"), "-c", "import oncelog, sys; print(oncelog.__file__)"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip().startswith(str(env)), shown.stdout
