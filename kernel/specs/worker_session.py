"""The Worker session lifecycle as data (SPEC §1.1 Worker session, §3.8 D-5..D-8, Appendix E-2,
E-8; issue 17 item 2).

Read it like h11's `_state.py`: `SESSION_TABLE` (a `Table` over `WorkerSessionStatus`) is the
whole legal surface of one Worker's registry row (`worker_sessions`, one row per worker id that
holds its *current* session). The functions of `kernel/worker_registry.py` consult it before every
change and refuse any missing pair with `SESSION_REFUSALS[status]`, changing nothing.

- `register` creates the row (source `None`) or replaces the session a row holds, whatever its
  state: every process start is a new session id and generation+1, which supersedes the old
  session (a fenced command of the old session is then `WORKER_UNAVAILABLE`, §1.7).
- `resume` keeps the same session id and generation: only a restarted host that proved it owns its
  predecessor's journal (E-2) asks for it, and only while the session is `online` or `draining`
  and unexpired; it keeps the status. [decision WS-1]
- `heartbeat` renews the session lease; `drain` refuses `new_claim` from then on and still allows
  `lease_recovery` (D-8); `stop` and `expire` end the session (`offline`).
- Expiry is decided when the row is read: a row whose `session_expires_at_ms <= now` is `offline`
  whatever it stores (`kernel.worker_registry.effective_status`), so the table is looked up with
  that effective status; `expire` persists it (an optional sweep).

Pure data: no I/O, no clock.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from kernel.specs.states import WorkerSessionStatus
from kernel.specs.table import Table

__all__ = [
    "SESSION_CAPACITY_MAX",
    "SESSION_REFUSALS",
    "SESSION_TABLE",
    "SESSION_TTL_DEFAULT_MS",
    "SESSION_TTL_MAX_MS",
    "SESSION_TTL_MIN_MS",
    "WORKER_PUBLIC_KEY_BYTES",
    "SessionCode",
    "SessionTrigger",
    "next_session_status",
]


class SessionTrigger(enum.StrEnum):
    """What a registry call asks of a Worker's row."""

    REGISTER = "register"  # a process start: new session id, generation + 1
    RESUME = "resume"  # E-2: the same session again, by a host that owns its journal
    HEARTBEAT = "heartbeat"  # renew the session lease
    DRAIN = "drain"  # D-8: refuse new claims, finish owned work
    STOP = "stop"  # the Worker ends its session
    EXPIRE = "expire"  # persist the expiry the kernel decides on read


class SessionCode(enum.StrEnum):
    """Stable codes of registry decisions [decision WS-2]."""

    REGISTERED = "SESSION_REGISTERED"
    RESUMED = "SESSION_RESUMED"
    RENEWED = "SESSION_RENEWED"
    DRAINING = "SESSION_DRAINING"
    STOPPED = "SESSION_STOPPED"
    EXPIRED = "SESSION_EXPIRED"
    # -- refusals (nothing written) ---------------------------------------------------------
    UNKNOWN = "SESSION_UNKNOWN"  # no row for this worker id
    SUPERSEDED = "SESSION_SUPERSEDED"  # the row holds another session id or generation
    OFFLINE = "SESSION_OFFLINE"  # stopped, expired, or expiry persisted
    NOT_EXPIRED = "SESSION_NOT_EXPIRED"  # `expire` of a live session
    SESSION_ID_REUSED = "SESSION_ID_REUSED"  # `register` with the session id the row holds
    CLOCK_REGRESSION = "CLOCK_REGRESSION"  # now < the row's updated_at_ms (V-5's rule)
    INVALID = "SESSION_REQUEST_INVALID"  # TTL, capacity, key or executor types out of range
    CAS_CONFLICT = "CAS_CONFLICT"  # the runner's guarded write lost a race


#: The Worker's X25519 public key, to which the dispatcher seals each lease token (§3.2).
WORKER_PUBLIC_KEY_BYTES: Final = 32
#: The session lease [decision WS-3]: renewed by heartbeat; 5 s..10 min like the Run lease, default
#: 30 s (the Worker heartbeats every third of it, as it renews Run leases, §1.4).
SESSION_TTL_MIN_MS: Final = 5_000
SESSION_TTL_MAX_MS: Final = 600_000
SESSION_TTL_DEFAULT_MS: Final = 30_000
#: Leases one session may hold at once [decision WS-4]: 1..the journal capacity hard limit (a
#: Worker cannot hold more records than its journal, F-7).
SESSION_CAPACITY_MAX: Final = 1024

_S = WorkerSessionStatus
_T = SessionTrigger

# fmt: off
SESSION_TABLE: Final = Table.of("Worker session", WorkerSessionStatus, SessionTrigger, {
    None: {
        _T.REGISTER:   _S.ONLINE,        # the worker id's first session
    },
    _S.ONLINE: {
        _T.REGISTER:   _S.ONLINE,        # a new process start supersedes the session
        _T.RESUME:     _S.ONLINE,        # E-2: same session, same generation
        _T.HEARTBEAT:  _S.ONLINE,
        _T.DRAIN:      _S.DRAINING,      # D-8
        _T.STOP:       _S.OFFLINE,
        _T.EXPIRE:     _S.OFFLINE,       # stored online, expired when read
    },
    _S.DRAINING: {
        _T.REGISTER:   _S.ONLINE,
        _T.RESUME:     _S.DRAINING,      # a draining session stays draining
        _T.HEARTBEAT:  _S.DRAINING,
        _T.DRAIN:      _S.DRAINING,      # asked twice: the same state, lease not renewed
        _T.STOP:       _S.OFFLINE,
        _T.EXPIRE:     _S.OFFLINE,
    },
    _S.OFFLINE: {
        _T.REGISTER:   _S.ONLINE,        # only a new session leaves offline
    },
})
# fmt: on

#: The code a missing pair is refused with, by the row's status (`None`: no row). `online` and
#: `draining` have no missing pair; `expire` is looked up with the stored status and refused
#: `SESSION_NOT_EXPIRED` by its guard while the session lease runs.
SESSION_REFUSALS: Final[Mapping[WorkerSessionStatus | None, SessionCode]] = MappingProxyType(
    {
        None: SessionCode.UNKNOWN,
        _S.OFFLINE: SessionCode.OFFLINE,
    }
)


def next_session_status(
    status: WorkerSessionStatus | None, trigger: SessionTrigger
) -> WorkerSessionStatus | None:
    """The status after `trigger` from `status` (`None`: no row), or None when the pair is
    missing (total, pure)."""
    return SESSION_TABLE.successor(status, trigger)
