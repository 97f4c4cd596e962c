"""Named SQL sections of the edge runner: `runners/edge/sql/*.sql`, parsed once at import (the
format is `runners.named_sql`'s)."""

from __future__ import annotations

from collections.abc import Mapping

from runners.named_sql import SqlFileError, parse_sections
from runners.named_sql import load as load_package

__all__ = [
    "APPROVAL",
    "PROJECTION",
    "SOURCES",
    "STATEMENTS",
    "WORKFLOW",
    "SqlFileError",
    "load",
    "parse_sections",
]


def load(filename: str) -> Mapping[str, str]:
    """Parse `runners/edge/sql/<filename>`."""
    return load_package("runners.edge", filename)


#: Writes, loads, transaction control and connection set-up (`statements.sql`).
STATEMENTS = load("statements.sql")
#: The seven read-only candidate sources (`sources.sql`).
SOURCES = load("sources.sql")
#: The backdoor reader of the canonical projection (`projection.sql`).
PROJECTION = load("projection.sql")
#: The Workflow loads, writes and backdoor reads (`workflow.sql`, SPEC §4).
WORKFLOW = load("workflow.sql")
#: The approval domain's load, writes, due indexes, listing and backdoor reads
#: (`approved_action.sql`, SPEC §5, issue 19).
APPROVAL = load("approved_action.sql")
