"""Docs kept honest mechanically: every command documented, the README example runs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from oncelog.cli import cli

ROOT = Path(__file__).resolve().parent.parent


def test_every_cli_command_is_documented() -> None:
    documented = set(re.findall(r"^## oncelog (\S+)", (ROOT / "docs/cli.md").read_text(), re.M))
    assert documented == set(cli.commands)


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
            [sys.executable, str(script)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        assert done.stdout.strip() == "done 1"
    assert (tmp_path / ".oncelog" / "ledger.db").exists()
