"""The orjson renderer (core.renderers) writes what DRF's JSONRenderer writes."""

import dataclasses
import datetime as dt
import decimal
import json
import uuid
from unittest import mock

import numpy as np
import pytest
from django.utils.functional import lazy
from django.utils.translation import gettext_lazy
from rest_framework.exceptions import ErrorDetail
from rest_framework.renderers import JSONRenderer
from rest_framework.settings import api_settings
from rest_framework.utils.serializer_helpers import ReturnDict, ReturnList

from memoryhub.accounts.models import ApiKeyScope
from memoryhub.core.renderers import OrjsonRenderer

UTC = dt.UTC
BERLIN = dt.timezone(dt.timedelta(hours=2))


def both(data, accepted_media_type=None):
    return (
        OrjsonRenderer().render(data, accepted_media_type, {}),
        JSONRenderer().render(data, accepted_media_type, {}),
    )


@dataclasses.dataclass
class Point:
    x: int


EDGE_CASES = {
    "huge int": 2**70,
    "huge negative int": -(2**70),
    "int at the 64-bit edge": [2**63 - 1, -(2**63), 2**64 - 1],
    "error detail": ErrorDetail("This field is required.", code="required"),
    "error details in a dict": {"user_id": [ErrorDetail("Bad.", code="invalid")]},
    "lazy translation": gettext_lazy("This field is required."),
    "lazy string": lazy(lambda: "later", str)(),
    "decimal": decimal.Decimal("12.50"),
    "utc datetime": dt.datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC),
    "offset datetime": dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=BERLIN),
    "naive datetime": dt.datetime(2026, 1, 2, 3, 4, 5),
    "date": dt.date(2026, 1, 2),
    "time": dt.time(3, 4, 5, 6),
    "timedelta": dt.timedelta(minutes=90),
    "uuid": uuid.UUID("0190c3c4-7d5e-7abc-8def-0123456789ab"),
    "tuple": (1, "two", None),
    "set": {"only"},
    "frozenset": frozenset({3}),
    "generator": (n * n for n in range(3)),
    "bytes": b"raw",
    "text choice": ApiKeyScope.READ,
    "numpy": {"array": np.array([1.5, 2.5]), "float32": np.float32(0.1), "int": np.int64(7)},
    "unicode": "Grüße, 日本, emoji 🙂",
    "line separators": "a\u2028b\u2029c",
    "floats": [0.1, 1e16, 1e-4, 123456.789, -0.0, 1.5e300],
    "bool and null": [True, False, None],
    "non-string keys": {1: "one", None: "none", False: "no"},
    "return dict and list": ReturnDict(
        {"results": ReturnList([{"a": 1}], serializer=None)}, serializer=None
    ),
    "nested": {
        "results": [
            {
                "id": uuid.uuid4(),
                "created_at": dt.datetime(2026, 5, 6, 7, 8, 9, 123000, tzinfo=UTC),
                "metadata": {"score": decimal.Decimal("0.5"), "deep": [[[{"k": "v"}]]]},
            }
        ],
        "next": None,
    },
    "deep nesting": json.loads("[" * 300 + "]" * 300),
    "empty": {},
}


@pytest.mark.parametrize("data", EDGE_CASES.values(), ids=EDGE_CASES.keys())
def test_it_writes_what_drfs_renderer_writes(data):
    if hasattr(data, "__next__"):
        # A generator is used up by the first render: give each renderer its own.
        ours = OrjsonRenderer().render(n * n for n in range(3))
        theirs = JSONRenderer().render(n * n for n in range(3))
    else:
        ours, theirs = both(data)

    assert ours == theirs


def test_it_escapes_the_javascript_line_separators():
    assert OrjsonRenderer().render({"t": "a\u2028b"}) == b'{"t":"a\\u2028b"}'


def test_utc_is_written_as_z():
    rendered = OrjsonRenderer().render({"at": dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)})

    assert rendered == b'{"at":"2026-01-02T03:04:05Z"}'


def test_orjson_does_the_common_case():
    # Not a silent fallback every time: plain data never reaches DRF's renderer.
    with mock.patch.object(JSONRenderer, "render", side_effect=AssertionError("fell back")):
        rendered = OrjsonRenderer().render({"id": uuid.UUID(int=1), "n": [1, 2.5, "x"]})

    assert json.loads(rendered) == {"id": str(uuid.UUID(int=1)), "n": [1, 2.5, "x"]}


def test_an_aware_time_fails_as_it_did():
    aware = dt.time(3, 4, tzinfo=UTC)

    with pytest.raises(ValueError, match="timezone-aware"):
        JSONRenderer().render({"t": aware})
    with pytest.raises(ValueError, match="timezone-aware"):
        OrjsonRenderer().render({"t": aware})


@pytest.mark.parametrize("value", [object(), Point(1)], ids=["object", "dataclass"])
def test_an_unknown_object_fails_as_it_did(value):
    with pytest.raises(TypeError, match="is not JSON serializable"):
        JSONRenderer().render({"o": value})
    with pytest.raises(TypeError, match="is not JSON serializable"):
        OrjsonRenderer().render({"o": value})


def test_small_exponents_differ_only_in_spelling():
    # orjson writes 1e-7 where Python writes 1e-07: the same number to every JSON parser.
    ours, theirs = both([1e-7, 2.5e-10])

    assert (ours, theirs) == (b"[1e-7,2.5e-10]", b"[1e-07,2.5e-10]")
    assert json.loads(ours) == json.loads(theirs)


def test_none_is_an_empty_body():
    assert OrjsonRenderer().render(None) == b""


def test_an_indented_response_is_drfs():
    data = {"a": [1, {"b": 2}]}
    ours, theirs = both(data, "application/json; indent=4")

    assert ours == theirs
    assert b"\n    " in ours


def test_the_setting_uses_it():
    assert [OrjsonRenderer] == api_settings.DEFAULT_RENDERER_CLASSES


@pytest.fixture
def compared(monkeypatch):
    """Every response rendered during the test, rendered again by DRF's renderer."""
    pairs = []
    render = OrjsonRenderer.render

    def recording(self, data, accepted_media_type=None, renderer_context=None):
        ours = render(self, data, accepted_media_type, renderer_context)
        theirs = JSONRenderer().render(data, accepted_media_type, renderer_context)
        pairs.append((ours, theirs))
        return ours

    monkeypatch.setattr(OrjsonRenderer, "render", recording)
    return pairs


def test_real_responses_are_byte_for_byte_drfs(api, outsider_api, compared):
    session = api.post("/api/v1/sessions/", {"user_id": "u1", "agent_id": "a"}, format="json")
    sid = session.json()["id"]
    base = f"/api/v1/sessions/{sid}"
    api.post(
        f"{base}/messages/",
        {"role": "user", "content": "Hello 🙂 about\u2028memory", "metadata": {"n": 2**40}},
        format="json",
    )
    api.post(
        f"{base}/messages/",
        [{"role": "assistant", "content": "Hi"}, {"role": "user", "content": "Où?"}],
        format="json",
    )
    calls = [
        api.get("/api/v1/sessions/"),
        api.get(f"{base}/"),
        api.get(f"{base}/messages/", {"last": 20}),
        api.put(f"{base}/state/plan/", {"value": {"steps": [1, 2.5, None]}}, format="json"),
        api.get(f"{base}/state/"),
        api.get(f"{base}/context/"),
        api.post("/api/v1/facts/", {"content": "Likes tea", "user_id": "u1"}, format="json"),
        api.get("/api/v1/facts/search/", {"q": "tea", "user_id": "u1"}),
        api.put(
            "/api/v1/users/u1/memories/color/",
            {"content": "Likes blue", "pinned": True},
            format="json",
        ),
        api.get("/api/v1/users/u1/memories/"),
        api.get("/api/v1/users/"),
        # Errors: validation (ErrorDetail), not found, unauthenticated, malformed JSON.
        api.post(f"{base}/messages/", {"role": "nobody"}, format="json"),
        api.get(f"{base}/messages/", {"last": "x"}),
        outsider_api.get(f"{base}/"),
        api.post("/api/v1/sessions/", "{bad", content_type="application/json"),
        api.__class__().get("/api/v1/sessions/"),
    ]

    assert all(call.status_code < 300 for call in calls[:11]), [c.status_code for c in calls]
    assert all(call.status_code >= 400 for call in calls[11:])
    assert len(compared) >= len(calls)
    for ours, theirs in compared:
        assert ours == theirs
