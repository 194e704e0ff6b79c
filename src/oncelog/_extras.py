"""How to install one of oncelog's extras into the oncelog that runs. oncelog is on no
package index (whoever registered the name there would be installed instead), so the line
names where this oncelog came from: its checkout, when it runs from one (``src/oncelog``
under a ``pyproject.toml``: an editable install), else the wheel it was installed from,
which a process cannot know once installed, named for the person to fill in."""

from __future__ import annotations

import shlex
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def install_line(extra: str, package: Path = _PACKAGE) -> str:
    """The ``pip install`` that adds ``extra`` to the oncelog whose package is ``package``."""
    checkout = package.parent.parent
    if package.parent.name == "src" and (checkout / "pyproject.toml").is_file():
        return f"pip install {shlex.quote(f'{checkout}[{extra}]')} (oncelog's checkout)"
    return (
        f"pip install 'WHEEL[{extra}]', WHEEL the path of the oncelog wheel this one was "
        f"installed from (oncelog is on no package index), or '.[{extra}]' in its checkout"
    )
