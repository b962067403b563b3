"""The API's JSON parser: DRF's, refusing at the edge what no field could store.

Checked once over the whole body, so no endpoint can forget it: nesting deeper than
`JSON_MAX_DEPTH` (Python's decoder recurses, and deep values break admin pages and the database
later), numbers that are not finite (`1e400` parses as infinity, which JSON columns refuse), and
strings that are not valid Unicode (a lone surrogate such as "\\ud800" cannot be encoded for
the database). Each is a 400 with its own code.
"""

from __future__ import annotations

import codecs
import json
import math
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser


class JsonRefused(ParseError):
    def __init__(self, message: str, code: str) -> None:
        super().__init__(detail=message, code=code)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JsonRefused(f"The number {text[:40]} is too large.", "number_out_of_range")
    return value


def _no_constant(name: str) -> Any:
    raise JsonRefused(f"{name} is not a JSON number.", "number_out_of_range")


def json_value_check(value: Any, *, max_depth: int) -> None:
    """Walk a decoded JSON value without recursion; raise JsonRefused on the first problem."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > max_depth:
                raise JsonRefused(f"JSON nested deeper than {max_depth} levels.", "json_too_deep")
            children = item.items() if isinstance(item, dict) else enumerate(item)
            for key, child in children:
                if isinstance(key, str):
                    _text_check(key)
                stack.append((child, depth + 1))
        elif isinstance(item, str):
            _text_check(item)


def _text_check(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise JsonRefused(
            "The request holds text that is not valid Unicode (a lone surrogate).",
            "invalid_unicode",
        ) from None


class SafeJSONParser(JSONParser):
    def parse(
        self,
        stream: Any,
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            text = codecs.getreader(encoding)(stream).read()
            data = json.loads(text, parse_float=_finite_float, parse_constant=_no_constant)
        except JsonRefused:
            raise
        except RecursionError:
            raise JsonRefused("JSON nested too deeply.", "json_too_deep") from None
        except (ValueError, UnicodeDecodeError) as error:
            raise ParseError(f"JSON parse error - {error}") from None
        json_value_check(data, max_depth=int(settings.MEMORYHUB_LIMITS["JSON_MAX_DEPTH"]))
        return data
