"""Identifiers, digests and secrets shared by every part of the kernel (SPEC §0.4, B-01..B-04, S-1).

Everything here is pure: no clock, no randomness, no I/O. Tokens are *inputs* (a runner draws them
from a CSPRNG); the kernel only checks their shape, digests them and keeps them out of every
`repr()`, message and log line (S-1).

Error messages never contain the offending value. For tokens and ExecutionSpecs that is the
redaction rule itself (S-1); for identifiers it is a deliberate extra: a token passed by mistake
in an identifier argument must not end up in a log line either.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import re
import unicodedata
from collections.abc import Mapping
from typing import Final

import icontract

from kernel.specs.limits import (
    OTHER_ID_MAX_LENGTH,
    PORTABLE_ID_MAX_LENGTH,
    TOKEN_MAX_LENGTH,
    TOKEN_MIN_LENGTH,
)

__all__ = [
    "ATTEMPT_LOCK_DOMAIN",
    "CANONICAL_JSON_MAX_DEPTH",
    "OFFER_ID_DOMAIN",
    "PORTABLE_ID_RE",
    "SHA256_HEX_RE",
    "TOKEN_RE",
    "WORKFLOW_TASK_ATTEMPT_DOMAIN",
    "WORKFLOW_TASK_ATTEMPT_ID_RE",
    "IdentityError",
    "Secret",
    "attempt_lock_key",
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
    "workflow_admission_event_id",
    "workflow_task_attempt_id",
]

# §0.4 / ADR-0229 §4: `^[A-Za-z0-9][A-Za-z0-9._:-]{0,35}$`. Always used with `fullmatch`: a bare `$`
# would accept a trailing newline. re.ASCII keeps the classes ASCII even if someone later adds `\w`.
PORTABLE_ID_RE: Final[re.Pattern[str]] = re.compile(
    rf"[A-Za-z0-9][A-Za-z0-9._:-]{{0,{PORTABLE_ID_MAX_LENGTH - 1}}}", re.ASCII
)
# B-04: 32..128 characters of the URL-safe base64 alphabet.
TOKEN_RE: Final[re.Pattern[str]] = re.compile(
    rf"[A-Za-z0-9_-]{{{TOKEN_MIN_LENGTH},{TOKEN_MAX_LENGTH}}}", re.ASCII
)
# §0.4: a stored digest (token digest, offer id, ExecutionSpec digest) is 64 lowercase hex.
SHA256_HEX_RE: Final[re.Pattern[str]] = re.compile(r"[0-9a-f]{64}", re.ASCII)

# §0.4 [decision] offer id derivation: the domain separator, followed by NUL-joined fields.
OFFER_ID_DOMAIN: Final = "ql3-run-dispatch-offer-v1"

# [decision, this module] Containers nested deeper than this are refused. The bound keeps
# canonicalisation well inside the interpreter's recursion limit and turns a self-referencing
# spec into a typed error instead of a RecursionError.
CANONICAL_JSON_MAX_DEPTH: Final = 64

# [decision, this module] JSON integers must fit a signed 64-bit integer: they are stored in
# SQLite/PostgreSQL integer columns, and Python refuses to print integers of more than 4300
# digits with an untyped ValueError.
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1

_KIND_PORTABLE: Final = "portable identity"
_KIND_OTHER: Final = "identity"
_KIND_CAPABILITY: Final = "token"
_KIND_JSON: Final = "canonical JSON"

# Character sets written out by hand. The contracts below compare the regexes against these
# (an independent formulation), which is what CrossHair tries to falsify.
_ALNUM: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
_PORTABLE_TAIL: Final = _ALNUM | frozenset("._:-")
_TOKEN_CHARS: Final = _ALNUM | frozenset("_-")
_LOWER_HEX: Final = frozenset("0123456789abcdef")


class IdentityError(ValueError):
    """A malformed identifier, token or canonical-JSON value.

    `field` names the offending input, `reason` is a short stable code (`empty`, `too_long`,
    `bad_character`, `bad_token`, `float_not_allowed`, ...). The message is
    `"<field>: invalid <kind> (<reason>)"` and never carries the value (S-1).
    """

    field: str
    reason: str
    kind: str

    def __init__(self, field: str, reason: str, kind: str = _KIND_OTHER) -> None:
        super().__init__(f"{field}: invalid {kind} ({reason})")
        self.field = field
        self.reason = reason
        self.kind = kind

    def __reduce__(self) -> tuple[type[IdentityError], tuple[str, str, str]]:
        # The default reduce would call __init__ with the message only; keep pickling (for
        # example across a process pool) working without ever adding the value.
        return (IdentityError, (self.field, self.reason, self.kind))


def _redacted_violation() -> icontract.ViolationError:
    """Error for a violated contract whose condition mentions a token or an ExecutionSpec.

    icontract's default message prints the values the condition reads; that would put a raw
    token or spec into an exception text (S-1), so those contracts raise this instead.
    """
    return icontract.ViolationError("identity contract violated (values redacted, S-1)")


# --------------------------------------------------------------------------------------------
# Independent oracles used by the contracts (plain loops over hand-written sets, no regex).


def _portable_oracle(value: str) -> bool:
    if not 1 <= len(value) <= PORTABLE_ID_MAX_LENGTH:
        return False
    if value[0] not in _ALNUM:
        return False
    return all(c in _PORTABLE_TAIL for c in value[1:])


def _token_oracle(value: str) -> bool:
    return TOKEN_MIN_LENGTH <= len(value) <= TOKEN_MAX_LENGTH and all(
        c in _TOKEN_CHARS for c in value
    )


def _hex64_oracle(value: str) -> bool:
    return len(value) == 64 and all(c in _LOWER_HEX for c in value)


def _other_id_oracle(value: str) -> bool:
    # Stated with unicodedata, while is_other_id works on code point ranges.
    return 1 <= len(value) <= OTHER_ID_MAX_LENGTH and all(
        unicodedata.category(c) not in ("Cc", "Cs") for c in value
    )


def _is_plain_int(value: object) -> bool:
    # bool is an int in Python; str(True) would silently become part of a derivation.
    return isinstance(value, int) and not isinstance(value, bool)


# --------------------------------------------------------------------------------------------
# Portable identities (§0.4, ADR-0229 §4, WF-09)


@icontract.ensure(lambda value, result: result == _portable_oracle(value))
# The §0.4 sentence, clause by clause: what an accepted id can never be.
@icontract.ensure(
    lambda value, result: (
        not result
        or (
            1 <= len(value) <= PORTABLE_ID_MAX_LENGTH
            and value.isascii()
            and not value.startswith(".")
            and not any(c in "/\\\0" or c.isspace() or not c.isprintable() for c in value)
        )
    )
)
def is_portable_id(value: str) -> bool:
    """Whether `value` is a portable identity (Run ID, Attempt ID; §0.4, ADR-0229 §4).

    1..36 ASCII characters, first one alphanumeric, then alphanumerics and `. _ : -`. UUIDv7 and
    `wta:<32 hex>` match; a leading dot, `/`, `\\`, whitespace, NUL, non-ASCII and a trailing
    newline do not, so such an ID never widens a path when it names a file (§4.6).
    """
    return PORTABLE_ID_RE.fullmatch(value) is not None


@icontract.ensure(lambda value, result: result == value and is_portable_id(result))
def validate_portable_id(value: object, field: str) -> str:
    """Return `value` if it is a portable identity (§0.4), else raise.

    :raises IdentityError: with `field` and one of the reasons `not_a_string`, `empty`,
        `too_long`, `not_ascii`, `leading_dot`, `bad_character`.
    """
    if not isinstance(value, str):
        raise IdentityError(field, "not_a_string", _KIND_PORTABLE)
    if PORTABLE_ID_RE.fullmatch(value) is not None:
        return value
    # Invalid: find the most specific reason (the order is the order of the §0.4 sentence).
    if not value:
        reason = "empty"
    elif len(value) > PORTABLE_ID_MAX_LENGTH:
        reason = "too_long"
    elif not value.isascii():
        reason = "not_ascii"
    elif value.startswith("."):
        reason = "leading_dot"
    else:
        reason = "bad_character"
    raise IdentityError(field, reason, _KIND_PORTABLE)


# --------------------------------------------------------------------------------------------
# Other identities (§0.4, B-01): project, task, worker, session, event


def _other_id_reason(value: str) -> str | None:
    """The reason `value` is not an other-identity, or None if it is one."""
    if not value:
        return "empty"
    if len(value) > OTHER_ID_MAX_LENGTH:
        return "too_long"
    for c in value:
        code = ord(c)
        # Category Cc is exactly U+0000..U+001F and U+007F..U+009F.
        if code < 0x20 or 0x7F <= code <= 0x9F:
            return "control_character"
        # [decision, this module] A lone surrogate is not a Unicode scalar value: it cannot be
        # encoded as UTF-8, so it could never enter an offer id, a JSON document or a database.
        if 0xD800 <= code <= 0xDFFF:
            return "not_utf8"
    return None


@icontract.ensure(lambda value, result: result == _other_id_oracle(value))
@icontract.ensure(lambda value, result: not result or "\0" not in value)
def is_other_id(value: str) -> bool:
    """Whether `value` is a non-portable identity (B-01): 1..128 characters, no control characters.

    Lone surrogates are refused as well (they have no UTF-8 encoding). No NUL means the NUL-joined
    offer id derivation cannot be made ambiguous by a worker or session id.
    """
    return _other_id_reason(value) is None


@icontract.ensure(lambda value, result: result == value and is_other_id(result))
def validate_other_id(value: object, field: str) -> str:
    """Return `value` if it is a non-portable identity (B-01), else raise.

    :raises IdentityError: with `field` and one of the reasons `not_a_string`, `empty`,
        `too_long`, `control_character`, `not_utf8`.
    """
    if not isinstance(value, str):
        raise IdentityError(field, "not_a_string", _KIND_OTHER)
    reason = _other_id_reason(value)
    if reason is not None:
        raise IdentityError(field, reason, _KIND_OTHER)
    return value


# --------------------------------------------------------------------------------------------
# Offer ID (§0.4, B-02, ADR-0021 §5.4)


@icontract.require(lambda attempt_id: isinstance(attempt_id, str) and is_portable_id(attempt_id))
@icontract.require(
    lambda lease_generation: _is_plain_int(lease_generation) and 1 <= lease_generation <= _INT64_MAX
)
@icontract.require(lambda worker_id: isinstance(worker_id, str) and is_other_id(worker_id))
@icontract.require(
    lambda worker_session_id: isinstance(worker_session_id, str) and is_other_id(worker_session_id)
)
@icontract.require(
    lambda worker_generation: (
        _is_plain_int(worker_generation) and 0 <= worker_generation <= _INT64_MAX
    )
)
@icontract.ensure(lambda result: len(result) == 64 and all(c in _LOWER_HEX for c in result))
def offer_id(
    attempt_id: str,
    lease_generation: int,
    worker_id: str,
    worker_session_id: str,
    worker_generation: int,
) -> str:
    """The offer id of a dispatch lease authority (§0.4 [decision], B-02).

    Lowercase hex SHA-256 of the UTF-8 bytes of `"ql3-run-dispatch-offer-v1"`, attempt id, lease
    generation, worker id, worker session id and worker generation, joined by NUL. The control
    plane (on redelivery) and the Worker (on lease loss) both derive it from the lease authority,
    so they agree without exchanging it (ADR-0021 §5.4). The lease token is deliberately not an
    input: the id is written to file names and logs.

    The preconditions make the encoding injective: no component can contain NUL (ids refuse
    control characters, integers are printed in decimal).
    """
    material = "\0".join(
        (
            OFFER_ID_DOMAIN,
            attempt_id,
            str(lease_generation),
            worker_id,
            worker_session_id,
            str(worker_generation),
        )
    )
    return hashlib.sha256(material.encode("utf-8")).hexdigest()


@icontract.ensure(lambda value, result: result == _hex64_oracle(value))
def is_offer_id(value: str) -> bool:
    """Whether `value` has the shape of an offer id: exactly 64 characters `[0-9a-f]` (§0.4)."""
    return SHA256_HEX_RE.fullmatch(value) is not None


# --------------------------------------------------------------------------------------------
# Workflow Task Attempt identities (§4.6, ADR-0229 §4; WF-09, WF-10, I-W6)

#: The domain of the Workflow Task Attempt id's digest (§4.6 [decision]).
WORKFLOW_TASK_ATTEMPT_DOMAIN: Final = "ql3-workflow-task-attempt-v1"
#: A Workflow Task Attempt id, and its admission Event id: the prefix and 32 lowercase hex.
WORKFLOW_TASK_ATTEMPT_ID_RE: Final[re.Pattern[str]] = re.compile(r"wta:[0-9a-f]{32}", re.ASCII)


def _workflow_digest32(plan_digest: str, step_run_id: str, step_run_version: int) -> str:
    material = "\0".join(
        (WORKFLOW_TASK_ATTEMPT_DOMAIN, plan_digest, step_run_id, str(step_run_version))
    )
    return hashlib.sha256(material.encode("utf-8")).hexdigest()[:32]


@icontract.require(lambda plan_digest: isinstance(plan_digest, str) and _hex64_oracle(plan_digest))
@icontract.require(lambda step_run_id: isinstance(step_run_id, str) and is_portable_id(step_run_id))
@icontract.require(
    lambda step_run_version: _is_plain_int(step_run_version) and 0 <= step_run_version <= _INT64_MAX
)
@icontract.ensure(
    lambda result: (
        WORKFLOW_TASK_ATTEMPT_ID_RE.fullmatch(result) is not None and is_portable_id(result)
    )
)
def workflow_task_attempt_id(plan_digest: str, step_run_id: str, step_run_version: int) -> str:
    """The Attempt id Task admission writes for the StepRun `step_run_id` at its epoch
    `step_run_version` (§4.3, §4.6): `"wta:"` + the first 32 lowercase hex of SHA-256 over
    `"ql3-workflow-task-attempt-v1" NUL plan_digest NUL step_run_id NUL version`. Deterministic,
    so an admission re-run for the same `(step_run_id, version)` recomputes the same id and
    replays instead of creating a second Attempt (I-W1); random ids must never replace it.
    The preconditions make the encoding injective (no component contains NUL; the version is
    printed in decimal)."""
    return "wta:" + _workflow_digest32(plan_digest, step_run_id, step_run_version)


@icontract.require(lambda plan_digest: isinstance(plan_digest, str) and _hex64_oracle(plan_digest))
@icontract.require(lambda step_run_id: isinstance(step_run_id, str) and is_portable_id(step_run_id))
@icontract.require(
    lambda step_run_version: _is_plain_int(step_run_version) and 0 <= step_run_version <= _INT64_MAX
)
@icontract.ensure(lambda result: result.startswith("wte:") and is_portable_id(result))
def workflow_admission_event_id(plan_digest: str, step_run_id: str, step_run_version: int) -> str:
    """The admission Event id of the same admission: `"wte:"` + the same 32 hex (§4.6)."""
    return "wte:" + _workflow_digest32(plan_digest, step_run_id, step_run_version)


# --------------------------------------------------------------------------------------------
# Canonical JSON and the ExecutionSpec digest (§0.4, B-03)


def _normalize(value: object, field: str, depth: int) -> object:
    """A plain copy of `value` (exact dict/list/str/int/bool/None), or IdentityError.

    Copying into exact built-in types means `json.dumps` sees nothing it could format in a
    type-specific way (str/int subclasses, tuples, non-dict mappings).
    """
    if depth > CANONICAL_JSON_MAX_DEPTH:
        # Also what a self-referencing container ends in.
        raise IdentityError(field, "too_deep", _KIND_JSON)
    if value is None:
        return None
    if isinstance(value, bool):
        # An exact bool (a bool subclass is impossible, but a proxy object is not).
        return bool(value)
    if isinstance(value, int):
        number = int(value)
        if not _INT64_MIN <= number <= _INT64_MAX:
            raise IdentityError(field, "integer_out_of_range", _KIND_JSON)
        return number
    if isinstance(value, float):
        # Integers only (B-03): no 1.0, no NaN, no Infinity.
        raise IdentityError(field, "float_not_allowed", _KIND_JSON)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, Mapping):
        try:
            # A Mapping whose own iteration fails (a broken or hostile subclass) is not a JSON
            # object; fail closed with the declared error, never with its exception.
            pairs = list(value.items())
        except Exception:
            raise IdentityError(field, "unsupported_type", _KIND_JSON) from None
        copy: dict[str, object] = {}
        for key, item in pairs:
            if not isinstance(key, str):
                raise IdentityError(field, "non_string_key", _KIND_JSON)
            plain_key = str(key)
            if plain_key in copy:
                # Two distinct key objects that print the same; the document would be ambiguous.
                raise IdentityError(field, "duplicate_key", _KIND_JSON)
            copy[plain_key] = _normalize(item, field, depth + 1)
        return copy
    if isinstance(value, list | tuple):
        try:
            items = list(value)
        except Exception:
            raise IdentityError(field, "unsupported_type", _KIND_JSON) from None
        return [_normalize(item, field, depth + 1) for item in items]
    raise IdentityError(field, "unsupported_type", _KIND_JSON)


def _encode_utf8(text: str) -> bytes | None:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        # Returned, not re-raised from here: an IdentityError raised inside this handler would
        # carry the UnicodeEncodeError (and with it the whole document) as __context__ (S-1).
        return None


def _canonical_json(value: object, field: str) -> bytes:
    text = json.dumps(
        _normalize(value, field, 0),
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
    )
    data = _encode_utf8(text)
    if data is None:
        raise IdentityError(field, "not_utf8", _KIND_JSON)
    return data


@icontract.ensure(
    lambda field, result: _canonical_json(json.loads(result), field) == result,
    "canonical JSON is a fixpoint: parsing and re-encoding gives the same bytes",
    error=_redacted_violation,
)
def canonical_json(value: object, *, field: str = "execution_spec") -> bytes:
    """Canonical JSON bytes of `value` (§0.4 [decision], B-03).

    UTF-8 (non-ASCII is written as itself, not as `\\u` escapes), object keys sorted by code
    point, separators `,` and `:`, no whitespace outside strings. Allowed values: mappings with
    `str` keys, lists and tuples, `str`, `int` (signed 64-bit), `bool`, `None`. Floats, NaN and
    Infinity are refused: the ExecutionSpec is integers only.

    :raises IdentityError: with `field` and one of the reasons `float_not_allowed`,
        `unsupported_type`, `non_string_key`, `duplicate_key`, `integer_out_of_range`,
        `too_deep`, `not_utf8`. The message never contains the value (S-1).
    """
    return _canonical_json(value, field)


@icontract.ensure(lambda result: len(result) == 64 and all(c in _LOWER_HEX for c in result))
def execution_spec_digest(spec: Mapping[str, object]) -> str:
    """Lowercase hex SHA-256 of the canonical JSON of an ExecutionSpec (§0.4 [decision], B-03).

    :raises IdentityError: with field `execution_spec`: `not_an_object` if `spec` is not a
        mapping, otherwise the reasons of `canonical_json`.
    """
    document: object = spec
    if not isinstance(document, Mapping):
        raise IdentityError("execution_spec", "not_an_object", _KIND_JSON)
    return hashlib.sha256(_canonical_json(document, "execution_spec")).hexdigest()


# --------------------------------------------------------------------------------------------
# Tokens and digests (§0.4, B-04, S-1)


@icontract.ensure(
    lambda value, result: result == _token_oracle(value),
    error=_redacted_violation,
)
def is_valid_token(value: str) -> bool:
    """Whether `value` has the shape of a lease/callback/receipt token (B-04).

    32..128 characters of `[A-Za-z0-9_-]`. The shape is all the kernel can check: the required
    256 bits of CSPRNG entropy are the generator's duty (at 6 bits per character that needs at
    least 43 characters, e.g. `secrets.token_urlsafe(32)`).
    """
    return TOKEN_RE.fullmatch(value) is not None


@icontract.ensure(lambda result: len(result) == 64 and all(c in _LOWER_HEX for c in result))
def token_digest(token: str) -> str:
    """Lowercase hex SHA-256 of the UTF-8 bytes of a token: the only form databases keep (B-04).

    :raises IdentityError: field `token`, reason `bad_token`, if `token` is not a well-formed token
        (for example `str(secret)`, which is the redacted placeholder). The value is not shown.
    """
    if not isinstance(token, str) or TOKEN_RE.fullmatch(token) is None:
        raise IdentityError("token", "bad_token", _KIND_CAPABILITY)
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@icontract.ensure(lambda value, result: result == _hex64_oracle(value))
def is_sha256_hex(value: str) -> bool:
    """Whether `value` is a stored SHA-256 digest: exactly 64 lowercase hex characters (§0.4)."""
    return SHA256_HEX_RE.fullmatch(value) is not None


# No postcondition here on purpose: checking `result == (a == b)` would itself compare the
# secrets with an ordinary, short-circuiting `==` whenever contracts are on (§0.4). The
# equivalence is a test (tests/kernel/test_identity.py) instead.
def digests_equal(a: str, b: str) -> bool:
    """Constant-time equality of two digests or tokens (§0.4: `hmac.compare_digest`).

    Compares UTF-8 bytes, so it is total over `str` (compare_digest refuses non-ASCII `str`).
    Only the lengths may leak through timing, and digests all have the same length.
    """
    return hmac.compare_digest(
        a.encode("utf-8", "surrogatepass"), b.encode("utf-8", "surrogatepass")
    )


_REDACTED: Final = "Secret(<redacted>)"


@dataclasses.dataclass(frozen=True, slots=True)
class Secret:
    """A raw capability (lease token, completion callback token, receipt token; B-04).

    Every Secret holds a well-formed token. `repr`, `str` and `format` print `Secret(<redacted>)`
    (S-1), also inside a container's or dataclass's repr. Only `reveal()` returns the value, for
    the one place that must present it (the Worker's journal and requests, ADR-0021 §3).
    Equality is constant-time and the hash is that of the digest.
    """

    _value: str = dataclasses.field(repr=False)

    def __post_init__(self) -> None:
        # Checked here too, so direct construction cannot bypass `of`.
        if not isinstance(self._value, str) or TOKEN_RE.fullmatch(self._value) is None:
            raise IdentityError("secret", "bad_token", _KIND_CAPABILITY)

    @classmethod
    def of(cls, value: object, field: str) -> Secret:
        """Wrap `value` as a Secret.

        :raises IdentityError: with `field` and reason `not_a_string` or `bad_token`; the value is
            never part of the message (S-1).
        """
        if not isinstance(value, str):
            raise IdentityError(field, "not_a_string", _KIND_CAPABILITY)
        if TOKEN_RE.fullmatch(value) is None:
            raise IdentityError(field, "bad_token", _KIND_CAPABILITY)
        return cls(value)

    def reveal(self) -> str:
        """The raw token. Call it only where the token must be presented or digested."""
        return self._value

    def digest(self) -> str:
        """The token's SHA-256 digest, the form the control plane stores (B-04, I-9)."""
        return hashlib.sha256(self._value.encode("utf-8")).hexdigest()

    def __repr__(self) -> str:
        return _REDACTED

    def __str__(self) -> str:
        return _REDACTED

    def __format__(self, format_spec: str) -> str:
        # object.__format__ would go through __str__ anyway, but refuses non-empty specs; a
        # fixed placeholder is simpler and cannot fail inside a log call.
        return _REDACTED

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Secret):
            return NotImplemented
        return hmac.compare_digest(self._value.encode("utf-8"), other._value.encode("utf-8"))

    def __hash__(self) -> int:
        # Consistent with __eq__ (equal tokens, equal digests) and reveals nothing about the
        # token beyond what its digest already does.
        return hash(self.digest())


#: B-26: the text an Attempt's advisory lock key is hashed from is this prefix + attempt_id.
ATTEMPT_LOCK_DOMAIN: Final = "ql3.attempt:"


@icontract.ensure(lambda result: -(2**63) <= result < 2**63)
def attempt_lock_key(attempt_id: str) -> int:
    """B-26: the PostgreSQL advisory lock key of an Attempt, a stable signed 64-bit hash (the
    first 8 bytes, big-endian, of SHA-256 of `"ql3.attempt:" + attempt_id`). Every replica
    computes the same key for the same Attempt; `pg_advisory_xact_lock` takes a `bigint`."""
    digest = hashlib.sha256((ATTEMPT_LOCK_DOMAIN + attempt_id).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big", signed=True)
