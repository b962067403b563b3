"""The formats `manage.py import_memory --format` reads, each named after the product whose store
it reads. Each module defines

    def read(path: Path) -> Iterator[Item]

yielding ImportedSession / ImportedMemory / ImportedFact / ImportedNote records as it reads
(never the whole input at once), and a Skipped for anything it cannot read, with the file and
line and why (see `base`): nothing is dropped silently.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from pathlib import Path

from memoryhub.transfer.types import Item

FORMATS: dict[str, str] = {
    "memoryhub": "memoryhub.transfer.formats.memoryhub_jsonl",
    "basic-session": "memoryhub.transfer.formats.basic_session",
    "picobot": "memoryhub.transfer.formats.picobot",
    "bub": "memoryhub.transfer.formats.bub",
    "sclaw": "memoryhub.transfer.formats.sclaw",
}
# The names the formats had before they were named after their products, still accepted.
# An import records the format's own name, so a re-run under either name adds nothing.
ALIASES: dict[str, str] = {
    "seed000": "basic-session",
    "seed001": "picobot",
    "seed003": "bub",
    "seed004": "sclaw",
}


def format_name(name: str) -> str:
    """The format's own name for `name` (a name or an alias); KeyError for neither."""
    canonical = ALIASES.get(name, name)
    if canonical not in FORMATS:
        raise KeyError(name)
    return canonical


def reader_for(name: str) -> Callable[[Path], Iterator[Item]]:
    module = importlib.import_module(FORMATS[format_name(name)])
    reader: Callable[[Path], Iterator[Item]] = module.read
    return reader
