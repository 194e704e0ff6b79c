"""``python -m oncelog``: the same as the ``oncelog`` command."""

from .cli import main

main()
