"""THIRD_PARTY_LICENSES.md names every distribution the container image carries.

The image installs `[project].dependencies` of pyproject.toml and what they need; the file is
generated inside the image (`make licenses`), which this suite cannot build. So this checks
names, not versions: the dependencies are ranges, and the development venv and the wheelhouse
resolve them on different days (a newer certifi is not a new licence). A dependency added to
pyproject.toml without `make licenses` fails here."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
ROW = re.compile(r"^\| ([^|]+?) \| ([^|]+?) \|")


def listed_distributions() -> set[str]:
    text = (ROOT / "THIRD_PARTY_LICENSES.md").read_text(encoding="utf-8")
    names = {match.group(1) for line in text.splitlines() if (match := ROW.match(line))}
    return {canonicalize_name(name) for name in names - {"distribution", "---"}}


def runtime_closure(requirements: list[str]) -> set[str]:
    """The distributions these requirements install here, with the extras they ask for."""
    found: set[str] = set()
    todo = [(Requirement(line), "") for line in requirements]
    while todo:
        requirement, extra = todo.pop()
        if requirement.marker and not requirement.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(requirement.name)
        wanted = [(name, "")] + [(name, e) for e in sorted(requirement.extras)]
        for dist_name, dist_extra in wanted:
            key = f"{dist_name}[{dist_extra}]"
            if key in found:
                continue
            found.add(key)
            for line in metadata.distribution(dist_name).requires or []:
                todo.append((Requirement(line), dist_extra))
    return {key.partition("[")[0] for key in found}


def test_every_runtime_dependency_is_in_the_third_party_licences() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    needed = runtime_closure(pyproject["project"]["dependencies"])

    missing = needed - listed_distributions()

    assert len(needed) > 50  # the closure was walked, not just the top level
    assert not missing, f"run `make licenses`: not in THIRD_PARTY_LICENSES.md: {sorted(missing)}"


def test_the_closure_follows_extras_and_markers() -> None:
    closure = runtime_closure(["celery[redis]>=5", 'tomli; python_version < "3.0"'])

    assert {"celery", "kombu", "redis"} <= closure
    assert "tomli" not in closure
