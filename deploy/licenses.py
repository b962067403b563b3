"""Print, as Markdown, every Python distribution installed beside this interpreter, with its
version and licence as its own metadata states it: the third-party software an image carries.

The image runs it at build time (/opt/memoryhub/THIRD_PARTY_LICENSES.md, `… licenses` prints it);
`make licenses` copies that list to THIRD_PARTY_LICENSES.md. The licence texts themselves are in
each distribution's .dist-info folder inside the image. Standard library only.
"""

from __future__ import annotations

import sys
from importlib import metadata

# Installers, not part of what runs (the image removes them; a development venv has them).
SKIP = {"pip", "setuptools", "wheel"}


def field(dist: metadata.Distribution, name: str) -> str:
    values = dist.metadata.get_all(name) or []
    return str(values[0]) if values else ""


def licence_of(dist: metadata.Distribution) -> str:
    # PEP 639's SPDX expression first, then the free-text field (often the whole licence text:
    # keep its first line), then the trove classifiers.
    expression = field(dist, "License-Expression")
    if expression:
        return expression.strip()
    text = field(dist, "License").strip()
    if text and text.upper() != "UNKNOWN":
        first = text.splitlines()[0].strip()
        return first if len(first) <= 80 else first[:77] + "..."
    classifiers = [
        c.split(" :: ")[-1]
        for c in dist.metadata.get_all("Classifier") or []
        if c.startswith("License ::")
    ]
    return ", ".join(classifiers) or "see its licence files"


def main() -> None:
    rows: dict[str, tuple[str, str, str, str]] = {}
    for dist in metadata.distributions():
        name = field(dist, "Name")
        if not name or name.lower() in SKIP:
            continue
        home = field(dist, "Home-page")
        if not home:
            for url in dist.metadata.get_all("Project-URL") or []:
                label, _, link = url.partition(",")
                if label.strip().lower() in {"homepage", "home", "source", "repository"}:
                    home = link.strip()
                    break
        rows[name.lower()] = (name, dist.version, licence_of(dist).replace("|", "/"), home)
    out = sys.stdout
    out.write("# Third-party licences\n\n")
    out.write(
        "The Python distributions the MemoryHub container image carries (generated from their "
        "metadata at image build time by `deploy/licenses.py`; `make licenses` refreshes this "
        "file). Each one's licence text is in its `.dist-info` folder under `/opt/venv`. The "
        "base image's Debian packages carry theirs in `/usr/share/doc/*/copyright`.\n\n"
    )
    out.write(f"Python {sys.version.split()[0]}; {len(rows)} distributions.\n\n")
    out.write("| distribution | version | licence | home |\n| --- | --- | --- | --- |\n")
    for _, (name, version, licence, home) in sorted(rows.items()):
        out.write(f"| {name} | {version} | {licence} | {home} |\n")


if __name__ == "__main__":
    main()
