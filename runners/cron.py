"""Cron iteration for the schedule phase: croniter, UTC, minute resolution (issue 15; TK-3).

Shared by both runners' task stores and the one trigger-schedule phase (`runners.task_schedule`):
the edge runner re-exports it as `runners.edge.cron`, the cluster runner imports it from here.

The kernel checks a cron expression's shape (exactly 5 fields) and never iterates it; this module
asks croniter, the maintained library the issue names, the three questions the runner has:
is the expression valid (and does it ever fire), what is the latest fire at or before a time,
and what is the first fire strictly after a time. Times are integer epoch milliseconds; croniter
is given float epoch seconds, which it reads as UTC whatever the process's TZ is. Fires are whole
minutes, so the questions are asked at minute boundaries (no float rounding at the edges).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from kernel.specs import Code
from kernel.task import TaskRefused, cron_shape_refusal, normalize_cron

if TYPE_CHECKING:
    from croniter import croniter

__all__ = ["MINUTE_MS", "cron_refusal", "first_fire_after", "latest_fire_at_or_before"]

# croniter (with dateutil and pytz) is imported on first use, not with this module: about
# 4 MiB of a `qlk serve` that has no cron task (docs/performance.md, local application §2).

MINUTE_MS: Final = 60_000


def _iterator(cron: str, start_minute_ms: int) -> croniter:
    from croniter import croniter  # noqa: PLC0415 - on first use (RSS, above)

    # `start_minute_ms` is a multiple of a minute: exact in float seconds.
    return croniter(cron, start_minute_ms // 1000)


def first_fire_after(cron: str, after_ms: int) -> int | None:
    """The first fire of `cron` strictly after `after_ms` (None: it never fires again)."""
    from croniter import CroniterError  # noqa: PLC0415 - on first use (RSS, above)

    minute = after_ms // MINUTE_MS * MINUTE_MS
    try:
        # A fire is a minute boundary: the first one after `after_ms` is the first one after
        # the start of `after_ms`'s minute (croniter's get_next is strictly after its start).
        return int(_iterator(cron, minute).get_next(float) * 1000)
    except CroniterError:
        return None


def latest_fire_at_or_before(cron: str, now_ms: int) -> int | None:
    """The latest fire of `cron` at or before `now_ms` (None: there is none)."""
    from croniter import CroniterError  # noqa: PLC0415 - on first use (RSS, above)

    next_minute = now_ms // MINUTE_MS * MINUTE_MS + MINUTE_MS
    try:
        # get_prev is strictly before its start: the latest fire before the next minute starts.
        latest = int(_iterator(cron, next_minute).get_prev(float) * 1000)
    except CroniterError:
        return None
    return latest if latest >= 0 else None


def cron_refusal(cron: str, now_ms: int) -> TaskRefused | None:
    """`TASK_CRON_INVALID` unless `cron` has the kernel's 5-field shape, croniter accepts its
    fields, and it fires at least once after `now_ms` (`0 0 31 2 *` never does)."""
    shape = cron_shape_refusal(cron)
    if shape is not None:
        return shape
    from croniter import CroniterError, croniter  # noqa: PLC0415 - on first use (RSS, above)

    text = normalize_cron(cron)
    try:
        croniter(text, now_ms // MINUTE_MS * MINUTE_MS // 1000)
    except (CroniterError, ValueError, KeyError):
        return TaskRefused(Code.TASK_CRON_INVALID, "cron")
    if first_fire_after(text, now_ms) is None:
        return TaskRefused(Code.TASK_CRON_INVALID, "cron")
    return None
