"""Migration files of a runner: `<package>/migrations/NNNN_<name>.sql`, versions 1..N, each with
the SHA-256 its database records. Shared by the edge and cluster migrators, which differ only in
how they apply a file and lock the schema."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources

_FILE = re.compile(r"^(?P<version>\d{4})_(?P<name>[a-z0-9_]+)\.sql$")


class MigrationError(RuntimeError):
    """The database's recorded schema does not match this runner's migrations."""


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    text: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()


def load_migrations(package: str) -> tuple[Migration, ...]:
    """Every migration file of `package`, by version; versions must be 1..N without gaps."""
    found: list[Migration] = []
    for entry in resources.files(package).joinpath("migrations").iterdir():
        match = _FILE.match(entry.name)
        if match is not None:
            found.append(
                Migration(
                    int(match.group("version")),
                    f"{match.group('version')}_{match.group('name')}",
                    entry.read_text(encoding="utf-8"),
                )
            )
    found.sort(key=lambda m: m.version)
    if [m.version for m in found] != list(range(1, len(found) + 1)):
        raise MigrationError("migration versions must be 1..N without gaps")
    return tuple(found)
