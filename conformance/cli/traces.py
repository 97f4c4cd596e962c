"""`qlk traces show|generate`: read one trace, or regenerate the bundled corpora.

    qlk traces show conformance/traces/run/RETRY-07-retry-wait-not-before-due.jsonl
    qlk traces generate [--check]        # regenerate the corpus (source checkout only)
    qlk traces generate --component journal [--check]

Exit status (SPEC E-7): 0 shown or up to date; 1 `generate --check` found drift; 2 a missing
or malformed trace file, or `generate` outside a source checkout.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

from conformance.cli.common import (
    Commands,
    Context,
    ExitCode,
    UsageError,
    add_command,
    subcommands,
)
from conformance.journal.corpus import main as journal_corpus_main
from conformance.journal.trace import is_journal_text, show_lines
from conformance.journal.trace import loads as load_journal
from conformance.run.corpus import read_text
from conformance.run.projection import changes
from conformance.run.replay import step_label
from conformance.run.trace import Step, TraceFormatError, canonical
from conformance.run.trace import loads as load_run


def register(commands: Commands) -> None:
    traces = add_command(commands, "traces", help="inspect or regenerate traces")
    actions = subcommands(traces, dest="traces_command")
    show = add_command(actions, "show", help="a readable view of one trace", handler=show_trace)
    show.add_argument("file", type=Path)
    show.add_argument(
        "--projection", action="store_true", help="print the full projection after each step"
    )
    generate = add_command(
        actions,
        "generate",
        help="regenerate the bundled corpus (python -m model_tests.corpus)",
        handler=generate_corpus,
    )
    generate.add_argument("--check", action="store_true", help="compare only; exit 1 on drift")
    generate.add_argument(
        "--component",
        choices=("run", "journal"),
        default="run",
        help="run (default: python -m model_tests.corpus) or journal "
        "(python -m conformance.journal.corpus)",
    )


def show_trace(args: argparse.Namespace, ctx: Context) -> int:
    path: Path = args.file
    full: bool = args.projection
    stream = ctx.out
    if not path.is_file():
        raise UsageError(f"{path}: no such trace file")
    try:
        text = read_text(path)
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read the trace: {exc}") from None
    if is_journal_text(text):
        try:
            lines = show_lines(load_journal(text), full=full)
        except TraceFormatError as exc:
            raise UsageError(f"{path}: malformed trace: {exc}") from None
        for line in lines:
            print(line, file=stream)
        return ExitCode.OK
    try:
        trace = load_run(text)
    except TraceFormatError as exc:
        raise UsageError(f"{path}: malformed trace: {exc}") from None
    header = trace.header
    print(
        f"{header.name}  [{header.component}, profile {header.profile}, seed {header.seed}]",
        file=stream,
    )
    if header.description:
        print(f"  {header.description}", file=stream)
    if header.capabilities:
        print(f"  needs: {', '.join(header.capabilities)}", file=stream)
    previous: dict[str, list[dict[str, Any]]] = {
        "runs": [],
        "attempts": [],
        "policies": [],
        "leases": [],
        "events": [],
    }
    for step in trace.steps:
        print(_step_line(step), file=stream)
        for change in changes(previous, step.expect.projection):
            print(f"      {change}", file=stream)
        if full:
            print(f"      projection {canonical(step.expect.projection)}", file=stream)
        previous = step.expect.projection
    return ExitCode.OK


def _step_line(step: Step) -> str:
    fault = f" [{step.fault.kind.value}]" if step.fault is not None else ""
    expect = step.expect.kind + (f" {step.expect.code}" if step.expect.code else "")
    detail = ""
    if step.command is not None:
        keys = ("run_id", "attempt_id", "new_attempt_id")
        ids = [str(step.command.args[k]) for k in keys if k in step.command.args]
        detail = " " + " ".join(ids)
    elif step.page is not None and step.expect.page is not None:
        page = step.expect.page
        if "items" in page:
            detail = f" -> {[item[0] for item in page['items']]} has_more={page['has_more']}"
        else:
            counts = {k: v for k, v in page.items() if v and k != "has_more"}
            detail = f" -> {counts} has_more={page['has_more']}"
    return f"{step.step:4d} t={step.observed_at_ms} {step_label(step)}{detail}{fault}: {expect}"


def generate_corpus(args: argparse.Namespace, ctx: Context) -> int:
    del ctx  # the generators print their own report
    if args.component == "journal":
        return journal_corpus_main(["--check"] if args.check else ["--write"])
    return _generate_run(check=args.check)


def _generate_run(*, check: bool) -> int:
    """The run corpus is recorded by the models (`python -m model_tests.corpus`), which only a
    source checkout has; conformance never imports them (the import contract), it runs them."""
    root = Path.cwd()
    if not (root / "model_tests" / "corpus" / "__main__.py").is_file():
        raise UsageError(
            "traces generate needs a source checkout (model_tests/): run it from the repository"
        )
    command = [sys.executable, "-m", "model_tests.corpus", *(["--check"] if check else [])]
    return subprocess.run(command, cwd=root, check=False).returncode  # noqa: S603
