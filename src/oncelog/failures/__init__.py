"""What a failed call means: certainly not performed, refused, still in progress at the
provider, the key already taken by another request, or in doubt.

A tool declares ``failures=``: a function from the exception its call raised to a
``Failure`` (or None: it does not know, and the call is in doubt). oncelog retries what
was certainly not performed under the tool's ``retry`` policy, records refusals as failed,
and treats everything else as in doubt. Classifications for common clients ship here,
each in its own module that imports nothing until an exception is classified::

    from oncelog.failures import httpx, first

    @ledger.tool(kind="payment", failures=httpx.classify, retry=oncelog.Retry(attempts=5))

They are rules about where in a request an error can arise, written down, not magic:
read the module's docstring before trusting one with money.
"""

from __future__ import annotations

import enum
from collections.abc import Callable


class Failure(enum.Enum):
    NOT_PERFORMED = "not_performed"  # certainly not performed; sending again may succeed
    REFUSED = "refused"  # certainly not performed; sending again is refused the same way
    IN_PROGRESS = "in_progress"  # the provider still processes an earlier send of the key
    IN_DOUBT = "in_doubt"  # it may have been performed
    # The provider holds the key for a request with other parameters: sending this one
    # again is refused the same way, and whether the first was ours a person decides.
    KEY_MISMATCH = "key_mismatch"


Classifier = Callable[[BaseException], "Failure | None"]


def first(*classifiers: Classifier) -> Classifier:
    """One classifier from several: the first answer that is not None."""

    def classify(exc: BaseException) -> Failure | None:
        for classifier in classifiers:
            found = classifier(exc)
            if found is not None:
                return found
        return None

    return classify


def by_status(status: int) -> Failure:
    """An HTTP answer's status, for a request whose answer arrived: 429 (rate limited,
    not processed) is worth sending again later; 408 and 5xx may have been performed;
    409 is a conflict (another request with the key may still run: in doubt); other 4xx
    are refusals the same request would get again."""
    if status == 429:
        return Failure.NOT_PERFORMED
    if status in (408, 409) or status >= 500:
        return Failure.IN_DOUBT
    if 400 <= status < 500:
        return Failure.REFUSED
    return Failure.IN_DOUBT


__all__ = ["Classifier", "Failure", "by_status", "first"]
