"""How to install one of oncelog's extras into the oncelog that runs. oncelog is on no
package index (whoever registered the name there would be installed instead), so the line
names where this oncelog came from: its checkout, when it runs from one (``src/oncelog``
under a ``pyproject.toml``: an editable install), else the wheel it was installed from,
which a process cannot know once installed, named for the person to fill in."""

from __future__ import annotations

import os
import shlex

# os.path, not pathlib: every open imports this module (``stores``), and pathlib would
# bring urllib and ipaddress into an agent's run (tests/test_import_cost.py).
_PACKAGE = os.path.dirname(os.path.realpath(__file__))


def install_line(extra: str, package: str | os.PathLike[str] = _PACKAGE) -> str:
    """The ``pip install`` that adds ``extra`` to the oncelog whose package is ``package``."""
    src = os.path.dirname(os.fspath(package))
    checkout = os.path.dirname(src)
    if os.path.basename(src) == "src" and os.path.isfile(os.path.join(checkout, "pyproject.toml")):
        return f"pip install {shlex.quote(f'{checkout}[{extra}]')} (oncelog's checkout)"
    return (
        f"pip install 'WHEEL[{extra}]', WHEEL the path of the oncelog wheel this one was "
        f"installed from (oncelog is on no package index), or '.[{extra}]' in its checkout"
    )
