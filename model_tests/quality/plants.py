"""Named load-time plants: the patches `plant_plugin` installs for `QL3_PLANT=<name>`.

Each entry is a tuple of `SourcePatch`es of real source text, planted by an import hook before
the module is first executed, so that a whole pytest run tests the mutated code, e.g.

    QL3_PLANT=selftest_limit .venv/bin/python -m pytest model_tests/quality/test_plant_target.py \\
        -p model_tests.quality.plant_plugin

This module imports nothing but `plant` (naming a patch imports nothing), so loading it never
imports a module it plants into.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from model_tests.quality.plant import SourcePatch

_JOURNAL_SPEC = "kernel.specs.journal"

#: Issue 14 item 1: changes of the Worker kernel's decisions that the Worker runtime's own tests
#: (`tests/runners/worker/`) must catch, because the runtime runs the kernel's tables instead of
#: a copy of them (`model_tests/quality/test_worker_plants.py`).
WORKER_PLANTS: Final[Mapping[str, tuple[SourcePatch, ...]]] = MappingProxyType(
    {
        # §3.7: a redelivery or restart that finds `started` "continues the first start" (a
        # second spawn) instead of replaying only the running ACK (INBOX-06).
        "worker_replay_started_starts_again": (
            SourcePatch(
                _JOURNAL_SPEC,
                "JournalState.STARTED: ReplayAction.REPLAY_RUNNING_ACK,",
                "JournalState.STARTED: ReplayAction.CONTINUE_FIRST_START,",
            ),
        ),
        # §3.6: `already_running` is dropped from the running ACK's acceptance (a replayed
        # running ACK would leave the record `started`).
        "worker_running_ack_refuses_already_running": (
            SourcePatch(
                _JOURNAL_SPEC,
                "                Code.ALREADY_RUNNING: JournalTrigger.RUNNING_ACKNOWLEDGED,\n",
                "",
            ),
        ),
        # §3.14: the retention order swapped: the journal record before the receipt (a failed
        # receipt cleanup would no longer keep the record).
        "worker_retention_journal_before_receipt": (
            SourcePatch(
                _JOURNAL_SPEC,
                "RetentionStep.DELETE_RECEIPT,\n            RetentionStep.REMOVE_RECORD,\n",
                "RetentionStep.REMOVE_RECORD,\n            RetentionStep.DELETE_RECEIPT,\n",
            ),
        ),
    }
)

PLANTS: Final[Mapping[str, tuple[SourcePatch, ...]]] = MappingProxyType(
    {
        **WORKER_PLANTS,
        # The self-test of the mechanism: `<=` becomes `<`, which test_plant_target.py catches.
        "selftest_limit": (
            SourcePatch(
                "model_tests.quality.plant_target", "return n <= LIMIT", "return n < LIMIT"
            ),
        ),
    }
)
