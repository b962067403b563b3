"""The formats `manage.py import_memory --format` reads. Each module defines

    def read(path: Path) -> Iterator[Item]

yielding ImportedSession / ImportedMemory / ImportedFact / ImportedNote records as it reads
(never the whole input at once), and a Skipped for anything it cannot read, with the file and
line and why: nothing is dropped silently.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from pathlib import Path

from memoryhub.transfer.types import Item

FORMATS: dict[str, str] = {
    "memoryhub": "memoryhub.transfer.formats.memoryhub_jsonl",
    "seed000": "memoryhub.transfer.formats.seed000",
    "seed001": "memoryhub.transfer.formats.seed001",
    "seed003": "memoryhub.transfer.formats.seed003",
    "seed004": "memoryhub.transfer.formats.seed004",
}


def reader_for(name: str) -> Callable[[Path], Iterator[Item]]:
    module = importlib.import_module(FORMATS[name])
    reader: Callable[[Path], Iterator[Item]] = module.read
    return reader
