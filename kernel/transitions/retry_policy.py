"""Admission-time retry policy rules and the lost-retry backoff (SPEC §1.6 A-3/A-4, §1.8.1).

Small, pure integer functions with icontract contracts that CrossHair checks in CI
(`crosshair check --analysis_kind=icontract`).
"""

from __future__ import annotations

import icontract

from kernel.commands import PolicyDefinition
from kernel.specs.codes import Code
from kernel.specs.limits import (
    BACKOFF_EXPONENT_CAP,
    BACKOFF_MAX_MS,
    MAX_ATTEMPTS_MAX,
    MAX_ATTEMPTS_MIN,
    policy_within_limits,
)
from kernel.specs.states import Safety


def _delay(backoff_base_ms: int, backoff_max_ms: int, attempt_number: int) -> int:
    if backoff_base_ms == 0:
        return 0
    exponent = min(attempt_number - 1, BACKOFF_EXPONENT_CAP)
    return int(min(backoff_max_ms, backoff_base_ms * 2**exponent))


@icontract.require(lambda attempt_number: attempt_number >= 1)
@icontract.require(lambda backoff_base_ms, backoff_max_ms: 0 <= backoff_base_ms <= backoff_max_ms)
@icontract.require(lambda backoff_max_ms: backoff_max_ms <= BACKOFF_MAX_MS)
@icontract.ensure(lambda backoff_max_ms, result: 0 <= result <= backoff_max_ms)
@icontract.ensure(lambda backoff_base_ms, result: backoff_base_ms != 0 or result == 0)
@icontract.ensure(
    lambda backoff_base_ms, backoff_max_ms, attempt_number, result: (
        result <= _delay(backoff_base_ms, backoff_max_ms, attempt_number + 1)
    ),
    "RETRY-16: non-decreasing in the attempt number",
)
def backoff_delay_ms(backoff_base_ms: int, backoff_max_ms: int, attempt_number: int) -> int:
    """B-24: `0` if `base = 0`, else `min(max, base * 2 ** min(n - 1, 15))`; no jitter, so a
    replay recomputes the same value (RETRY-16)."""
    return _delay(backoff_base_ms, backoff_max_ms, attempt_number)


@icontract.ensure(
    lambda result, max_attempts, backoff_base_ms, backoff_max_ms: (
        result is not None
        or (
            MAX_ATTEMPTS_MIN <= max_attempts <= MAX_ATTEMPTS_MAX
            and 0 <= backoff_base_ms <= backoff_max_ms <= BACKOFF_MAX_MS
        )
    ),
    "a policy that passes is within the A-3 limits",
)
def policy_limits_code(max_attempts: int, backoff_base_ms: int, backoff_max_ms: int) -> Code | None:
    """A-3 (B-14): `1 <= max_attempts <= 16`, `0 <= base <= max <= 24 h`."""
    if not policy_within_limits(max_attempts, backoff_base_ms, backoff_max_ms):
        return Code.INVALID_RUN_RETRY_POLICY
    return None


@icontract.ensure(
    lambda retry_on_lost, max_attempts, result: result == (retry_on_lost and max_attempts > 1)
)
def retry_enabled(retry_on_lost: bool, max_attempts: int) -> bool:
    """A-4 / R1: retry is enabled iff `retry_on_lost and max_attempts > 1`."""
    return retry_on_lost and max_attempts > 1


def admission_policy_code(policy: PolicyDefinition) -> Code | None:
    """A-3 then A-4 on a provider's policy: `INVALID_RUN_RETRY_POLICY` outside the limits,
    `RUN_RETRY_POLICY_UNSAFE` for an enabled policy with `unknown` safety, else None.

    The one statement of the admission-time policy rule: `admit_run` refuses with this code, and a
    task definition carrying a policy is refused with the same code when it is written (issue 15,
    `kernel.task`), so a task can never hold a policy its fires would be refused for."""
    invalid = policy_limits_code(policy.max_attempts, policy.backoff_base_ms, policy.backoff_max_ms)
    if invalid is not None:
        return invalid
    if retry_enabled(policy.retry_on_lost, policy.max_attempts) and policy.safety is Safety.UNKNOWN:
        return Code.RUN_RETRY_POLICY_UNSAFE
    return None
