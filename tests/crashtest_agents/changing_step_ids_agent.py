"""The mistake: step ids that change between attempts (here a timestamp), so the step a
restarted process asks for is never the one the killed process left unfinished."""

import os
import time

from .shop import main

if __name__ == "__main__":
    main(os.environ["ONCELOG_RUN_ID"], name=lambda step: f"{step}-{time.time_ns()}", plan=None)
