"""State diagrams generated from the literal transition tables (ARCHITECTURE rule 2).

`render()` returns Markdown with one Mermaid `stateDiagram-v2` per machine; the committed
`docs/state-diagrams.md` is its output (`python scripts/generate_state_diagrams.py`; a test keeps
the two equal).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from enum import StrEnum
from typing import TypeVar

from kernel.specs.tables import (
    ATTEMPT_INITIAL,
    ATTEMPT_TRANSITIONS,
    LEASE_INITIAL,
    LEASE_TRANSITIONS,
    RUN_INITIAL,
    RUN_TRANSITIONS,
)

S = TypeVar("S", bound=StrEnum)


def _diagram(
    title: str,
    table: Mapping[tuple[S, str], frozenset[S]],
    initial: Mapping[str, S],
) -> str:
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for (source, command), targets in table.items():
        for target in targets:
            edges[(source.value, target.value)].append(command)
    for command, first in initial.items():
        edges[("[*]", first.value)].append(command)
    lines = [f"### {title}", "", "```mermaid", "stateDiagram-v2"]
    for (src, dst), commands in sorted(edges.items()):
        lines.append(f"    {src} --> {dst}: {', '.join(sorted(set(commands)))}")
    lines += ["```", ""]
    return "\n".join(lines)


def render() -> str:
    return "\n".join(
        [
            "# State diagrams",
            "",
            "Generated from `kernel/specs/tables.py` by `scripts/generate_state_diagrams.py`;"
            " do not edit by hand. An edge lists every command that may take it.",
            "",
            _diagram("Run", RUN_TRANSITIONS, RUN_INITIAL),
            _diagram(
                "Attempt (the latest Attempt a command addresses)",
                ATTEMPT_TRANSITIONS,
                ATTEMPT_INITIAL,
            ),
            _diagram("Run dispatch lease", LEASE_TRANSITIONS, LEASE_INITIAL),
        ]
    )
