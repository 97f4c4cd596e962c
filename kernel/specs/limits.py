"""Hard limits of the Run domain (SPEC §1.11, §0.4, §2.5) as data."""

from __future__ import annotations

from typing import Final

# P-1: every page size, every document.
PAGE_SIZE_MIN: Final = 1
PAGE_SIZE_MAX: Final = 64
PAGE_SIZE_DEFAULT: Final = 16

# A-3 / B-14: retry policy limits.
MAX_ATTEMPTS_MIN: Final = 1
MAX_ATTEMPTS_MAX: Final = 16
BACKOFF_MAX_MS: Final = 86_400_000  # 24 h


def policy_within_limits(max_attempts: int, backoff_base_ms: int, backoff_max_ms: int) -> bool:
    """A-3: `1 <= max_attempts <= 16`, `0 <= base <= max <= 24 h`. Admission refuses a policy
    outside it; a stored one outside it breaks an invariant (Appendix E-4)."""
    return (
        MAX_ATTEMPTS_MIN <= max_attempts <= MAX_ATTEMPTS_MAX
        and 0 <= backoff_base_ms <= backoff_max_ms <= BACKOFF_MAX_MS
    )


# §1.8.1: the exponent is capped so the delay arithmetic stays small.
BACKOFF_EXPONENT_CAP: Final = 15

# §1.4 / B-10: lease duration, 5 s..10 min. Appendix E-2: the default is 60 s, at least twice the
# default journal stale window (30 s), so a Worker restarted at once after a crash never has to
# outwait its own lease to get its journal back.
LEASE_DURATION_MIN_MS: Final = 5_000
LEASE_DURATION_MAX_MS: Final = 600_000
LEASE_DURATION_DEFAULT_MS: Final = 60_000

# §0.4: identities.
PORTABLE_ID_MAX_LENGTH: Final = 36
OTHER_ID_MAX_LENGTH: Final = 128
TOKEN_MIN_LENGTH: Final = 32
TOKEN_MAX_LENGTH: Final = 128

# §2.2 / B-31 / D-11: local startup recovery.
STARTUP_RECOVERY_TOTAL_MAX: Final = 1024
# §2.1 / B-29: receipt publish grace.
RECEIPT_PUBLISH_GRACE_MAX_MS: Final = 5_000
