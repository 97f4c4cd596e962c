"""The `ci` Hypothesis profile is a function of the test alone (issue 16 item 2, decision TS-3).

Derandomized, Hypothesis draws the same examples for the same test in every process, except for
two inputs that came from outside the test: the example database (a failure saved by one run,
say a planted-bug run of the same machine, is replayed first by every later run of that test)
and Hypothesis's pool of literal constants gathered from every project module loaded so far
(so collecting one more test module changed the lifecycle machine's walk). The `ci` profile
keeps no database, and the root conftest pins the constants pool empty.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]


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


#: In a fresh interpreter: optionally pin the pool as the root conftest does under `ci`, import
#: a module full of literal constants, and print how many local constants Hypothesis would mix
#: into its draws.
POOL = """\
import sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]
if sys.argv[3] == "pinned":
    import conftest
    conftest.pin_local_constants()
import constants_module
from hypothesis.internal.conjecture import providers
print(len(providers._get_local_constants()))
"""


@pytest.mark.parametrize(("mode", "grows"), [("pinned", False), ("unpinned", True)])
def test_importing_a_module_does_not_change_what_the_ci_profile_draws(
    mode: str, grows: bool, tmp_path: Path
) -> None:
    """Hypothesis mixes literal constants of every loaded project module into its draws, so
    the derandomized walk changed with what was imported (the collection); under `ci` the root
    conftest pins that pool empty (TS-3). Unpinned, the same import grows it."""
    (tmp_path / "constants_module.py").write_text(
        "LIMITS = (17, 4_242, 65_537)\nNAMES = ('ql3-probe', 'boundary')\n", encoding="utf-8"
    )
    run = subprocess.run(
        [sys.executable, "-c", POOL, str(tmp_path), str(ROOT), mode],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert (int(run.stdout.strip()) > 0) is grows
