"""A probe the gateway's config declares as an upstream tool: what its answer means.

The probe tool is called with the call's idempotency key (the one the upstream got in
``_meta["io.oncelog/idempotency-key"]``) and answers with ``structuredContent``:

- ``{"found": true, ...}``: the effect happened; the probe's whole result becomes the
  call's recorded result, what the client gets;
- ``{"found": false}``: it did not, and never will under that key (the upstream must be
  able to say so: a search it cannot trust answers neither), so the call is made again;
- anything else, an error result, or a probe that cannot be reached: oncelog cannot tell,
  and the call waits for a person, as without a probe.

Nothing here imports MCP: the result comes as the JSON the upstream sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from oncelog import CANNOT_TELL, NOT_FOUND, Found, ProbeAnswer


def probe_answer(result: Mapping[str, Any]) -> ProbeAnswer:
    """What an upstream probe tool's result says of the effect it was asked about."""
    structured = result.get("structuredContent")
    found = structured.get("found") if isinstance(structured, Mapping) else None
    if result.get("isError") or not isinstance(found, bool):
        return CANNOT_TELL
    return Found(dict(result)) if found else NOT_FOUND
