"""A benchmark's generated block in a Markdown file: replaced in place between its two
markers, everything around it kept; appended under a heading of its own the first time."""

from __future__ import annotations

from pathlib import Path


def write_block(path: Path, name: str, block: str, heading: str) -> None:
    begin, end = f"<!-- bench:{name}:start -->", f"<!-- bench:{name}:end -->"
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    generated = f"{begin}\n{block}{end}"
    if begin in text and end in text:
        head, _, rest = text.partition(begin)
        text = head + generated + rest.partition(end)[2]
    else:
        text = text.rstrip("\n") + f"\n\n## {heading}\n\n" + generated + "\n"
    path.write_text(text)
