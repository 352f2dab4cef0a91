"""JSON text that every strict parser reads: no NaN or Infinity, no string that is not Unicode.

Python's json writes NaN and Infinity (not JSON: a browser's JSON.parse refuses the whole
answer) and writes a file name's surrogate escapes (bytes that are not UTF-8, store/names.py) as
`\\udce9`, text no UTF-8 reader can hold. Values reach the answers from files other programs
wrote (a lease with `"expires": Infinity`) and from the work directory's names, so every answer
of the API, its websockets and `--json` on the command line goes through here: a non-finite
number becomes null, a string holding surrogates is written as names.shown() writes it.
"""

from __future__ import annotations

import json
import math
from typing import Any

from .store.names import encodable, shown


def plain(value: Any) -> Any:
    """`value` with only what strict JSON holds: non-finite floats as None, strings (and keys)
    holding surrogates in their shown form, tuples as lists, any other object as its text."""
    if isinstance(value, str):
        return value if encodable(value) else shown(value)
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {_key(key): plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return plain(str(value))  # what default=str gave before: a time, a path, an enum


def dumps(value: Any, **options: Any) -> str:
    """`value` as strict JSON text; `options` as for json.dumps (indent, separators)."""
    return json.dumps(plain(value), allow_nan=False, **options)


def _key(key: Any) -> Any:
    if isinstance(key, str):
        return plain(key)
    if isinstance(key, float) and not math.isfinite(key):
        return None  # json writes a None key as "null"; NaN would become the key "NaN"
    return key if key is None or isinstance(key, (bool, int, float)) else plain(str(key))


def loads(data: bytes | str) -> Any:
    """JSON that another program wrote, read strictly: UTF-8, no NaN or Infinity, no number too
    large for a float, no object naming a key twice (parsers disagree on which one wins); nesting
    too deep for the parser is a ValueError like any other fault,
    never a RecursionError that would escape its caller. The message says what is wrong."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as err:
            raise ValueError(f"not UTF-8 text ({err.reason} at byte {err.start})") from None
    try:
        return json.loads(
            data,
            parse_constant=refuse_constant,
            parse_float=finite_float,
            object_pairs_hook=unique_keys,
        )
    except RecursionError:
        raise ValueError("not JSON: nested too deeply") from None
    except ValueError as err:
        raise ValueError(f"not strict JSON: {err}") from None


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json.loads's object_pairs_hook: an object that names a key twice is refused. Python keeps
    the last, other readers the first: a record signed as one object could be read as another."""
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                break
            seen.add(key)
        raise ValueError(f"the key {key[:40]!r} is given twice in one object")
    return value


def refuse_constant(name: str) -> Any:
    """json.loads's parse_constant: NaN, Infinity and -Infinity are not JSON."""
    raise ValueError(f"{name} is not a JSON number")


def finite_float(text: str) -> float:
    """json.loads's parse_float: a number too large for a float is refused, not infinity."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:40]} is too large a number")
    return value
