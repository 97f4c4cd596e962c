"""The admission-time policy rules and the lost-retry backoff (SPEC §1.6 A-3/A-4, §1.8.1, B-14,
B-24; RETRY-02, RETRY-16)."""

from __future__ import annotations

import icontract
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel.specs.codes import Code
from kernel.transitions.retry_policy import backoff_delay_ms, policy_limits_code, retry_enabled

DAY_MS = 86_400_000


def spec_delay(base: int, maximum: int, n: int) -> int:
    """B-24 written out independently of the kernel."""
    if base == 0:
        return 0
    doubled: int = base * 2 ** min(n - 1, 15)
    return min(maximum, doubled)


@st.composite
def backoffs(draw: st.DrawFn) -> tuple[int, int]:
    """`0 <= base <= max <= 24 h`, with the edges drawn often."""
    edges = st.sampled_from([0, 1, 2, 999, 1_000, 30_000, 65_536, DAY_MS - 1, DAY_MS])
    maximum = draw(edges | st.integers(0, DAY_MS))
    base = draw(st.sampled_from([0, 1, maximum]) | st.integers(0, maximum))
    return min(base, maximum), maximum


@pytest.mark.spec("RETRY-16")
@given(backoffs(), st.integers(1, 64))
def test_backoff_is_bounded_monotone_and_zero_without_base(
    backoff: tuple[int, int], n: int
) -> None:
    """RETRY-16: `delay(n) <= delay(n + 1)`, `0 <= delay(n) <= backoff_max_ms`, `delay = 0`
    when `backoff_base_ms = 0`, and the value is exactly B-24's `min(max, base * 2**min(n-1,
    15))` (no jitter: the same inputs always give the same delay)."""
    base, maximum = backoff
    delay = backoff_delay_ms(base, maximum, n)
    assert delay == spec_delay(base, maximum, n)
    assert delay == backoff_delay_ms(base, maximum, n)
    assert 0 <= delay <= maximum
    assert delay <= backoff_delay_ms(base, maximum, n + 1)
    if base == 0:
        assert delay == 0
    else:
        assert delay >= min(base, maximum)


@pytest.mark.spec("RETRY-16")
@given(backoffs())
def test_backoff_sequence_over_every_attempt_number(backoff: tuple[int, int]) -> None:
    """RETRY-16 over the whole sequence n = 1..20: non-decreasing, capped by the maximum, and
    constant once the exponent cap (n - 1 = 15) is reached."""
    base, maximum = backoff
    delays = [backoff_delay_ms(base, maximum, n) for n in range(1, 21)]
    assert delays == sorted(delays)
    assert all(0 <= d <= maximum for d in delays)
    assert len(set(delays[15:])) == 1
    if base == 0:
        assert set(delays) == {0}


@pytest.mark.spec("RETRY-16")
@pytest.mark.parametrize(
    ("base", "maximum", "n", "expected"),
    [
        (0, 0, 1, 0),
        (0, DAY_MS, 16, 0),
        (1_000, 60_000, 1, 1_000),
        (1_000, 60_000, 2, 2_000),
        (1_000, 60_000, 6, 32_000),
        (1_000, 60_000, 7, 60_000),
        (1, DAY_MS, 16, 2**15),
        (1, DAY_MS, 17, 2**15),  # the exponent is capped at 15
        (1, DAY_MS, 100, 2**15),
        (DAY_MS, DAY_MS, 1, DAY_MS),
        (5, 7, 2, 7),
    ],
)
def test_backoff_examples(base: int, maximum: int, n: int, expected: int) -> None:
    """RETRY-16 / B-24: worked examples of the delay formula, including the exponent cap."""
    assert backoff_delay_ms(base, maximum, n) == expected


@pytest.mark.spec("RETRY-16")
@pytest.mark.parametrize(
    ("base", "maximum", "n"),
    [(0, 0, 0), (1_000, 500, 1), (-1, 10, 1), (0, DAY_MS + 1, 1)],
)
def test_backoff_refuses_inputs_outside_its_contract(base: int, maximum: int, n: int) -> None:
    """The backoff's preconditions mirror A-3: an attempt number below 1, `base > max`, a
    negative base or a maximum above 24 h is a programming error (icontract), never a delay."""
    with pytest.raises(icontract.ViolationError):
        backoff_delay_ms(base, maximum, n)


def _within_limits(max_attempts: int, base: int, maximum: int) -> bool:
    return 1 <= max_attempts <= 16 and 0 <= base <= maximum <= DAY_MS


_AROUND_BOUNDS = st.sampled_from([-(2**63), -1, 0, 1, 2, 15, 16, 17, 2**31, 2**63])
_AROUND_MS = st.sampled_from([-(2**63), -1, 0, 1, 1_000, DAY_MS - 1, DAY_MS, DAY_MS + 1, 2**63])


@pytest.mark.spec("RETRY-02")
@given(
    _AROUND_BOUNDS | st.integers(-5, 21),
    _AROUND_MS | st.integers(-5, DAY_MS + 5),
    _AROUND_MS | st.integers(DAY_MS - 5, DAY_MS + 5) | st.integers(-5, 5),
)
def test_policy_limits_code_is_exactly_a3(max_attempts: int, base: int, maximum: int) -> None:
    """A-3 / B-14: `policy_limits_code` is `INVALID_RUN_RETRY_POLICY` exactly when
    `1 <= max_attempts <= 16` and `0 <= base <= max <= 86_400_000` do not both hold."""
    code = policy_limits_code(max_attempts, base, maximum)
    if _within_limits(max_attempts, base, maximum):
        assert code is None
    else:
        assert code is Code.INVALID_RUN_RETRY_POLICY


@pytest.mark.spec("RETRY-02", "RETRY-03")
@given(st.booleans(), st.integers(-3, 20))
def test_retry_enabled_is_retry_on_lost_and_more_than_one_attempt(
    retry_on_lost: bool, max_attempts: int
) -> None:
    """A-4 / R1: retry is enabled iff `retry_on_lost and max_attempts > 1`."""
    assert retry_enabled(retry_on_lost, max_attempts) is (retry_on_lost and max_attempts > 1)
