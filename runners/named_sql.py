"""Named SQL sections, the one format of every `.sql` file beside a runner.

A file is a sequence of sections, each opened by a header line `-- name: <identifier>` and
holding exactly one statement (comments allowed). Files are parsed once, at import; statements
are executed with named parameters (`:run_id` on SQLite, `%(run_id)s` on PostgreSQL), never
built by string formatting (`tests/test_no_formatted_sql.py` enforces that over the tree).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Mapping
from importlib import resources
from types import MappingProxyType

__all__ = ["SqlFileError", "load", "parse_sections"]

_HEADER = re.compile(r"^--\s*name:\s*(?P<name>[a-z_][a-z0-9_]*)\s*$")


class SqlFileError(ValueError):
    """A `.sql` file that does not follow the named-section format."""


def parse_sections(text: str, source: str) -> Mapping[str, str]:
    """The sections of one file, by name. Each must hold exactly one complete statement."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        header = _HEADER.match(line)
        if header is not None:
            name = header.group("name")
            if name in sections:
                raise SqlFileError(f"{source}: section {name!r} appears twice")
            current = sections[name] = []
        elif current is not None:
            current.append(line)
        elif line.strip() and not line.lstrip().startswith("--"):
            raise SqlFileError(f"{source}: statement text before the first `-- name:` header")
    out: dict[str, str] = {}
    for name, lines in sections.items():
        while lines and (not lines[-1].strip() or lines[-1].lstrip().startswith("--")):
            lines.pop()  # a comment after the statement belongs to what follows
        statement = "\n".join(lines).strip()
        if not _is_one_statement(statement):
            raise SqlFileError(f"{source}: section {name!r} must hold exactly one statement")
        out[name] = statement
    return MappingProxyType(out)


def _is_one_statement(statement: str) -> bool:
    # sqlite3.complete_statement only scans for a complete `;`-terminated statement (quotes and
    # comments aware); it opens no database, so it serves the PostgreSQL files as well.
    code = "\n".join(
        line for line in statement.splitlines() if not line.lstrip().startswith("--")
    ).strip()
    return (
        bool(code)
        and sqlite3.complete_statement(code)
        and code.endswith(";")
        and code.count(";") == 1
    )


def load(package: str, filename: str) -> Mapping[str, str]:
    """Parse `<package>/sql/<filename>` (a package resource, so it works from a wheel)."""
    text = resources.files(package).joinpath("sql", filename).read_text(encoding="utf-8")
    return parse_sections(text, f"{package.replace('.', '/')}/sql/{filename}")
