"""``oncelog completion SHELL``: the script that completes commands, options and choices."""

from __future__ import annotations

import click
from click.shell_completion import get_completion_class


@click.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the completion script for SHELL: eval "$(oncelog completion bash)"."""
    root = click.get_current_context().find_root()
    complete = get_completion_class(shell)
    assert complete is not None  # the choices are the shells click knows
    click.echo(complete(root.command, {}, "oncelog", "_ONCELOG_COMPLETE").source())
