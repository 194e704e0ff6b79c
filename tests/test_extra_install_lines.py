"""A missing extra's message says how to install it into the oncelog that runs: from its
checkout when it runs from one, a line that works as printed; from the wheel it was
installed from otherwise, never "in oncelog's checkout", which a wheel installed
elsewhere does not have. The checkout's line is run for real with pip (no index)."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

from oncelog._extras import install_line

ROOT = Path(__file__).resolve().parent.parent


def test_from_a_checkout_the_line_names_the_checkout_and_pip_reads_it() -> None:
    line = install_line("otel", ROOT / "src" / "oncelog")
    assert line.startswith(f"pip install {shlex.quote(str(ROOT) + '[otel]')}"), line
    words = shlex.split(line.partition(" (")[0])
    dry = subprocess.run(
        [sys.executable, "-m", *words[:2], "--dry-run", "--no-deps", "--no-index",
         "--no-build-isolation", "--quiet", *words[2:]],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert "does not provide the extra" not in dry.stdout + dry.stderr
    assert "not a valid editable requirement" not in dry.stderr
    assert "Invalid requirement" not in dry.stderr, dry.stderr


def test_installed_from_a_wheel_the_line_names_the_wheel_not_a_checkout(tmp_path: Path) -> None:
    package = tmp_path / "lib" / "python3.11" / "site-packages" / "oncelog"
    package.mkdir(parents=True)
    line = install_line("otel", package)
    assert line.startswith("pip install 'WHEEL[otel]', WHEEL the path of the oncelog wheel")
    assert str(tmp_path) not in line
