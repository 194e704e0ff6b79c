"""Docs kept honest mechanically: every command documented, the README example runs, every
Python block in ``docs/`` runs or says why it cannot."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

from oncelog._exit_codes import EXIT_CODES
from oncelog.cli import cli

from .support.launch import python

ROOT = Path(__file__).resolve().parent.parent
# Put on the line before a block that uses names defined elsewhere (an open ``ledger``, a
# tool such as ``charge``, a provider's error): it runs after ``support/docs_setup.py``,
# which stands them in.
AFTER_SETUP = "<!-- runs after the docs' setup -->"
SETUP = (ROOT / "tests" / "support" / "docs_setup.py").read_text()
# Put on the line before a block that cannot run, saying why (it needs a service, a path
# of a real deployment, or a run in a state the page does not make): it is only compiled.
FRAGMENT = re.compile(r"<!-- fragment: (\S.*) -->")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


class Block(NamedTuple):
    where: str  # path:line
    code: str
    marker: str  # the line before it


def python_blocks() -> list[Block]:
    """Every Python block under ``docs/``, with where it is and the line before it."""
    found = []
    for path in sorted((ROOT / "docs").rglob("*.md")):
        lines = path.read_text().splitlines()
        for number, line in enumerate(lines):
            if line.strip() != "```python":
                continue
            end = lines.index("```", number + 1)
            where = f"{path.relative_to(ROOT)}:{number + 1}"
            marker = lines[number - 1].strip() if number > 0 else ""
            found.append(Block(where, "\n".join(lines[number + 1 : end]) + "\n", marker))
    return found


def missing_modules(code: str) -> list[str]:
    """The top-level modules ``code`` imports that are not installed (an extra's)."""
    imported = re.findall(r"^(?:from|import) (\w+)", code, re.M)
    return [name for name in imported if importlib.util.find_spec(name) is None]


def test_every_cli_command_is_documented() -> None:
    documented = set(re.findall(r"^## oncelog (\S+)", (ROOT / "docs/cli.md").read_text(), re.M))
    assert documented == set(cli.commands)


def test_the_exit_code_table_is_the_one_the_code_uses() -> None:
    section = (ROOT / "docs/cli.md").read_text().split("## Exit codes", 1)[1].split("\n## ")[0]
    rows = dict(re.findall(r"^\| `(\d+)` \| (.+?) \|$", section, re.M))
    assert {int(code): meaning for code, meaning in rows.items()} == EXIT_CODES


def test_readme_begins_with_the_two_setup_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```sh\n(.*?)```", readme, re.S)
    assert block is not None
    assert readme.index(block.group(0)) < readme.index("## ")
    demo, tests = block.group(1).strip().splitlines()
    assert demo.endswith("oncelog demo")
    assert "pytest" in tests


def test_readme_example_runs_and_replays(tmp_path: Path) -> None:
    example = re.search(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert example is not None
    script = tmp_path / "example.py"
    email = "ledger.steps(run.run_id)[1]"
    script.write_text(f"{example.group(1)}\nprint({email}.state.value, {email}.attempts)\n")
    for _ in range(2):  # the second run replays: still one attempt
        done = subprocess.run(
            python(str(script)),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        assert done.stdout.strip() == "done 1"
    assert (tmp_path / ".oncelog" / "ledger.db").exists()


def test_every_python_block_in_the_docs_runs_or_says_why_not(tmp_path: Path) -> None:
    blocks = python_blocks()
    assert len(blocks) > 20
    programs = 0
    for number, (where, code, marker) in enumerate(blocks):
        compile(code, where, "exec")  # a fragment too must be Python
        if FRAGMENT.fullmatch(marker):
            continue
        assert not marker.startswith("<!-- fragment"), f"{where}: say why it cannot run"
        missing = missing_modules(code)
        if missing and not IN_CI:
            continue  # an extra's example, run where the extra is installed
        programs += 1
        folder = tmp_path / str(number)
        folder.mkdir()
        program = f"{SETUP}\n{code}" if marker == AFTER_SETUP else code
        env = {**os.environ, "ONCELOG_URL": str(folder / "ledger.db")}
        done = subprocess.run(
            python("-c", program, f"doc-{number}"),  # an argument for a main guard
            cwd=folder, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, f"{where}: {done.stderr}"
    assert programs >= 3


def test_the_docs_link_only_inside_the_repository() -> None:
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for target in re.findall(r"\]\(([^)#\s]+)", page.read_text()):
            if re.match(r"[a-z]+:", target):
                continue  # a web address
            linked = (page.parent / target).resolve()
            assert linked.is_relative_to(ROOT), f"{page.name} links outside: {target}"
            assert linked.exists(), f"{page.name} links to nothing: {target}"


def test_the_architecture_names_tests_that_exist() -> None:
    text = (ROOT / "docs/architecture.md").read_text()
    named = set(re.findall(r"`(test_\w+\.py)(?:::(\w+))?`", text))
    assert len(named) > 10
    for module, test in named:
        source = (ROOT / "tests" / module).read_text()
        assert not test or f"def {test}(" in source, f"{module}::{test}"


def tutorial_blocks() -> list[tuple[bool, str]]:
    """The tutorial's Python blocks, each with whether it is marked as a fragment."""
    text = (ROOT / "docs/tutorial.md").read_text()
    return [
        (bool(marked), code)
        for marked, code in re.findall(r"(<!-- fragment[^>]*-->\n)?```python\n(.*?)```", text, re.S)
    ]


def run_agent(folder: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "refund_agent.py", *args], cwd=folder, capture_output=True, text=True,
        timeout=60, check=False, env={**os.environ, **env},
    )  # fmt: skip


def test_the_tutorial_agent_does_what_the_tutorial_says(tmp_path: Path) -> None:
    [(marked, agent), *fragments] = tutorial_blocks()
    assert not marked
    assert all(marked for marked, _ in fragments), "mark a block that does not run alone"
    (tmp_path / "refund_agent.py").write_text(agent)
    for _ in range(2):  # section 3: the second run replays
        assert run_agent(tmp_path, "ticket-4711").returncode == 0
    assert len((tmp_path / "outbox/refunds.jsonl").read_text().splitlines()) == 1
    killed = run_agent(tmp_path, "ticket-4712", ONCELOG_CRASH_AT="after_call@email")
    assert killed.returncode == -9  # section 4
    assert run_agent(tmp_path, "ticket-4712").returncode == 3
    key = json.loads((tmp_path / "outbox/emails.jsonl").read_text().splitlines()[-1])["key"]
    resolved = subprocess.run(
        [sys.executable, "-m", "oncelog", "resolve", "ticket-4712", "email", "done", "--by",
         "you", "--result", json.dumps({"id": f"emails_{key[-8:]}"})],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert resolved.returncode == 0, resolved.stderr
    assert run_agent(tmp_path, "ticket-4712").returncode == 0


def test_the_tutorial_fragments_fit_their_agent(tmp_path: Path) -> None:
    [(_, agent), (_, probe), (_, deduplicated), (_, subject), *_] = tutorial_blocks()
    refund = re.search(r"@oncelog.tool\(kind=\"payment\"\)\ndef refund.*?\n\n\n", agent, re.S)
    assert refund is not None
    find_refund = probe[: probe.index("@oncelog.tool")]
    for replacement in (probe, find_refund + deduplicated):
        (tmp_path / "refund_agent.py").write_text(
            agent.replace(refund.group(0), replacement + "\n\n")
        )
        done = run_agent(tmp_path, f"ticket-{len(replacement)}")
        assert done.returncode == 0, done.stderr
    (tmp_path / "refund_agent.py").write_text(agent.replace(refund.group(0), subject + "\n\n"))
    (tmp_path / "outbox" / "refunds.jsonl").unlink()
    for ticket in ("ticket-1", "ticket-2"):  # once per refund, whichever run asks
        assert run_agent(tmp_path, ticket).returncode == 0
    assert len((tmp_path / "outbox/refunds.jsonl").read_text().splitlines()) == 1


def test_the_tutorial_changing_step_ids_are_caught_as_it_says(tmp_path: Path) -> None:
    [(_, agent), *_] = tutorial_blocks()
    changing = agent.replace(', plan=["decide", "refund", "email"]', "").replace(
        'run.effect("email",', 'run.effect(f"email-{time.time_ns()}",'
    )
    (tmp_path / "refund_agent.py").write_text("import time\n" + changing)
    crashtest = subprocess.run(
        [sys.executable, "-m", "oncelog", "crashtest", "--point", "after_call", "--json",
         "--reset", "rm -rf outbox", "--", sys.executable, "refund_agent.py", "{run_id}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert crashtest.returncode == 1, crashtest.stdout + crashtest.stderr
    kinds = {p["kind"] for t in json.loads(crashtest.stdout)["trials"] for p in t["problems"]}
    assert kinds == {"step_ids_change"}
