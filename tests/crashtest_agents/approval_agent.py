"""The shop's agent done right, whose charge waits for a person's approval: it exits 4
until one is granted."""

import os

from .shop import main

if __name__ == "__main__":
    main(os.environ["ONCELOG_RUN_ID"], charge_approval=True)
