"""Folders are floors: a module imports only from its own floor or below, and a surface
uses public names only. Read from the source with ``ast``, so an import inside a function
or under ``TYPE_CHECKING`` counts as much as one at the top (docs/architecture.md, "The
parts", states the same order)."""

from __future__ import annotations

import ast
from pathlib import Path

import oncelog

PACKAGE = Path(oncelog.__file__).parent

# Top to bottom. A part is a folder or a module at the package's top, named by its first
# component under ``oncelog``; ``__init__`` is the package's own module (the public face).
FLOORS: tuple[tuple[str, frozenset[str]], ...] = (
    (
        "surfaces",
        frozenset({"__main__", "cli", "console", "integrations", "queues", "probes", "showcases"}),
    ),
    (
        "public face",
        frozenset({"__init__", "testing", "display", "metrics", "tracing", "sinks", "_worker"}),
    ),
    (
        "facade",
        frozenset({"_ledger", "_person_decisions", "_person_results", "_schema", "_next"}),
    ),
    ("runtime", frozenset({"runtime", "failures", "_fake_provider"})),
    ("machinery", frozenset({"controls", "process", "observe"})),
    ("audit", frozenset({"audit"})),
    ("stores", frozenset({"stores"})),
    ("records", frozenset({"records", "_numbers"})),
    (
        "leaves",
        frozenset({"signals", "_exceptions", "_exit_codes", "_commands", "_log", "_webhook"}),
    ),
)
SURFACES = FLOORS[0][1]
# What a surface may import besides its own folder: the public face and the public
# modules of other surfaces (the CLI serves the console, runs the showcases' demo).
PUBLIC = FLOORS[1][1] | SURFACES | {"failures"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _floor(module: str) -> int:
    part = _part(module)
    for index, (_, parts) in enumerate(FLOORS):
        if part in parts:
            return index
    raise AssertionError(f"{module} is on no floor: name its part in FLOORS")


def _imports(module: str) -> list[tuple[str, int]]:
    """Every oncelog module ``module`` imports, with the line: ``from a import b`` names
    the submodule ``a.b`` when there is one, else ``a``."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                found.append((submodule if submodule in MODULES else target, node.lineno))
    return [(name, line) for name, line in found if name.split(".")[0] == "oncelog"]


def _where(module: str, line: int) -> str:
    return f"{MODULES[module].relative_to(PACKAGE.parent)}:{line}"


def test_every_part_is_on_a_floor() -> None:
    for module in MODULES:
        _floor(module)


def test_imports_only_point_down() -> None:
    upward = [
        f"{_where(module, line)}: {module} ({FLOORS[_floor(module)][0]}) imports {target} "
        f"({FLOORS[_floor(target)][0]})"
        for module in MODULES
        for target, line in _imports(module)
        if _floor(target) < _floor(module)
    ]
    assert not upward, "\n".join(upward)


def _private(target: str, own_part: str) -> bool:
    part = _part(target)
    if part == own_part:
        return False
    return part not in PUBLIC or any(name.startswith("_") for name in target.split(".")[1:])


def test_surfaces_use_public_names_only() -> None:
    reaching = [
        f"{_where(module, line)}: {module} imports {target}"
        for module in MODULES
        if _part(module) in SURFACES
        for target, line in _imports(module)
        if _private(target, _part(module))
    ]
    assert not reaching, "\n".join(reaching)
