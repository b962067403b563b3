"""`manage.py embeddings_prepare`: make the first search of a fresh install as quick as the rest.

With the ONNX backend, the first query of a process loads the model and, with
EMBEDDINGS_QUERY_PRECISION=int8, derives the int8 query copy into EMBEDDINGS_CACHE_DIR once
(1.5-2.5 s). `make run` and the container image's build run this, so that no one's first search
waits for it.
"""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from memoryhub.llm.embeddings import OnnxMiniLMEmbedder, get_embedder


class Command(BaseCommand):
    help = (
        "Load the ONNX embedding model and derive its int8 query copy into "
        "EMBEDDINGS_CACHE_DIR if it is not there yet. Nothing to do for the openai backend "
        "(a remote endpoint) or with embeddings off. Safe to repeat."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        embedder = get_embedder()
        if not isinstance(embedder, OnnxMiniLMEmbedder):
            backend = settings.EMBEDDINGS_BACKEND
            self.stdout.write(f"EMBEDDINGS_BACKEND={backend}: nothing to prepare.")
            return
        started = time.perf_counter()
        embedder.embed_query("ready")
        elapsed = time.perf_counter() - started
        self.stdout.write(
            f"{embedder.model_name}: queries in {embedder.query_precision} ready in "
            f"{elapsed:.1f} s (EMBEDDINGS_CACHE_DIR={settings.EMBEDDINGS_CACHE_DIR})."
        )
