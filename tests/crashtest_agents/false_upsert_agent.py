"""The mistake: ``open_ticket`` declared ``upsert``, though every call opens a new ticket.
oncelog calls an upsert in doubt again, so a kill after the call makes two tickets."""

import os

import oncelog

from .shop import main

if __name__ == "__main__":
    main(os.environ["ONCELOG_RUN_ID"], ticket_kind=oncelog.Kind.UPSERT)
