"""The run-trace JSON Schema (`conformance/run/trace.schema.json`), checked and compiled once.

`jsonschema.validate(instance, schema)` checks the schema against its metaschema and builds a
new validator on every call: about 50 ms a trace line, most of a minute and a half for the named
corpus. `validate_line` is the same check (the schema checked once, here, with the same
validator class and the same best-match error) at a fraction of a millisecond a line.
"""

from __future__ import annotations

import json
from typing import Any, Final

import jsonschema

from conformance.run.corpus import RUN_CORPUS

SCHEMA: Final[dict[str, Any]] = json.loads(
    (RUN_CORPUS.parents[1] / "run" / "trace.schema.json").read_text(encoding="utf-8")
)
_VALIDATOR_CLASS: Final = jsonschema.validators.validator_for(SCHEMA)
_VALIDATOR_CLASS.check_schema(SCHEMA)  # a broken schema fails every test that imports this
VALIDATOR: Final = _VALIDATOR_CLASS(SCHEMA)


def validate_line(instance: Any) -> None:
    """What `jsonschema.validate(instance, SCHEMA)` does, with the schema already checked:
    raises the best-matching `jsonschema.ValidationError` when `instance` is invalid."""
    error = jsonschema.exceptions.best_match(VALIDATOR.iter_errors(instance))
    if error is not None:
        raise error
