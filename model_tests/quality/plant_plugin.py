"""A pytest plugin that runs a whole session against a planted bug (issue 14 item 5).

    QL3_PLANT=<name> .venv/bin/python -m pytest <paths> -p model_tests.quality.plant_plugin

`<name>` is an entry of `model_tests.quality.plants.PLANTS`. The plugin installs the load-time
plant (`plant.install_at_load`) when pytest imports it, which for a `-p` plugin is before any
conftest file is loaded; the root conftest imports the kernel, so a plant installed any later
would find its module already imported, and it refuses that loudly. Use `python -m pytest` from
the repository root, so that `model_tests` is importable when `-p` is processed.

Without `QL3_PLANT` the plugin does nothing. With it, the session header names the plant, the
terminal summary says which modules were planted, and a session in which a planted module was
never imported ends with exit status 4 (usage error) instead of its own: it tested nothing, and
must not be read as "the tests did not catch the plant" (exit 0) or "caught" (exit 1).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import pytest

from model_tests.quality.plant import LoadPlanter, PlantError, install_at_load
from model_tests.quality.plants import PLANTS

ENV = "QL3_PLANT"


def install_from_environ(environ: Mapping[str, str]) -> tuple[str, LoadPlanter] | None:
    """Install the plant that `environ[ENV]` names, if any; an unknown name or a plant that
    cannot be installed is a usage error."""
    name = environ.get(ENV, "")
    if not name:
        return None
    if name not in PLANTS:
        raise pytest.UsageError(f"{ENV}={name}: no such plant (known: {', '.join(PLANTS)})")
    try:
        return name, install_at_load(PLANTS[name])
    except PlantError as exc:
        raise pytest.UsageError(f"{ENV}={name}: {exc}") from exc


# At import, not in a hook: pytest imports `-p` plugins before it loads any conftest.
INSTALLED = install_from_environ(os.environ)


def _never_loaded() -> list[str]:
    if INSTALLED is None:
        return []
    planter = INSTALLED[1]
    return [module for module in planter.modules if module not in planter.loaded]


def pytest_report_header(config: pytest.Config) -> str | None:
    if INSTALLED is None:
        return None
    name, planter = INSTALLED
    return f"planted: {name} in {', '.join(planter.modules)} (at first import)"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _never_loaded():
        session.exitstatus = pytest.ExitCode.USAGE_ERROR


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if INSTALLED is None:
        return
    name, planter = INSTALLED
    terminalreporter.section(f"plant {name}")
    for module in planter.modules:
        state = "planted" if module in planter.loaded else "NEVER IMPORTED: nothing was tested"
        terminalreporter.write_line(f"{module}: {state}")
