"""The `ci` Hypothesis profile is a function of the code alone (issue 16 item 2, decision TS-3).

Derandomized, Hypothesis draws the same examples for the same test in every process. What still
varied with the history of the folder was the example database: a failure saved by one run (a
planted-bug run of the same machine, say) is replayed first by every later run of that test, so
whether a run caught a bug depended on which runs came before it and on what was collected.
The `ci` profile keeps no database.
"""

from __future__ import annotations

import contextlib

from hypothesis import Phase, given, settings
from hypothesis import strategies as st


def _draws(*, fail_above: int | None) -> list[int]:
    """The examples one run of the same test function draws under the `ci` profile; with
    `fail_above`, the run fails (and would save its failure in a database, if it had one)."""
    seen: list[int] = []

    @settings(settings.get_profile("ci"), max_examples=30, phases=list(Phase))
    @given(st.integers(0, 10**6))
    def probe(value: int) -> None:
        seen.append(value)
        if fail_above is not None and value > fail_above:
            raise AssertionError(value)

    with contextlib.suppress(AssertionError):  # the failing run is expected to fail
        probe()
    return seen


def test_a_failure_of_an_earlier_run_is_not_replayed_by_the_next() -> None:
    profile = settings.get_profile("ci")
    assert profile.derandomize
    assert profile.database is None
    failing = _draws(fail_above=1_000)
    assert any(value > 1_000 for value in failing)  # the first run did fail
    clean = _draws(fail_above=None)
    # The second run starts from the same derandomized draws, not from the saved failure.
    assert clean[:5] == failing[:5]
