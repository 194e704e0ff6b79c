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
FLOORS: tuple[tuple[str, str], ...] = (
    ("surfaces", "cli console integrations queues probes showcases __main__"),
    (
        "public face",
        "__init__ testing _fake_provider display metrics tracing sinks notices _worker"
        " providers markers",
    ),
    ("facade", "_ledger _person_decisions _person_results _schema _next"),
    ("runtime", "runtime failures"),
    ("machinery", "controls process observe"),
    ("audit", "audit"),
    ("stores", "stores"),
    ("records", "records _numbers"),
    (
        "leaves",
        "signals _exceptions _exit_codes _commands _log _webhook _secret_file _lazy _extras",
    ),
)
PARTS = [frozenset(parts.split()) for _, parts in FLOORS]
SURFACES = PARTS[0]
# What a surface may import besides its own folder: the public face and the public
# modules of other surfaces (the CLI serves the console, runs the showcases' demo).
PUBLIC = PARTS[1] | SURFACES | {"failures"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _floor(module: str) -> int:
    part = _part(module)
    for index, parts in enumerate(PARTS):
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


def test_imports_inside_functions_and_for_type_checking_are_read() -> None:
    # ``Ledger.verify`` imports the verifier when called, and the face names its lazy
    # imports under ``TYPE_CHECKING`` only: both bind a floor as one at the top does.
    assert "oncelog.audit._verify" in {target for target, _ in _imports("oncelog._ledger")}
    assert "oncelog._ledger" in {target for target, _ in _imports("oncelog")}


def test_no_two_parts_import_each_other() -> None:
    # Imports within one floor may go either way between its parts, but never both ways:
    # a loop of folders is a floor drawn wrong even when no file imports itself back.
    uses: dict[str, set[str]] = {}
    for module in MODULES:
        for target, _ in _imports(module):
            if _part(target) != _part(module):
                uses.setdefault(_part(module), set()).add(_part(target))

    def reached(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for part in uses.get(todo.pop(), ()):
                if part not in seen:
                    seen.add(part)
                    todo.append(part)
        return seen

    assert [part for part in uses if part in reached(part)] == []
