"""``python -m tests.simulation --seed N --schedules M`` (or ``--budget SECONDS``): explore
from seed N on, print each failure's shrunk reproduction as a test, and the rate."""

from __future__ import annotations

import argparse
import sys

from .explore import explore
from .known import KNOWN


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.simulation", description=__doc__)
    parser.add_argument("--seed", type=int, default=0, help="the first seed (default 0)")
    parser.add_argument("--schedules", type=int, default=200, help="how many seeds")
    parser.add_argument("--budget", type=float, help="stop after this many seconds instead")
    parser.add_argument("--shrink-known", action="store_true",
                        help="shrink and print the known bugs' failures too")  # fmt: skip
    parser.add_argument("--max-shrinks", type=int, default=3)
    args = parser.parse_args(argv)
    count = 10**9 if args.budget is not None else args.schedules
    report = explore(
        range(args.seed, args.seed + count), KNOWN, budget=args.budget,
        shrink_known=args.shrink_known, max_shrinks=args.max_shrinks,
    )  # fmt: skip
    for failure in report.failures:
        line = "; ".join(f"{f.family}: {f.text}" for f in failure.findings)
        print(f"seed {failure.seed} ({'NOT KNOWN' if failure.unexplained else 'known'}): {line}")
        if failure.reproduction:
            print(failure.reproduction)
    print(report.summary())
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
