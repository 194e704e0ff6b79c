"""The mistake: ``open_ticket`` declares a ``dedupe_window``, though its provider ignores
idempotency keys. A ticket in doubt is sent again with the same key, on the window's word,
and the provider opens a second one; the ledger shows one attempt allowed by the window."""

import os

from .shop import main

if __name__ == "__main__":
    main(os.environ["ONCELOG_RUN_ID"], ticket_window=3600.0)
