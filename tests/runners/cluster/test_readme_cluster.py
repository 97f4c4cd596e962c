"""The README's one-minute first use of the cluster profile, run as written (issue 17: `qlk serve
--profile cluster` and `qlk worker` in the README against the documented DSN). Each `qlk` line
gets `--schema` of this test's own schema; nothing else is changed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

pytestmark = pytest.mark.slow

README = Path(__file__).resolve().parents[3] / "README.md"
SECTION = "## Running the cluster profile"


def _block() -> list[str]:
    text = README.read_text(encoding="utf-8")
    after = text[text.index(SECTION) :]
    body = after[after.index("```sh\n") + len("```sh\n") :]
    lines = body[: body.index("```")].splitlines()
    return [re.sub(r"\s+#.*$", "", line) for line in lines if line.strip()]


def test_the_readme_cluster_first_use_runs_a_command_to_success(
    pg_dsn: str, tmp_path: Path
) -> None:
    lines = _block()
    assert [line.split()[0] for line in lines] == [
        "export", "qlk", "qlk", "RUN=$(qlk", "qlk", "kill",
    ]  # fmt: skip
    schema = f"readme_{uuid.uuid4().hex[:10]}"
    with_schema = [
        re.sub(r"\bqlk (serve|worker|submit|status)\b", rf"qlk \1 --schema {schema}", line)
        for line in lines
    ]
    status = with_schema[4]
    script = "\n".join(
        [
            "set -e",
            f'export PATH="{Path(sys.executable).parent}:$PATH"',
            f"export QL3_DSN='{pg_dsn}'",  # the README's DSN, or this machine's (QL3_PG_DSN)
            *with_schema[1:4],
            'echo "submitted $RUN"',
            "end=$((SECONDS + 150))",  # a busy machine: bounded by time, not by tries
            "while [ $SECONDS -lt $end ]; do",
            f"  if {status} | grep -Eq 'succeeded +\\| +1 '; then break; fi",
            "  sleep 0.2",
            "done",
            status,
            with_schema[5],
            "wait",
        ]
    )
    env = {k: v for k, v in os.environ.items() if k not in {"QL3_DSN", "QL3_DB"}}
    try:
        done = subprocess.run(
            ["/bin/bash", "-c", script],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    except subprocess.TimeoutExpired as late:
        pytest.fail(f"the README block did not finish: {late.stdout!r} {late.stderr!r}")
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"succeeded +\| +1 ", done.stdout), done.stdout + done.stderr
    assert "granted 1" in done.stdout
    assert "qlk worker: " in done.stderr
    assert "stopped" in done.stderr
    assert (tmp_path / "worker1" / "session").exists()
