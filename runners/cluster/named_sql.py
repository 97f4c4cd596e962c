"""Named SQL sections of the cluster runner: `runners/cluster/sql/*.sql`, parsed once at import.

The section format is the edge runner's (`runners.edge.named_sql.parse_sections`); the
parameters are psycopg's named placeholders (`%(run_id)s`). Statements are executed with
named parameters, never built by string formatting (`tests/test_no_formatted_sql.py`).
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources
from types import MappingProxyType

from runners.edge.named_sql import SqlFileError, parse_sections

__all__ = ["PROJECTION", "SOURCES", "STATEMENTS", "SqlFileError", "load"]


def load(filename: str) -> Mapping[str, str]:
    text = resources.files("runners.cluster").joinpath("sql", filename).read_text("utf-8")
    return parse_sections(text, f"runners/cluster/sql/{filename}")


STATEMENTS: Mapping[str, str] = MappingProxyType(dict(load("statements.sql")))
PROJECTION: Mapping[str, str] = MappingProxyType(dict(load("projection.sql")))
SOURCES: Mapping[str, str] = MappingProxyType(dict(load("sources.sql")))
