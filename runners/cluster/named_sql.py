"""Named SQL sections of the cluster runner: `runners/cluster/sql/*.sql`, parsed once at import.

The section format is `runners.named_sql`'s; the
parameters are psycopg's named placeholders (`%(run_id)s`). Statements are executed with
named parameters, never built by string formatting (`tests/test_no_formatted_sql.py`).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from runners.named_sql import SqlFileError
from runners.named_sql import load as load_package

__all__ = [
    "DISPATCH",
    "PROJECTION",
    "REGISTRY",
    "SOURCES",
    "STATEMENTS",
    "WORKFLOW",
    "SqlFileError",
    "load",
]


def load(filename: str) -> Mapping[str, str]:
    return load_package("runners.cluster", filename)


STATEMENTS: Mapping[str, str] = MappingProxyType(dict(load("statements.sql")))
PROJECTION: Mapping[str, str] = MappingProxyType(dict(load("projection.sql")))
SOURCES: Mapping[str, str] = MappingProxyType(dict(load("sources.sql")))
REGISTRY: Mapping[str, str] = MappingProxyType(dict(load("registry.sql")))
DISPATCH: Mapping[str, str] = MappingProxyType(dict(load("dispatch.sql")))
#: The Workflow loads, writes and backdoor reads (`workflow.sql`, SPEC §4).
WORKFLOW: Mapping[str, str] = MappingProxyType(dict(load("workflow.sql")))
