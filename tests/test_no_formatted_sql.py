"""SQL is never built by string formatting (issue 4): statements live in named sections of `.sql`
files and are executed with named parameters. This test reads every Python file of the product
tree (`kernel/`, `runners/`, `conformance/`) with `ast` and flags any `execute(`,
`executemany(` or `executescript(` call whose SQL argument is an f-string, a `%`-formatted,
`.format()`-ted, `+`-concatenated or `.join()`-ed string. The one composition allowed is
psycopg's own identifier quoting, `sql.SQL(STATEMENTS[...]).format(name=sql.Identifier(x))`
(a schema name cannot be a bound parameter): the driver quotes it, no text is spliced."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PRODUCT_TREES = ("kernel", "runners", "conformance")
EXECUTE_METHODS = frozenset({"execute", "executemany", "executescript"})


def _formatted(node: ast.expr) -> str | None:
    """Why `node` is a built string, or None."""
    if isinstance(node, ast.JoinedStr):
        return "f-string"
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        return "%-formatting"
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return "+ concatenation"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if node.func.attr in {"format", "format_map"}:
            return None if _identifier_composition(node) else ".format()"
        if node.func.attr == "join":
            return ".join()"
    return None


def _is_call_of(node: ast.expr, name: str) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == name
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "sql"
    )


def _identifier_composition(node: ast.Call) -> bool:
    """`sql.SQL(STATEMENTS["..."]).format(k=sql.Identifier(v), ...)`: a named statement whose
    placeholders are filled only with identifiers quoted by psycopg."""
    assert isinstance(node.func, ast.Attribute)
    receiver = node.func.value
    if not (_is_call_of(receiver, "SQL") and isinstance(receiver, ast.Call)):
        return False
    template = receiver.args[0] if len(receiver.args) == 1 else None
    if not (isinstance(template, ast.Subscript) and isinstance(template.value, ast.Name)):
        return False
    values = list(node.args) + [k.value for k in node.keywords]
    return bool(values) and all(_is_call_of(v, "Identifier") for v in values)


def violations(source: str, filename: str) -> list[str]:
    found: list[str] = []
    for node in ast.walk(ast.parse(source, filename)):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in EXECUTE_METHODS
        ):
            continue
        arguments = list(node.args[:1]) + [k.value for k in node.keywords if k.arg == "sql"]
        for argument in arguments:
            why = _formatted(argument)
            if why is not None:
                found.append(f"{filename}:{node.lineno}: {node.func.attr}() of a {why}")
    return found


def product_files() -> list[Path]:
    return sorted(p for tree in PRODUCT_TREES for p in (ROOT / tree).rglob("*.py"))


def test_the_product_tree_is_scanned() -> None:
    files = {p.relative_to(ROOT).as_posix() for p in product_files()}
    assert {"runners/edge/store.py", "runners/engine.py", "conformance/run/replay.py"} <= files


def test_no_sql_is_built_by_string_formatting() -> None:
    found: list[str] = []
    for path in product_files():
        found += violations(path.read_text(encoding="utf-8"), path.relative_to(ROOT).as_posix())
    assert found == []


@pytest.mark.parametrize(
    "snippet",
    [
        'conn.execute(f"SELECT * FROM runs WHERE run_id = {run_id}")',
        'conn.execute("SELECT * FROM runs WHERE run_id = %s" % run_id)',
        'conn.execute("SELECT * FROM runs WHERE run_id = {}".format(run_id))',
        'cur.executemany("INSERT INTO " + table + " VALUES (?)", rows)',
        'conn.executescript(" ".join(parts))',
        'conn.execute(sql=f"DELETE FROM {table}")',
        'conn.execute(sql.SQL("DROP SCHEMA {}").format(name))',
        'conn.execute(sql.SQL(f"DROP SCHEMA {name}").format(sql.Identifier(x)))',
        'conn.execute(sql.SQL(STATEMENTS["drop"]).format(s=sql.Literal(x)))',
    ],
)
def test_the_check_flags_formatted_sql(snippet: str) -> None:
    assert len(violations(snippet, "snippet.py")) == 1


@pytest.mark.parametrize(
    "snippet",
    [
        'conn.execute(STATEMENTS["update_run"], params)',
        'conn.execute("SELECT run_id FROM runs WHERE run_id = :run_id", {"run_id": run_id})',
        "engine.execute(storage, command, observed_at_ms)",
        'log.info(f"executed {name}")',
        'conn.execute(sql.SQL(STATEMENTS["drop_schema"]).format(schema=sql.Identifier(name)))',
    ],
)
def test_the_check_accepts_named_statements_and_parameters(snippet: str) -> None:
    assert violations(snippet, "snippet.py") == []
