"""The mistake: a run id made at process start. A restarted process opens a new run
instead of resuming the one the killed process left unfinished."""

import uuid

from .shop import main

if __name__ == "__main__":
    main(f"ticket-{uuid.uuid4().hex}")
