"""Durations and times as a person types and reads them (`qlk task add --deadline 2h`,
`--backoff 10s:5m`, the ages of `qlk status`; decision CLI-12).

A duration is one or more `<integer><unit>` groups, largest unit first, with no spaces:
`500ms`, `30s`, `5m`, `2h`, `1d`, `1h30m`. Units: `ms`, `s`, `m` (minutes), `h`, `d` (24 h).
A bare number is refused (is `30` seconds or milliseconds?), except `0`, which means the same
in every unit. The result is integer milliseconds; nothing here knows the limits a value must
keep (the kernel refuses a deadline or a backoff outside them, with its own code).

    >>> parse_duration("1h30m"), parse_duration("250ms"), parse_duration("0")
    (5400000, 250, 0)
    >>> format_duration(5_400_000), format_duration(250), format_duration(61_000)
    ('1h30m', '250ms', '1m1s')
    >>> format_time(0)
    '1970-01-01 00:00:00Z'
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Final

__all__ = ["DurationError", "format_duration", "format_time", "iso_time", "parse_duration"]

#: Milliseconds per unit, largest first (the order groups must come in).
UNITS: Final[tuple[tuple[str, int], ...]] = (
    ("d", 86_400_000),
    ("h", 3_600_000),
    ("m", 60_000),
    ("s", 1_000),
    ("ms", 1),
)
_MS_PER_UNIT: Final = dict(UNITS)
_GROUP: Final = re.compile(r"([0-9]{1,9})(ms|d|h|m|s)", re.ASCII)
#: Larger than any duration a flag accepts (the kernel's limits are days), small enough that
#: no arithmetic on it overflows a SQLite INTEGER.
_MAX_MS: Final = 10 * 365 * 86_400_000


class DurationError(ValueError):
    """Text that is not a duration; the message says what one looks like (the caller names
    the flag)."""


def parse_duration(text: str) -> int:
    """The milliseconds `text` stands for (see the module); `DurationError` otherwise."""
    if text == "0":
        return 0
    position = 0
    total = 0
    last_rank = -1
    while position < len(text):
        group = _GROUP.match(text, position)
        if group is None:
            raise DurationError(
                "not a duration: use a number and a unit, such as 30s, 5m, 2h, 1d or 1h30m "
                "(units ms, s, m, h, d)"
            )
        rank = [unit for unit, _ in UNITS].index(group.group(2))
        if rank <= last_rank:
            raise DurationError("not a duration: give each unit once, largest first (1h30m)")
        last_rank = rank
        total += int(group.group(1)) * _MS_PER_UNIT[group.group(2)]
        position = group.end()
    if position == 0:
        raise DurationError("not a duration: it is empty")
    if total > _MAX_MS:
        raise DurationError("not a duration: it is longer than ten years")
    return total


def format_duration(ms: int) -> str:
    """`ms` as the shortest duration text `parse_duration` reads back (`0` for zero; a
    negative value gets a leading `-`)."""
    if ms == 0:
        return "0"
    sign = "-" if ms < 0 else ""
    rest = abs(ms)
    parts: list[str] = []
    for unit, size in UNITS:
        count, rest = divmod(rest, size)
        if count:
            parts.append(f"{count}{unit}")
    return sign + "".join(parts)


def format_time(ms: int | None) -> str:
    """An epoch-millisecond time as UTC to the second (`2024-05-01 12:00:00Z`), `-` for None."""
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def iso_time(ms: int | None) -> str | None:
    """An epoch-millisecond time as ISO 8601 UTC with milliseconds, for JSON (None stays)."""
    if ms is None:
        return None
    moment = datetime.fromtimestamp(ms // 1000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + f".{ms % 1000:03d}Z"
