"""Id checks for the paths the client does not see (the streams), worded as the client words them."""

from __future__ import annotations

from tasks.client import ValidationError
from tasks.store import keys


def check_id(value: str, what: str) -> str:
    """`value` if it is a valid chat/run id, else the client's ValidationError (so a 422 with its message)."""
    if not keys.ID_PATTERN.fullmatch(value):  # fullmatch: `$` alone would let "id\n" through
        raise ValidationError(
            f"{what} must be 1-128 characters of letters, digits, '.', '_' or '-', starting with a letter or digit;"
            f" got {value!r}"
        )
    return value
