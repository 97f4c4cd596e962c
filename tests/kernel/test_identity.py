"""Identifiers, digests and secrets (SPEC §0.4, B-01..B-04, S-1, WF-09, INBOX-44, CAD-17).

The oracles here are written independently of `kernel.identity`: character classes by code point
ranges, digests by hashing hand-built byte strings, canonical JSON by literal expected bytes.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import hashlib
import inspect
import json
import logging
import os
import pickle
import re
import unicodedata
import uuid
from pathlib import Path
from types import MappingProxyType

import icontract
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from kernel import identity
from kernel.identity import (
    PORTABLE_ID_RE,
    TOKEN_RE,
    IdentityError,
    Secret,
    canonical_json,
    digests_equal,
    execution_spec_digest,
    is_offer_id,
    is_other_id,
    is_portable_id,
    is_sha256_hex,
    is_valid_token,
    offer_id,
    token_digest,
    validate_other_id,
    validate_portable_id,
)

# ---------------------------------------------------------------------------------------------
# Independent oracles


def _is_ascii_alnum(ch: str) -> bool:
    code = ord(ch)
    return 0x30 <= code <= 0x39 or 0x41 <= code <= 0x5A or 0x61 <= code <= 0x7A


def portable_oracle(value: str) -> bool:
    """§0.4 portable identity, decided one character at a time."""
    if len(value) < 1 or len(value) > 36:
        return False
    for index, ch in enumerate(value):
        if index == 0:
            if not _is_ascii_alnum(ch):
                return False
        elif not (_is_ascii_alnum(ch) or ch in (".", "_", ":", "-")):
            return False
    return True


def other_id_oracle(value: str) -> bool:
    """B-01: 1..128 characters, none of category Cc; lone surrogates (Cs) have no UTF-8 form."""
    if len(value) < 1 or len(value) > 128:
        return False
    return all(unicodedata.category(ch) not in ("Cc", "Cs") for ch in value)


def token_oracle(value: str) -> bool:
    if len(value) < 32 or len(value) > 128:
        return False
    return all(_is_ascii_alnum(ch) or ch in ("_", "-") for ch in value)


def hex64_oracle(value: str) -> bool:
    return len(value) == 64 and all(ch in "0123456789abcdef" for ch in value)


def expected_offer_id(
    attempt_id: str, lease_generation: int, worker_id: str, session_id: str, worker_gen: int
) -> str:
    parts = [
        b"ql3-run-dispatch-offer-v1",
        attempt_id.encode(),
        b"%d" % lease_generation,
        worker_id.encode(),
        session_id.encode(),
        b"%d" % worker_gen,
    ]
    return hashlib.sha256(b"\x00".join(parts)).hexdigest()


# ---------------------------------------------------------------------------------------------
# Strategies

HEX = "0123456789abcdef"
URLSAFE_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"
PORTABLE_ALPHABET = URLSAFE_ALPHABET + ".:"
# Characters a portable id refuses (a dot only in first position), plus near misses: Unicode
# digits and letters, fullwidth, separators, BOM, DEL, NEL.
TRICKY = " \t\n\r\x0b\x0c\x00/\\.é١Ａ\u2028\ufeff😀\x7f\x85"

portable_ids = st.builds(
    lambda first, rest: first + rest,
    st.sampled_from(URLSAFE_ALPHABET.replace("_", "").replace("-", "")),
    st.text(alphabet=PORTABLE_ALPHABET, max_size=35),
)
tokens = st.text(alphabet=URLSAFE_ALPHABET, min_size=32, max_size=128)
other_ids = st.text(
    alphabet=st.characters(exclude_categories=["Cc", "Cs"]), min_size=1, max_size=128
)
near_portable = st.text(
    alphabet=st.sampled_from(PORTABLE_ALPHABET + TRICKY) | st.characters(), max_size=40
)


@st.composite
def uuid7_strings(draw: st.DrawFn) -> str:
    unix_ms = draw(st.integers(min_value=0, max_value=2**48 - 1))
    rand_a = draw(st.integers(min_value=0, max_value=2**12 - 1))
    rand_b = draw(st.integers(min_value=0, max_value=2**62 - 1))
    value = (unix_ms << 80) | (0x7 << 76) | (rand_a << 64) | (0b10 << 62) | rand_b
    text = str(uuid.UUID(int=value))
    return text.upper() if draw(st.booleans()) else text


json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=8)
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=6),
            children,
            max_size=4,
        )
    ),
    max_leaves=20,
)
json_objects = st.dictionaries(st.text(max_size=6), json_values)
floats = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from(
    [float("nan"), float("inf"), float("-inf"), -0.0, 1.0, 0.0]
)


def _reverse_order(value: object) -> object:
    """The same JSON value with every object's insertion order reversed."""
    if isinstance(value, dict):
        return {k: _reverse_order(v) for k, v in reversed(list(value.items()))}
    if isinstance(value, list):
        return [_reverse_order(v) for v in value]
    return value


# ---------------------------------------------------------------------------------------------
# Portable identities (§0.4, WF-09)


def test_portable_regex_is_the_spec_regex() -> None:
    assert PORTABLE_ID_RE.pattern == "[A-Za-z0-9][A-Za-z0-9._:-]{0,35}"
    assert PORTABLE_ID_RE.flags & re.ASCII


@given(uuid7_strings())
def test_portable_accepts_uuidv7(value: str) -> None:
    assert is_portable_id(value)
    assert validate_portable_id(value, "run_id") == value


def test_portable_accepts_random_uuids() -> None:
    for _ in range(50):
        assert is_portable_id(str(uuid.uuid4()))


@given(st.text(alphabet=HEX, min_size=32, max_size=32))
def test_portable_accepts_wta_ids(hex32: str) -> None:
    value = "wta:" + hex32
    assert len(value) == 36
    assert is_portable_id(value)
    assert validate_portable_id(value, "attempt_id") == value


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("", "empty"),
        (".", "leading_dot"),
        (".hidden", "leading_dot"),
        ("..", "leading_dot"),
        ("a/b", "bad_character"),
        ("/abs", "bad_character"),
        ("a\\b", "bad_character"),
        ("a b", "bad_character"),
        (" a", "bad_character"),
        ("a\tb", "bad_character"),
        ("a\0b", "bad_character"),
        ("\0", "bad_character"),
        ("-lead", "bad_character"),
        ("_lead", "bad_character"),
        (":lead", "bad_character"),
        ("é", "not_ascii"),
        ("run-é", "not_ascii"),
        ("١٢٣", "not_ascii"),
        ("a" * 37, "too_long"),
        ("abc\n", "bad_character"),
        ("abc\r\n", "bad_character"),
    ],
)
def test_portable_rejects_bad_forms(value: str, reason: str) -> None:
    assert not is_portable_id(value)
    with pytest.raises(IdentityError) as info:
        validate_portable_id(value, "run_id")
    assert info.value.field == "run_id"
    assert info.value.reason == reason
    assert str(info.value) == f"run_id: invalid portable identity ({reason})"


def test_portable_length_boundary() -> None:
    assert is_portable_id("a" * 36)
    assert is_portable_id("a")
    assert not is_portable_id("a" * 37)
    assert not is_portable_id("wta:" + "0" * 33)


@given(near_portable)
def test_portable_matches_oracle(value: str) -> None:
    assert is_portable_id(value) == portable_oracle(value)


@given(portable_ids)
def test_portable_generated_ids_are_accepted(value: str) -> None:
    assert portable_oracle(value)
    assert is_portable_id(value)


@given(portable_ids, st.sampled_from(TRICKY), st.data())
def test_portable_rejects_any_inserted_bad_character(
    value: str, bad: str, data: st.DataObject
) -> None:
    position = data.draw(st.integers(min_value=0, max_value=len(value)))
    candidate = value[:position] + bad + value[position:]
    if bad == ".":
        # A dot is fine anywhere except first.
        assert is_portable_id(candidate) == (position > 0 and len(candidate) <= 36)
    else:
        assert not is_portable_id(candidate)


def _field_names() -> st.SearchStrategy[str]:
    return st.from_regex(r"[a-z][a-z_]{0,20}(\.[a-z_]{1,10})?", fullmatch=True)


@given(near_portable, _field_names())
def test_validate_portable_error_names_field(value: str, field: str) -> None:
    if portable_oracle(value):
        assert validate_portable_id(value, field) == value
        return
    with pytest.raises(IdentityError) as info:
        validate_portable_id(value, field)
    assert info.value.field == field
    assert str(info.value).startswith(f"{field}: ")
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("value", [None, 1, b"abc", ["a"], 1.5, object()])
def test_validate_rejects_non_strings(value: object) -> None:
    for validate in (validate_portable_id, validate_other_id):
        with pytest.raises(IdentityError) as info:
            validate(value, "attempt_id")
        assert info.value.field == "attempt_id"
        assert info.value.reason == "not_a_string"


@given(st.text(min_size=37, max_size=200))
def test_identity_error_never_echoes_the_value(value: str) -> None:
    # Stricter than required for ids: a token passed by mistake must not reach a log (S-1).
    assume(len(value.strip()) > 3)
    with pytest.raises(IdentityError) as info:
        validate_portable_id(value, "run_id")
    assert value not in str(info.value)
    assert value not in repr(info.value)


# ---------------------------------------------------------------------------------------------
# Other identities (B-01)


@given(other_ids)
def test_other_id_accepts(value: str) -> None:
    assert is_other_id(value)
    assert validate_other_id(value, "worker_id") == value


@given(st.text(max_size=140))
def test_other_id_matches_oracle(value: str) -> None:
    assert is_other_id(value) == other_id_oracle(value)


def test_other_id_rejects_every_control_character() -> None:
    controls = [chr(c) for c in range(0x110000) if unicodedata.category(chr(c)) == "Cc"]
    assert len(controls) == 65
    for ch in controls:
        for value in (ch, "a" + ch, ch + "a", "project" + ch + "x"):
            assert not is_other_id(value)
            with pytest.raises(IdentityError) as info:
                validate_other_id(value, "project_id")
            assert info.value.reason == "control_character"
            assert info.value.field == "project_id"


def test_other_id_boundaries() -> None:
    assert is_other_id("x")
    assert is_other_id("é" * 128)
    assert is_other_id("a b/c\\d.e")  # only control characters are refused
    assert is_other_id("\u00a0\u2028😀")  # non-Cc separators and astral characters are allowed
    for value, reason in [("", "empty"), ("a" * 129, "too_long"), ("a\ud800b", "not_utf8")]:
        assert not is_other_id(value)
        with pytest.raises(IdentityError) as info:
            validate_other_id(value, "task_id")
        assert (info.value.field, info.value.reason) == ("task_id", reason)
        assert str(info.value) == f"task_id: invalid identity ({reason})"


# ---------------------------------------------------------------------------------------------
# Offer ID (B-02)


def test_offer_id_known_answer() -> None:
    attempt = "wta:0123456789abcdef0123456789abcdef"
    # Computed outside Python: printf 'ql3-run-dispatch-offer-v1\0<attempt>\0003\0worker-1\0
    # session-9\0007' | sha256sum
    known = "0ba80a87c1259160c63801cf87dd71cddcb2951daadeebae0dea1972cbf39b46"
    assert expected_offer_id(attempt, 3, "worker-1", "session-9", 7) == known
    assert offer_id(attempt, 3, "worker-1", "session-9", 7) == known
    assert is_offer_id(known)


@given(portable_ids, st.integers(1, 2**40), other_ids, other_ids, st.integers(0, 2**40))
def test_offer_id_matches_independent_derivation(
    attempt: str, lease_gen: int, worker: str, session: str, worker_gen: int
) -> None:
    result = offer_id(attempt, lease_gen, worker, session, worker_gen)
    assert result == expected_offer_id(attempt, lease_gen, worker, session, worker_gen)
    assert hex64_oracle(result)
    assert is_offer_id(result)


_OFFER_ARGS: list[st.SearchStrategy[str] | st.SearchStrategy[int]] = [
    portable_ids,
    st.integers(1, 2**40),
    other_ids,
    other_ids,
    st.integers(0, 2**40),
]


@given(st.tuples(*_OFFER_ARGS), st.integers(0, 4), st.data())
def test_offer_id_changes_with_every_component(
    args: tuple[str | int, ...], which: int, data: st.DataObject
) -> None:
    changed: list[object] = list(args)
    changed[which] = data.draw(_OFFER_ARGS[which].filter(lambda v: v != args[which]))
    assert offer_id(*args) != offer_id(*changed)  # type: ignore[arg-type]


def test_offer_id_separates_fields() -> None:
    # NUL joining plus NUL-free ids: moving a boundary changes the id.
    assert offer_id("a", 1, "bc", "d", 0) != offer_id("a", 1, "b", "cd", 0)
    assert offer_id("a1", 1, "w", "s", 0) != offer_id("a", 11, "w", "s", 0)


def test_offer_id_has_no_token_input() -> None:
    params = list(inspect.signature(offer_id).parameters)
    assert params == [
        "attempt_id",
        "lease_generation",
        "worker_id",
        "worker_session_id",
        "worker_generation",
    ]
    assert not any("token" in p or "secret" in p for p in params)


@pytest.mark.parametrize(
    "args",
    [
        ("a/b", 1, "w", "s", 0),  # not a portable attempt id
        ("a", 0, "w", "s", 0),  # lease generation starts at 1 (§1.1)
        ("a", True, "w", "s", 0),  # bool is not a generation
        ("a", 1, "w\0x", "s", 0),  # NUL would make the encoding ambiguous
        ("a", 1, "w", "", 0),
        ("a", 1, "w", "s", -1),
        ("a", 1, "w", "s", False),
    ],
)
def test_offer_id_preconditions(args: tuple[object, ...]) -> None:
    with pytest.raises(icontract.ViolationError):
        offer_id(*args)  # type: ignore[arg-type]


@given(st.text(max_size=70))
def test_is_offer_id_matches_oracle(value: str) -> None:
    assert is_offer_id(value) == hex64_oracle(value)


# ---------------------------------------------------------------------------------------------
# Canonical JSON and the ExecutionSpec digest (B-03)


def test_canonical_json_known_bytes() -> None:
    value = {"é": True, "b": {"c": None}, "a": [1, 2]}
    expected = '{"a":[1,2],"b":{"c":null},"é":true}'.encode()
    assert canonical_json(value) == expected
    # sha256sum of the same bytes, computed outside Python.
    known = "f7e675032f8415ef0251e433142f9ad2210ca6f5677a8546be90cc1512906920"
    assert execution_spec_digest(value) == known
    assert hashlib.sha256(expected).hexdigest() == known


def test_canonical_json_compact_and_escapes() -> None:
    assert canonical_json({}) == b"{}"
    assert canonical_json([]) == b"[]"
    assert canonical_json({"a": "x y", "b": [1, [2, {}]]}) == b'{"a":"x y","b":[1,[2,{}]]}'
    assert canonical_json({"s": 'q"\\\n\t\x00'}) == b'{"s":"q\\"\\\\\\n\\t\\u0000"}'
    assert canonical_json((1, "two", False)) == b'[1,"two",false]'
    assert canonical_json(None) == b"null"
    assert canonical_json(-(2**63)) == b"-9223372036854775808"
    assert canonical_json(2**63 - 1) == b"9223372036854775807"


def test_canonical_json_unicode_is_raw_utf8() -> None:
    text = "é☃😀 中文"
    assert canonical_json({"k": text, text: 1}) == ('{"k":"' + text + '","' + text + '":1}').encode(
        "utf-8"
    )
    assert b"\\u" not in canonical_json({"k": text})


def test_canonical_json_sorts_keys_by_code_point() -> None:
    assert canonical_json({"b": 1, "a": 2, "B": 3, "é": 4, "aa": 5}) == (
        '{"B":3,"a":2,"aa":5,"b":1,"é":4}'.encode()
    )


@given(json_values)
def test_canonical_json_key_order_independent(value: object) -> None:
    assert canonical_json(value) == canonical_json(_reverse_order(value))


@given(json_values)
def test_canonical_json_round_trips_and_is_stable(value: object) -> None:
    data = canonical_json(value)
    parsed = json.loads(data.decode("utf-8"))
    assert parsed == value
    assert canonical_json(parsed) == data
    assert data == json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    ).encode("utf-8")


@given(json_objects)
def test_execution_spec_digest_is_sha256_of_canonical_json(spec: dict[str, object]) -> None:
    digest = execution_spec_digest(spec)
    assert hex64_oracle(digest)
    assert is_sha256_hex(digest)
    assert digest == hashlib.sha256(canonical_json(spec)).hexdigest()
    assert digest == execution_spec_digest(MappingProxyType(spec))
    reordered = _reverse_order(spec)
    assert isinstance(reordered, dict)
    assert digest == execution_spec_digest(reordered)


def _plant(value: object, leaf: object, path: list[int]) -> object:
    """Wrap `leaf` into containers according to `path` (0: list, 1: dict, 2: tuple)."""
    result = leaf
    for step in path:
        if step == 0:
            result = [1, result, "x"]
        elif step == 1:
            result = {"k": result, "z": value}
        else:
            result = ("t", result)
    return {"spec": result}


@given(floats, st.lists(st.integers(0, 2), max_size=6), json_values)
def test_canonical_json_rejects_floats_anywhere(
    number: float, path: list[int], other: object
) -> None:
    document = _plant(other, number, path)
    with pytest.raises(IdentityError) as info:
        canonical_json(document)
    assert (info.value.field, info.value.reason) == ("execution_spec", "float_not_allowed")
    with pytest.raises(IdentityError) as info:
        execution_spec_digest({"outer": document})
    assert info.value.reason == "float_not_allowed"


class _Weird:
    pass


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ({"a": {1, 2}}, "unsupported_type"),
        ({"a": b"bytes"}, "unsupported_type"),
        ({"a": _Weird()}, "unsupported_type"),
        ({"a": [1, frozenset()]}, "unsupported_type"),
        ({1: "a"}, "non_string_key"),
        ({"a": {None: 1}}, "non_string_key"),
        ({"a": 2**63}, "integer_out_of_range"),
        ({"a": -(2**63) - 1}, "integer_out_of_range"),
        ({"a": 10**5000}, "integer_out_of_range"),
        ({"a": "\ud800"}, "not_utf8"),
        ({"\udfff": 1}, "not_utf8"),
    ],
)
def test_canonical_json_rejections(value: object, reason: str) -> None:
    with pytest.raises(IdentityError) as info:
        canonical_json(value)
    assert (info.value.field, info.value.reason) == ("execution_spec", reason)
    assert info.value.__cause__ is None
    assert info.value.__context__ is None


def test_canonical_json_depth_and_cycles() -> None:
    deep: object = 1
    for _ in range(identity.CANONICAL_JSON_MAX_DEPTH):
        deep = [deep]
    assert canonical_json(deep).count(b"[") == identity.CANONICAL_JSON_MAX_DEPTH
    with pytest.raises(IdentityError) as info:
        canonical_json([deep])
    assert info.value.reason == "too_deep"
    cyclic: dict[str, object] = {}
    cyclic["self"] = cyclic
    with pytest.raises(IdentityError) as info:
        canonical_json(cyclic)
    assert info.value.reason == "too_deep"


def test_canonical_json_field_and_top_level() -> None:
    with pytest.raises(IdentityError) as info:
        canonical_json({"a": 1.5}, field="plan")
    assert info.value.field == "plan"
    with pytest.raises(IdentityError) as info:
        execution_spec_digest([1, 2])  # type: ignore[arg-type]
    assert (info.value.field, info.value.reason) == ("execution_spec", "not_an_object")


def test_canonical_json_normalises_subclasses() -> None:
    class Color(enum.StrEnum):
        RED = "red"

    class Level(enum.IntEnum):
        HIGH = 3

    assert canonical_json({Color.RED: [Color.RED, Level.HIGH]}) == b'{"red":["red",3]}'


@pytest.mark.spec("S-1", "INBOX-44")
@given(tokens)
def test_canonical_json_errors_never_contain_the_spec(secret_text: str) -> None:
    spec = {"command": ["run", secret_text], "timeout": 1.5}
    with pytest.raises(IdentityError) as info:
        execution_spec_digest(spec)
    assert secret_text not in str(info.value)
    assert secret_text not in repr(info.value)
    assert all(secret_text not in str(arg) for arg in info.value.args)


# ---------------------------------------------------------------------------------------------
# Tokens and digests (B-04)


def test_token_regex_is_b04() -> None:
    assert TOKEN_RE.pattern == "[A-Za-z0-9_-]{32,128}"
    assert is_valid_token("a" * 32)
    assert is_valid_token("Z" * 128)
    assert not is_valid_token("a" * 31)
    assert not is_valid_token("a" * 129)
    assert not is_valid_token("a" * 40 + "\n")
    assert not is_valid_token("a" * 40 + "=")  # padded base64 is not the alphabet
    assert not is_valid_token("a" * 40 + "+/")
    assert not is_valid_token("é" * 40)


@given(
    st.text(
        alphabet=st.sampled_from(URLSAFE_ALPHABET + "=+/. \n\0é") | st.characters(), max_size=140
    )
)
def test_token_shape_matches_oracle(value: str) -> None:
    assert is_valid_token(value) == token_oracle(value)


@given(tokens)
def test_token_digest_is_sha256_hex(token: str) -> None:
    digest = token_digest(token)
    assert digest == hashlib.sha256(token.encode("ascii")).hexdigest()
    assert hex64_oracle(digest)
    assert is_sha256_hex(digest)
    assert token not in digest


@pytest.mark.spec("S-1")
@pytest.mark.parametrize("bad", ["short", "Secret(<redacted>)", "x" * 40 + "!", "\u00e9" * 40])
def test_token_digest_refuses_malformed_tokens_without_echo(bad: str) -> None:
    with pytest.raises(IdentityError) as info:
        token_digest(bad)
    assert (info.value.field, info.value.reason) == ("token", "bad_token")
    assert bad not in str(info.value)


@given(st.text(max_size=70))
def test_is_sha256_hex_matches_oracle(value: str) -> None:
    assert is_sha256_hex(value) == hex64_oracle(value)


def test_is_sha256_hex_boundaries() -> None:
    assert is_sha256_hex("0" * 64)
    assert not is_sha256_hex("0" * 63)
    assert not is_sha256_hex("0" * 65)
    assert not is_sha256_hex("A" * 64)
    assert not is_sha256_hex("0" * 63 + "g")
    assert not is_sha256_hex("0" * 64 + "\n")


@given(st.text(), st.text())
def test_digests_equal_is_equality(a: str, b: str) -> None:
    assert digests_equal(a, b) == (a == b)
    assert digests_equal(a, a)


@given(tokens, tokens)
def test_digests_equal_on_digests(a: str, b: str) -> None:
    assert digests_equal(token_digest(a), token_digest(a))
    assert digests_equal(token_digest(a), token_digest(b)) == (a == b)


def test_digests_equal_total_over_non_ascii() -> None:
    assert digests_equal("é", "é")
    assert not digests_equal("é", "e")
    assert digests_equal("\ud800", "\ud800")
    assert not digests_equal("", "a")


# ---------------------------------------------------------------------------------------------
# Secret and redaction (S-1, INBOX-44)


@dataclasses.dataclass(frozen=True)
class _Fence:
    attempt_id: str
    lease_token: Secret


def _renderings(secret: Secret) -> list[str]:
    return [
        repr(secret),
        str(secret),
        f"{secret}",
        f"{secret!r}",
        f"{secret!s}",
        f"{secret:>60}",
        format(secret, ""),
        "%s %r" % (secret, secret),  # noqa: UP031 - the old-style path is what logging uses
        "{} {!r}".format(secret, secret),  # noqa: UP032 - str.format is a separate code path
        repr((secret,)),
        repr([secret, secret]),
        repr({"lease_token": secret}),
        str({secret}),
        repr(_Fence("a1", secret)),
        str(_Fence("a1", secret)),
    ]


@pytest.mark.spec("S-1", "INBOX-44")
@given(tokens)
def test_secret_never_renders_the_token(token: str) -> None:
    secret = Secret.of(token, "lease_token")
    for text in _renderings(secret):
        assert token not in text
        assert "Secret(<redacted>)" in text
    assert repr(secret) == str(secret) == "Secret(<redacted>)"


@pytest.mark.spec("S-1", "INBOX-44")
@given(tokens)
def test_secret_in_log_records(token: str) -> None:
    secret = Secret.of(token, "callback_token")
    record = logging.LogRecord(
        "ql3", logging.INFO, __file__, 1, "lease %s %r", (secret, secret), None
    )
    formatted = logging.Formatter("%(message)s").format(record)
    assert token not in formatted
    assert "Secret(<redacted>)" in formatted


@pytest.mark.spec("S-1")
@given(tokens)
def test_secret_reveal_digest_and_equality(token: str) -> None:
    secret = Secret.of(token, "lease_token")
    assert secret.reveal() == token
    assert secret.digest() == token_digest(token) == hashlib.sha256(token.encode()).hexdigest()
    twin = Secret.of(token, "other")
    assert secret == twin
    assert hash(secret) == hash(twin)
    assert secret != token  # never equal to the bare string
    assert len({secret, twin}) == 1


@pytest.mark.spec("S-1")
@given(tokens, tokens)
def test_secret_inequality(a: str, b: str) -> None:
    assert (Secret.of(a, "t") == Secret.of(b, "t")) == (a == b)


@pytest.mark.spec("S-1")
def test_secret_is_frozen_and_slotted() -> None:
    secret = Secret.of("k" * 43, "lease_token")
    with pytest.raises(dataclasses.FrozenInstanceError):
        secret._value = "x" * 43  # type: ignore[misc]
    assert not hasattr(secret, "__dict__")


def _bad_tokens() -> st.SearchStrategy[str]:
    """Strings that look almost like tokens (so they are recognisable in a message)."""
    inserted = st.builds(
        lambda t, bad, pos: t[: pos % len(t)] + bad + t[pos % len(t) :],
        tokens,
        st.sampled_from([*"=+/. \n\0é!", "\u2028"]),
        st.integers(0, 200),
    )
    too_long = st.text(alphabet=URLSAFE_ALPHABET, min_size=129, max_size=200)
    too_short = st.text(alphabet=URLSAFE_ALPHABET, min_size=8, max_size=31)
    return inserted | too_long | too_short


@pytest.mark.spec("S-1", "INBOX-44")
@given(_bad_tokens(), _field_names())
def test_secret_of_rejects_without_echo(bad: str, field: str) -> None:
    assert not is_valid_token(bad)
    with pytest.raises(IdentityError) as info:
        Secret.of(bad, field)
    err = info.value
    assert (err.field, err.reason) == (field, "bad_token")
    assert str(err) == f"{field}: invalid token (bad_token)"
    assert bad not in str(err)
    assert bad not in repr(err)
    assert all(bad not in str(arg) for arg in err.args)
    assert err.__context__ is None
    assert bad.encode("utf-8", "surrogatepass") not in pickle.dumps(err)


@pytest.mark.spec("S-1")
@pytest.mark.parametrize("value", [None, 42, b"x" * 40, ["x" * 40]])
def test_secret_of_rejects_non_strings(value: object) -> None:
    with pytest.raises(IdentityError) as info:
        Secret.of(value, "lease_token")
    assert info.value.reason == "not_a_string"


@pytest.mark.spec("S-1")
def test_secret_direct_construction_is_validated() -> None:
    with pytest.raises(IdentityError) as info:
        Secret("not a token")
    assert info.value.reason == "bad_token"
    assert "not a token" not in str(info.value)


def test_identity_error_pickles_without_losing_fields() -> None:
    err = IdentityError("run_id", "too_long", "portable identity")
    copy = pickle.loads(pickle.dumps(err))  # noqa: S301 - our own bytes
    assert isinstance(copy, IdentityError)
    assert (copy.field, copy.reason, str(copy)) == ("run_id", "too_long", str(err))


# ---------------------------------------------------------------------------------------------
# Purity (CAD-17)


@pytest.mark.spec("CAD-17")
def test_identity_module_imports_only_pure_modules() -> None:
    tree = ast.parse(Path(identity.__file__).read_text(encoding="utf-8"))
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            imported.add(node.module.split(".")[0])
    forbidden = {"os", "time", "random", "threading", "sqlite3", "psycopg", "secrets", "asyncio"}
    assert not imported & forbidden
    allowed = {
        "__future__",
        "collections",
        "dataclasses",
        "hashlib",
        "hmac",
        "icontract",
        "json",
        "kernel",
        "re",
        "typing",
        "unicodedata",
    }
    assert imported <= allowed


def test_public_names_are_exported() -> None:
    for name in (
        "IdentityError",
        "Secret",
        "canonical_json",
        "digests_equal",
        "execution_spec_digest",
        "is_offer_id",
        "is_other_id",
        "is_portable_id",
        "is_sha256_hex",
        "is_valid_token",
        "offer_id",
        "token_digest",
        "validate_other_id",
        "validate_portable_id",
    ):
        assert name in identity.__all__
        assert hasattr(identity, name)


class _BrokenList(list[object]):
    def __iter__(self):  # type: ignore[no-untyped-def]
        raise TypeError("broken")


@pytest.mark.parametrize("value", [os._Environ(0, 0, 0, 0, 0), _BrokenList()])  # type: ignore[arg-type]
def test_a_container_that_cannot_be_read_is_refused_with_the_declared_error(value: object) -> None:
    """Found by CrossHair (an `os._Environ` with broken internals): a Mapping or sequence whose
    own iteration raises is `unsupported_type`, never its exception."""
    with pytest.raises(IdentityError) as refused:
        canonical_json(value, field="spec")
    assert refused.value.reason == "unsupported_type"
