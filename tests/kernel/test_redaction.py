"""The redaction rule S-1: a raw token never appears in a repr, an Event, an effect, an outcome
or an error message."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel import CommandError, Fence, GrantLease, Secret
from kernel.codec import decode_command, encode_command
from tests.support.sim import Sim, advance_clock, draw_command, lease_token

TOKENS = st.text(
    alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-",
    min_size=32,
    max_size=64,
)


def _raw_tokens(sim: Sim) -> set[str]:
    found = set()
    for command, _at, _outcome in sim.log:
        for value in _secrets_in(command):
            found.add(value.reveal())
    return found


def _secrets_in(value: object) -> list[Secret]:
    if isinstance(value, Secret):
        return [value]
    slots = getattr(type(value), "__slots__", ())
    out: list[Secret] = []
    for name in slots if isinstance(slots, tuple) else ():
        out.extend(_secrets_in(getattr(value, name, None)))
    return out


@pytest.mark.spec("S-1", "LEASE-10")
@settings(max_examples=60)
@given(st.data())
def test_no_raw_token_in_any_repr_event_or_effect(data: st.DataObject) -> None:
    """S-1 / I-9: across random command sequences, no raw lease token appears in the repr of any
    command, outcome, effect, Event or aggregate; the control-plane rows hold digests only."""
    sim = Sim()
    for _ in range(30):
        advance_clock(data, sim)
        command = draw_command(data, sim)
        if command is not None:
            sim.step(command)
    raw = _raw_tokens(sim)
    if not raw:
        return
    texts = [repr(entry) for entry in sim.log] + [repr(sim.agg), repr(sim.events)]
    texts += [str(encode_command(command)) for command, _at, _o in sim.log]
    for token in raw:
        for text in texts:
            assert token not in text


@pytest.mark.spec("S-1")
@given(TOKENS)
def test_secret_never_prints_its_value(token: str) -> None:
    """A Secret's repr, str and format are a placeholder, also inside containers."""
    secret = Secret.of(token, "lease_token")
    fence = Fence("w1", "s1", 1, 1, secret, 1)
    for text in (repr(secret), str(secret), f"{secret}", repr(fence), repr([fence]), str(fence)):
        assert token not in text
    assert secret.reveal() == token


@pytest.mark.spec("S-1")
@given(TOKENS)
def test_errors_about_tokens_do_not_echo_them(token: str) -> None:
    """A malformed token is refused with an error naming the field, never the value."""
    bad = token + "!"
    with pytest.raises(CommandError) as caught:
        decode_command(
            "grant_lease",
            {
                "run_id": "r1",
                "attempt_id": "a1",
                "worker": {
                    "worker_id": "w1",
                    "session_id": "s1",
                    "generation": 1,
                    "status": "online",
                    "session_expires_at_ms": 10,
                },
                "lease_token": bad,
                "lease_duration_ms": 30_000,
            },
        )
    assert caught.value.field == "lease_token"
    assert bad not in str(caught.value)
    assert token not in repr(caught.value)


def test_encoded_commands_carry_digests_by_default() -> None:
    """The default codec turns a Secret into its SHA-256 digest (safe to trace or log)."""
    sim = Sim()
    token = lease_token("a1", 1)
    grant = GrantLease("run-1", "a1", sim.sessions["w1"], token, 30_000)
    _name, args = encode_command(grant)
    assert args["lease_token"] == {"sha256": token.digest()}
    assert token.reveal() not in str(args)
