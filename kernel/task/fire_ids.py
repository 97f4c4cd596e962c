"""The deterministic identities of a scheduled fire (issue 15 item 3; decision TK-6).

A fire of task `t`, revision `r`, at cron time `f` (UTC epoch milliseconds) is admitted as the
Run `fire_run_id(t, r, f)` with first Attempt `fire_attempt_id(t, r, f)`. Every scheduler that
ever decides to admit that fire computes the same two ids, so a second admission, after a crash
between admission and bookkeeping or by a second scheduler on the same file, is an exact replay
of the first (`Replayed(existing)`, A-5) and never a second Run.

Derivation: the prefix (`fr:` for the Run, `fa:` for the Attempt) and the first 32 lowercase hex
characters (128 bits) of SHA-256 over the UTF-8 bytes of a domain separator, the task name, the
revision and the fire time in decimal, joined by NUL. Task names hold no NUL and the integers are
decimal, so the encoding is injective; the ids are 35 characters, portable (§0.4), and two
different fires collide only if SHA-256's first 128 bits do.
"""

from __future__ import annotations

import hashlib
from typing import Final

import icontract

from kernel.identity import is_portable_id

__all__ = [
    "FIRE_ATTEMPT_DOMAIN",
    "FIRE_ATTEMPT_PREFIX",
    "FIRE_RUN_DOMAIN",
    "FIRE_RUN_PREFIX",
    "fire_attempt_id",
    "fire_run_id",
]

FIRE_RUN_DOMAIN: Final = "ql3-task-fire-run-v1"
FIRE_ATTEMPT_DOMAIN: Final = "ql3-task-fire-attempt-v1"
FIRE_RUN_PREFIX: Final = "fr:"
FIRE_ATTEMPT_PREFIX: Final = "fa:"
_HEX_CHARS: Final = 32


def _valid_inputs(task: str, revision: int, fire_at_ms: int) -> bool:
    return (
        isinstance(task, str)
        and bool(task)
        and "\0" not in task
        and isinstance(revision, int)
        and not isinstance(revision, bool)
        and revision >= 1
        and isinstance(fire_at_ms, int)
        and not isinstance(fire_at_ms, bool)
        and fire_at_ms >= 0
    )


def _derive(domain: str, prefix: str, task: str, revision: int, fire_at_ms: int) -> str:
    material = "\0".join((domain, task, str(revision), str(fire_at_ms)))
    return prefix + hashlib.sha256(material.encode("utf-8")).hexdigest()[:_HEX_CHARS]


@icontract.require(_valid_inputs)
@icontract.ensure(lambda result: is_portable_id(result) and len(result) == 35)
def fire_run_id(task: str, revision: int, fire_at_ms: int) -> str:
    """The Run id of the fire of `(task, revision)` at `fire_at_ms` (TK-6)."""
    return _derive(FIRE_RUN_DOMAIN, FIRE_RUN_PREFIX, task, revision, fire_at_ms)


@icontract.require(_valid_inputs)
@icontract.ensure(lambda result: is_portable_id(result) and len(result) == 35)
def fire_attempt_id(task: str, revision: int, fire_at_ms: int) -> str:
    """The first Attempt id of the fire of `(task, revision)` at `fire_at_ms` (TK-6)."""
    return _derive(FIRE_ATTEMPT_DOMAIN, FIRE_ATTEMPT_PREFIX, task, revision, fire_at_ms)
