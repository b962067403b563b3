"""The API's JSON renderer: DRF's JSONRenderer, with orjson doing the encoding.

orjson encodes a response several times faster than the standard library (it was a visible
part of every request's profile). The bytes stay what DRF's renderer writes, parsed alike:

- what orjson would format its own way goes to DRF's encoder (`JSONEncoder.default`) instead:
  dates and times (DRF writes UTC as `Z`), dataclasses; what orjson cannot encode goes there
  too (Decimal as a number, lazy translations, sets, generators, numpy values, bytes);
- anything orjson refuses outright (an integer beyond 64 bits, a key that is not a string,
  nesting past its limit) is rendered by DRF's renderer, whole, as before;
- an indented response (`Accept: application/json; indent=4`) or a non-default DRF setting
  (UNICODE_JSON off, COMPACT_JSON off) is DRF's too;
- U+2028 and U+2029 are escaped as DRF does (valid JSON either way, but not valid JavaScript).

The one difference: a float that is not finite (NaN, infinity) becomes `null` where DRF's
strict renderer raised (a 500). The parser (core.parsers) refuses such numbers on the way in.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import orjson
from rest_framework.renderers import JSONRenderer
from rest_framework.utils.encoders import JSONEncoder

logger = logging.getLogger(__name__)

_OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
_LINE_SEPARATOR = "\u2028".encode()
_PARAGRAPH_SEPARATOR = "\u2029".encode()
_default = JSONEncoder().default


class OrjsonRenderer(JSONRenderer):
    """DRF's JSONRenderer (media type, format, indent handling), encoded by orjson."""

    def render(
        self,
        data: Any,
        accepted_media_type: str | None = None,
        renderer_context: Mapping[str, Any] | None = None,
    ) -> bytes:
        if data is None:
            return b""
        if (
            self.ensure_ascii
            or not self.compact
            or self.get_indent(accepted_media_type or "", dict(renderer_context or {})) is not None
        ):
            return self._drf(data, accepted_media_type, renderer_context)
        try:
            rendered = orjson.dumps(data, default=_default, option=_OPTIONS)
        except (orjson.JSONEncodeError, TypeError, ValueError):
            # DRF's renderer decides: it encodes what orjson cannot (a huge integer), and
            # fails as it always did on what neither can.
            return self._drf(data, accepted_media_type, renderer_context)
        if _LINE_SEPARATOR in rendered or _PARAGRAPH_SEPARATOR in rendered:
            rendered = rendered.replace(_LINE_SEPARATOR, b"\\u2028").replace(
                _PARAGRAPH_SEPARATOR, b"\\u2029"
            )
        return rendered

    def _drf(
        self,
        data: Any,
        accepted_media_type: str | None,
        renderer_context: Mapping[str, Any] | None,
    ) -> bytes:
        rendered: bytes = super().render(data, accepted_media_type, renderer_context)
        return rendered
