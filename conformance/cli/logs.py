"""`qlk logs RUN [--follow]`: the output of a Run's latest Attempt.

    qlk logs run-3f2a...
    qlk logs --follow "$(qlk submit --task hello)"

The launcher writes each Attempt's stdout and stderr to one file beside the database
(`runners.local.launcher.LocalLayout(db).log_path(attempt_id)`); this prints the latest
Attempt's file as it is (bytes that are not UTF-8 are shown as U+FFFD). `--follow` keeps
printing what is appended, polling the database and the file every 200 ms, until the Run is
terminal; when a retry starts a new Attempt it goes on with that Attempt's file (a note on
stderr says so). Ctrl-C stops it (exit 130, as every command).

[decision CLI-14] A Run without a log yet (queued, never started, or ended before starting)
is not an error: a note on stderr says so and the exit status is 0, so `qlk logs RUN` in a
script does not fail for a Run that is merely waiting. Exit status (SPEC E-7): 0 printed (or
nothing to print); 2 an unknown RUN (one line naming it); 3 the database or the log file failed.
"""

from __future__ import annotations

import argparse
import codecs
import time
from pathlib import Path
from typing import BinaryIO, Final

from conformance.cli.common import (
    Commands,
    Context,
    ExitCode,
    InfrastructureError,
    add_command,
    add_db_argument,
)
from conformance.cli.localdb import open_store, refusal
from kernel.specs import Code
from runners.edge.store import EdgeStore
from runners.local.launcher import LocalLayout
from runners.local.status import RunProgress, run_progress

__all__ = ["POLL_S", "register"]

#: How often `--follow` polls the database and the file.
POLL_S: Final = 0.2
_CHUNK: Final = 64 * 1024


def register(commands: Commands) -> None:
    parser = add_command(
        commands,
        "logs",
        help="print the output of a Run's latest Attempt (--follow: until the Run ends)",
        handler=run,
    )
    add_db_argument(parser)
    parser.add_argument("run", metavar="RUN", help="a Run id")
    parser.add_argument(
        "--follow",
        "-f",
        action="store_true",
        help="keep printing what is appended until the Run is terminal",
    )


class _Tail:
    """One Attempt's log file, read from where it was last read, decoded incrementally."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: BinaryIO | None = None
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def drain(self, ctx: Context, *, final: bool = False) -> bool:
        """Print what was appended since the last call; False while the file does not exist."""
        if self._file is None:
            try:
                self._file = self.path.open("rb")
            except FileNotFoundError:
                return False
            except OSError as exc:
                raise InfrastructureError(f"{self.path}: cannot read the log: {exc}") from exc
        while chunk := self._file.read(_CHUNK):
            ctx.out.write(self._decoder.decode(chunk))
        if final:
            ctx.out.write(self._decoder.decode(b"", final=True))
        ctx.out.flush()
        return True

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def _progress(store: EdgeStore, run_id: str) -> RunProgress:
    progress = run_progress(store, run_id)
    if progress is None:
        raise refusal(f"RUN {run_id}", Code.RUN_NOT_FOUND)
    return progress


def _no_log(ctx: Context, progress: RunProgress) -> None:
    if progress.terminal:
        what = f"ended {progress.status.value} without writing a log"
    else:
        what = f"is {progress.status.value} and its latest Attempt has not written a log yet"
    print(f"qlk logs: run {progress.run_id} {what}", file=ctx.err)


def run(args: argparse.Namespace, ctx: Context) -> int:
    run_id: str = args.run
    with open_store(args.db) as store:
        layout = LocalLayout(store.path)
        if args.follow:
            return _follow(store, layout, run_id, ctx)
        progress = _progress(store, run_id)
    attempt = progress.latest_attempt_id
    tail = _Tail(layout.log_path(attempt)) if attempt is not None else None
    try:
        if tail is None or not tail.drain(ctx, final=True):
            _no_log(ctx, progress)
    finally:
        if tail is not None:
            tail.close()
    return ExitCode.OK


def _follow(store: EdgeStore, layout: LocalLayout, run_id: str, ctx: Context) -> int:
    """Poll until the Run is terminal. The status is read before the file is drained: a
    terminal status is recorded after the Attempt's process ended, so the drain that follows
    it sees every byte the process wrote."""
    tail: _Tail | None = None
    attempt: str | None = None
    seen_log = False
    try:
        while True:
            progress = _progress(store, run_id)
            if progress.latest_attempt_id != attempt:
                if tail is not None:
                    tail.drain(ctx, final=True)  # the earlier Attempt's last bytes
                    tail.close()
                    print(
                        f"qlk logs: run {run_id} continues in attempt {progress.latest_attempt_id}",
                        file=ctx.err,
                    )
                attempt = progress.latest_attempt_id
                tail = None if attempt is None else _Tail(layout.log_path(attempt))
            if tail is not None:
                seen_log = tail.drain(ctx, final=progress.terminal) or seen_log
            if progress.terminal:
                if not seen_log:
                    _no_log(ctx, progress)
                return ExitCode.OK
            time.sleep(POLL_S)
    finally:
        if tail is not None:
            tail.close()
