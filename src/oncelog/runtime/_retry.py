"""Retry policies: how often, and how far apart, an attempt that was certainly not
performed (or, with a provider that deduplicates, one in doubt) is made again."""

from __future__ import annotations

from dataclasses import dataclass

from .. import _numbers as numbers
from .._exceptions import ConfigurationError


@dataclass(frozen=True)
class Retry:
    """``attempts`` in all, the first included; the wait before attempt n+1 is
    ``min(cap, backoff * multiplier ** (n - 1))``, of which a random fraction up to
    ``jitter`` is taken off, so that many runs failing together do not retry together.
    The attempts made and the time of the next one are recorded in the ledger with each
    outcome, so a crash loop neither resets nor hastens them."""

    attempts: int = 3
    backoff: float = 1.0  # seconds before the second attempt
    multiplier: float = 2.0
    cap: float = 60.0  # the longest wait, in seconds
    jitter: float = 0.5  # 0: exact waits; 1: anywhere from 0 to the full wait

    def __post_init__(self) -> None:
        numbers.count(self.attempts, "Retry(attempts=...)")
        for name in ("backoff", "multiplier", "cap", "jitter"):
            numbers.amount(getattr(self, name), f"Retry({name}=...)")
        if self.attempts < 1:
            raise ConfigurationError(f"Retry(attempts=...) must be at least 1, not {self.attempts}")
        if self.backoff < 0 or self.cap < 0 or self.multiplier < 1:
            raise ConfigurationError(
                "Retry needs backoff >= 0, cap >= 0 and multiplier >= 1, not "
                f"{self.backoff}, {self.cap}, {self.multiplier}"
            )
        if not 0 <= self.jitter <= 1:
            raise ConfigurationError(f"Retry(jitter=...) is a fraction 0..1, not {self.jitter}")

    def delay(self, attempts: int, draw: float) -> float:
        """Seconds to wait after ``attempts`` attempts failed; ``draw`` is uniform in 0..1."""
        # The exponent is bounded: past 64 doublings every wait is the cap anyway.
        wait = min(self.cap, self.backoff * self.multiplier ** min(max(attempts - 1, 0), 64))
        return wait * (1 - self.jitter * draw)
