"""A throwaway local PostgreSQL for the cluster runner (issue 5 item 6).

On a machine without PostgreSQL the README's commands still work: when no DSN is given,
`ensure_dsn` uses a server that answers at the default DSN, or else starts a throwaway one from
the server binaries that the `pgserver` wheel ships (the `cluster` extra installs it), and says
so through `announce`. The throwaway server lives in a fresh temporary directory: a data
directory made by `initdb`, the server listening only on a Unix socket in that directory (no TCP
port, so nothing can collide with or reach it from the network), durability switched off since
nothing is kept. On exit the server is stopped (fast shutdown) and the directory removed.

PostgreSQL refuses to run as root. When this process is root, the temporary directory is handed
to the unprivileged system user `nobody`, and `initdb` and `postgres` run as that user
(`subprocess`'s `user=`/`group=`/`extra_groups=`); root, the client, still reaches the socket.
If `nobody` cannot read the wheel's binaries where they are installed, a copy of them in the
temporary directory is run instead.
Nothing is installed or changed outside the temporary directory. Only the binaries of the
`pgserver` wheel are used (located without importing the package), never a system PostgreSQL.

POSIX only. If the Python process is killed outright (SIGKILL), the server is not stopped;
its directory is then a `ql3-pg-*` directory in the temporary directory.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final
from urllib.parse import quote

import psycopg

if sys.platform != "win32":
    import pwd  # POSIX only; importing this module still works elsewhere

__all__ = [
    "DEFAULT_DSN",
    "DSN_VARIABLE",
    "LocalServer",
    "NoPostgresError",
    "answers",
    "ensure_dsn",
    "pgserver_install",
    "throwaway_server",
]

#: The environment variable that names the cluster runner's database (README, `.ci/run`).
DSN_VARIABLE: Final = "QL3_PG_DSN"
#: Where `.ci/run` (and a developer's machine with the Debian server) has PostgreSQL.
DEFAULT_DSN: Final = "postgresql://postgres@127.0.0.1:5432/test"
#: The unprivileged user the server runs as when this process is root.
UNPRIVILEGED_USER: Final = "nobody"

_FIX: Final = (
    f"set {DSN_VARIABLE} to a reachable server (e.g. {DEFAULT_DSN}), or install the cluster "
    "extra, which brings the pgserver wheel with the server binaries: "
    "pip install -e '.[cluster]' (or pip install pgserver; its wheels are for x86_64 Linux and "
    "macOS, CPython 3.12 or older)"
)
_SOCKET_NAME: Final = ".s.PGSQL.5432"
_SUN_PATH_MAX: Final = 107  # bytes of a Unix socket path (sockaddr_un.sun_path less the NUL)
_BINARY_PARTS: Final = ("bin", "lib", "share")  # the tree postgres finds relative to itself


class NoPostgresError(RuntimeError):
    """No PostgreSQL could be had; the message says why and how to fix it."""


@dataclass(frozen=True)
class LocalServer:
    """A running throwaway server."""

    dsn: str  #: superuser `postgres`, database `postgres`, over the Unix socket in `directory`
    version: str  #: e.g. "16.2"
    directory: Path  #: the temporary directory: data, socket, log; removed on exit
    pid: int  #: the postmaster
    user: str  #: the system user the server runs as
    started_in_s: float  #: initdb plus start-up until the first connection succeeded


@dataclass(frozen=True)
class _Identity:
    name: str
    uid: int | None  # None: this process's own user (not root)
    gid: int | None


def pgserver_install(package: str = "pgserver") -> Path:
    """The `pginstall` directory of the installed `pgserver` wheel (bin/, lib/, share/).

    Found with `importlib.util.find_spec`, which does not import the package (its import
    creates a lock directory and may warn about XDG_RUNTIME_DIR)."""
    spec = importlib.util.find_spec(package)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        install = Path(location) / "pginstall"
        if (install / "bin" / "postgres").is_file() and (install / "bin" / "initdb").is_file():
            return install
    if spec is None:
        raise NoPostgresError(f"the {package} package is not installed")
    raise NoPostgresError(f"the {package} package at {locations} has no pginstall/bin/postgres")


def answers(dsn: str, *, timeout_s: int = 3) -> bool:
    """Whether a server accepts a connection at `dsn`."""
    try:
        with psycopg.connect(dsn, connect_timeout=timeout_s, autocommit=True):
            return True
    except psycopg.Error:
        return False


def _announce_to_stderr(message: str) -> None:
    print(message, file=sys.stderr)


@contextmanager
def ensure_dsn(
    explicit: str | None = None,
    *,
    default: str | None = DEFAULT_DSN,
    announce: Callable[[str], None] = _announce_to_stderr,
) -> Iterator[str]:
    """The DSN to use, valid inside the `with` block.

    In order: `explicit` (e.g. `--dsn`) if given; else `$QL3_PG_DSN` if set (both as given,
    not probed: an unreachable explicit server is the caller's error to report); else `default`
    if a server answers there (announced); else a throwaway server (`throwaway_server`),
    announced, stopped and removed when the block exits. Raises `NoPostgresError` when none
    of these works, with how to fix it."""
    if explicit:
        yield explicit
        return
    configured = os.environ.get(DSN_VARIABLE)
    if configured:
        yield configured
        return
    if default is not None and answers(default):
        announce(f"no {DSN_VARIABLE} given: using the PostgreSQL server that answers at {default}")
        yield default
        return
    nothing_at = f" and nothing answers at {default}" if default is not None else ""
    with ExitStack() as stack:
        try:
            server = stack.enter_context(throwaway_server())
        except NoPostgresError as exc:
            raise NoPostgresError(
                f"no PostgreSQL for the cluster runner: {DSN_VARIABLE} is not set{nothing_at}, "
                f"and no throwaway server could be started: {exc}. To fix: {_FIX}"
            ) from exc
        announce(
            f"no {DSN_VARIABLE} given{nothing_at}: started a throwaway PostgreSQL "
            f"{server.version} from pgserver at {server.dsn} as user {server.user} in "
            f"{server.started_in_s:.1f} s; it is removed on exit"
        )
        yield server.dsn


@contextmanager
def throwaway_server(
    *, install: Path | None = None, startup_timeout_s: float = 60.0
) -> Iterator[LocalServer]:
    """Start a PostgreSQL server in a fresh temporary directory; stop it and remove the
    directory on exit. `install` is a `pginstall`-like tree (default: `pgserver_install()`).
    Raises `NoPostgresError` (with the server's output) if it cannot start."""
    if sys.platform == "win32":
        raise NoPostgresError("the throwaway server needs a POSIX system (Unix sockets)")
    started = time.monotonic()
    source = install if install is not None else pgserver_install()
    if not (source / "bin" / "postgres").is_file():
        raise NoPostgresError(f"{source} has no bin/postgres")
    identity = _server_identity()
    root = _make_directory(identity)
    process: subprocess.Popen[bytes] | None = None
    try:
        binaries = _binaries_for(identity, source, root)
        data = root / "data"
        env = _server_environment(root)
        _run_as(
            identity,
            [
                str(binaries / "initdb"),
                "-D",
                str(data),
                "-U",
                "postgres",
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
                "--no-instructions",
            ],
            env=env,
            log=root / "initdb.log",
            what="initdb",
        )
        log_path = root / "postgres.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(  # noqa: S603 - the wheel's postgres, fixed arguments
                [
                    str(binaries / "postgres"),
                    "-D",
                    str(data),
                    "-k",
                    str(root),
                    "-p",
                    "5432",
                    "-c",
                    "listen_addresses=",
                    "-c",
                    "fsync=off",
                    "-c",
                    "synchronous_commit=off",
                    "-c",
                    "full_page_writes=off",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=root,
                user=identity.uid,
                group=identity.gid,
                extra_groups=[] if identity.uid is not None else None,
            )
        dsn = f"postgresql://postgres@/postgres?host={quote(str(root), safe='')}"
        version = _wait_until_ready(process, dsn, log_path, started + startup_timeout_s)
        yield LocalServer(
            dsn=dsn,
            version=version,
            directory=root,
            pid=process.pid,
            user=identity.name,
            started_in_s=time.monotonic() - started,
        )
    finally:
        if process is not None:
            _stop(process)
        shutil.rmtree(root, ignore_errors=True)


def _server_identity() -> _Identity:
    """This process's user, or `nobody` when this process is root."""
    if os.geteuid() != 0:
        try:
            name = pwd.getpwuid(os.geteuid()).pw_name
        except KeyError:
            name = str(os.geteuid())
        return _Identity(name, None, None)
    try:
        entry = pwd.getpwnam(UNPRIVILEGED_USER)
    except KeyError:
        raise NoPostgresError(
            f"running as root, and PostgreSQL refuses to run as root, but there is no "
            f"unprivileged user {UNPRIVILEGED_USER!r} to run it as"
        ) from None
    if entry.pw_uid == 0:
        raise NoPostgresError(f"the user {UNPRIVILEGED_USER!r} is root")
    return _Identity(UNPRIVILEGED_USER, entry.pw_uid, entry.pw_gid)


def _traversable_by_others(path: Path) -> bool:
    return all(p.stat().st_mode & 0o001 for p in (path, *path.parents))


def _make_directory(identity: _Identity) -> Path:
    """A fresh `ql3-pg-*` directory whose socket path fits a Unix socket address and that the
    server's user can reach (owned by it, mode 0700)."""
    # /tmp when $TMPDIR is too long for a socket path or closed to the server's user; mkdtemp
    # makes a fresh directory of mode 0700 either way.
    for base in dict.fromkeys((Path(tempfile.gettempdir()), Path("/tmp"))):  # noqa: S108
        if not base.is_dir() or (identity.uid is not None and not _traversable_by_others(base)):
            continue
        root = Path(tempfile.mkdtemp(prefix="ql3-pg-", dir=base))
        if len(os.fsencode(root / _SOCKET_NAME)) > _SUN_PATH_MAX:
            root.rmdir()
            continue
        if identity.uid is not None and identity.gid is not None:
            os.chown(root, identity.uid, identity.gid)
        return root
    raise NoPostgresError(
        "no temporary directory with a short enough path"
        + (f" that the user {identity.name} can reach" if identity.uid is not None else "")
    )


def _open_to_others(trees: list[Path]) -> bool:
    """Whether any user can reach and read every file of `trees` and run those in bin/."""
    for tree in trees:
        if not _traversable_by_others(tree):
            return False
        for directory, _, files in os.walk(tree):
            if os.stat(directory).st_mode & 0o005 != 0o005:
                return False
            wanted = 0o005 if Path(directory).name == "bin" else 0o004
            for name in files:
                try:
                    mode = os.stat(os.path.join(directory, name)).st_mode
                except OSError:
                    return False
                if mode & wanted != wanted:
                    return False
    return True


def _binaries_for(identity: _Identity, source: Path, root: Path) -> Path:
    """The bin/ directory to run. As root, the install itself when any user can read it (a
    pip-installed wheel usually), else a copy inside `root` owned by the server's user.

    The copy keeps the wheel's layout, `<package>/pginstall/{bin,lib,share}` beside
    `<package>.libs/` (the shared libraries auditwheel moved out, found through
    `$ORIGIN/../../../<package>.libs` run paths)."""
    package = source.parent
    libraries = package.parent / f"{package.name}.libs"
    trees = [source / part for part in _BINARY_PARTS if (source / part).is_dir()]
    if libraries.is_dir():
        trees.append(libraries)
    if identity.uid is None or identity.gid is None or _open_to_others(trees):
        return source / "bin"
    copy = root / package.name / source.name
    for part in _BINARY_PARTS:
        if (source / part).is_dir():
            shutil.copytree(
                source / part, copy / part, symlinks=True, ignore=shutil.ignore_patterns("*.a")
            )
    if libraries.is_dir():
        shutil.copytree(libraries, root / libraries.name, symlinks=True)
    for top in (root / package.name, root / libraries.name):
        for directory, subdirectories, files in os.walk(top):
            for name in (directory, *(os.path.join(directory, n) for n in subdirectories + files)):
                os.chown(name, identity.uid, identity.gid, follow_symlinks=False)
    return copy / "bin"


def _server_environment(root: Path) -> dict[str, str]:
    """A clean environment: no PG* variables of the caller, the C locale, UTC."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(root),
        "LC_ALL": "C",
        "LANG": "C",
        "TZ": "UTC",
    }


def _tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.strip().splitlines()[-lines:])


def _run_as(
    identity: _Identity, command: list[str], *, env: dict[str, str], log: Path, what: str
) -> None:
    with log.open("wb") as output:
        try:
            result = subprocess.run(  # noqa: S603 - the wheel's initdb, fixed arguments
                command,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=log.parent,
                user=identity.uid,
                group=identity.gid,
                extra_groups=[] if identity.uid is not None else None,
                timeout=120,
                check=False,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise NoPostgresError(f"{what} could not run as {identity.name}: {exc}") from exc
    if result.returncode != 0:
        raise NoPostgresError(
            f"{what} (as {identity.name}) exited with {result.returncode}:\n{_tail(log)}"
        )


def _wait_until_ready(
    process: subprocess.Popen[bytes], dsn: str, log: Path, deadline: float
) -> str:
    """Poll until a connection succeeds; return the server version ("16.2")."""
    while True:
        code = process.poll()
        if code is not None:
            raise NoPostgresError(f"postgres exited with {code} while starting:\n{_tail(log)}")
        try:
            with psycopg.connect(dsn, connect_timeout=2, autocommit=True) as conn:
                number = conn.info.server_version
            return f"{number // 10000}.{number % 10000}"
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise NoPostgresError(
                    f"postgres did not accept connections in time:\n{_tail(log)}"
                ) from None
            time.sleep(0.05)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Fast shutdown (SIGINT: roll back open transactions, end sessions); kill if it hangs."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
