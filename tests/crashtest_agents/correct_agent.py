"""The shop's agent done right: the run id comes from outside the process
(``$ONCELOG_RUN_ID``), and the step ids from its stored plan."""

import os

from .shop import main

if __name__ == "__main__":
    main(os.environ["ONCELOG_RUN_ID"])
