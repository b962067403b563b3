"""MemoryHub: a self-hosted memory service for chat bots and AI agents."""

import os

# One BLAS thread per process, set before numpy loads: the recall engine's vector products are
# small, and OpenBLAS's extra threads spin while they wait. Measured with `make bench --only
# recall` on 2 cores: hybrid search p95 40 ms with the default threads, 15 ms with one; the
# context call 48 ms → 19 ms. Web and worker processes are already one per core. An operator can
# still set these variables in the environment.
for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

from memoryhub.celery import app as celery_app  # noqa: E402 (after the BLAS threads are set)

__all__ = ["celery_app"]
