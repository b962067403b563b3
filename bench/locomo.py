"""LoCoMo's development half, read where it lies: conversations, turns, questions, evidence.

The file (`../shared/data/locomo-dev/locomo-dev.json` beside the repository) is CC BY-NC 4.0 and
must never be copied into this repository, its tests or fixtures: everything here reads it at run
time and keeps it in memory only. Standard library only, so any bench script can import it
without Django, numpy or the recall engine.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "locomo-dev" / "locomo-dev.json"
# The scored categories; 5 (adversarial: the answer is not in the conversation) is left out.
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}

_SESSION = re.compile(r"session_(\d+)")
_EVIDENCE = re.compile(r"D:?(\d+):0*(\d+)")


def normalise_evidence(raw: Sequence[str]) -> list[str]:
    """ "D8:6; D9:17" → ["D8:6", "D9:17"]; "D:11:26" → "D11:26"; "D30:05" → "D30:5"."""
    found: list[str] = []
    for entry in raw:
        for match in _EVIDENCE.finditer(entry):
            dia_id = f"D{int(match[1])}:{int(match[2])}"
            if dia_id not in found:
                found.append(dia_id)
    return found


def parse_session_date(text: str) -> datetime:
    """LoCoMo's "1:56 pm on 8 May, 2023", naive (the data names no time zone)."""
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y")


def photo_text(turn: dict[str, Any]) -> str:
    """The turn's text, with the photo it shares described as the study measured it."""
    text = str(turn["text"])
    if turn.get("blip_caption"):
        text = f"{text} [shares a photo of {turn['blip_caption']}]"
    return text


@dataclass(frozen=True)
class Turn:
    dia_id: str  # "D3:12": session 3, turn 12
    speaker: str
    text: str  # as said, without the photo caption
    stored_text: str  # what is stored: with the caption when captions are on


@dataclass(frozen=True)
class LocomoSession:
    number: int  # LoCoMo's session_N
    started_at: datetime  # the session's date and time, taken as UTC
    turns: list[Turn]


@dataclass(frozen=True)
class Question:
    text: str
    category: int  # 1-4 (see CATEGORIES)
    evidence: list[str]  # normalised dia_ids, only those naming a turn of the conversation


@dataclass(frozen=True)
class Conversation:
    sample_id: str
    speaker_a: str
    speaker_b: str
    sessions: list[LocomoSession]
    questions: list[Question]  # categories 1-4 with at least one known evidence turn
    skipped_questions: int  # categories 1-4 whose evidence names no turn of the conversation

    def turns(self) -> dict[str, Turn]:
        return {turn.dia_id: turn for session in self.sessions for turn in session.turns}


def conversation_from(sample: dict[str, Any], *, captions: bool = True) -> Conversation:
    conversation = sample["conversation"]
    numbered = sorted(
        (int(match[1]), key)
        for key in conversation
        if (match := _SESSION.fullmatch(key)) and isinstance(conversation[key], list)
    )
    sessions = [
        LocomoSession(
            number=number,
            started_at=parse_session_date(conversation[f"{key}_date_time"]).replace(tzinfo=UTC),
            turns=[
                Turn(
                    dia_id=turn["dia_id"],
                    speaker=turn["speaker"],
                    text=turn["text"],
                    stored_text=photo_text(turn) if captions else turn["text"],
                )
                for turn in conversation[key]
            ],
        )
        for number, key in numbered
    ]
    known = {turn.dia_id for session in sessions for turn in session.turns}
    questions: list[Question] = []
    skipped = 0
    for item in sample["qa"]:
        category = item.get("category")
        if category not in CATEGORIES:
            continue
        gold = [
            dia_id for dia_id in normalise_evidence(item.get("evidence", [])) if dia_id in known
        ]
        if not gold:
            skipped += 1
            continue
        questions.append(Question(text=item["question"], category=category, evidence=gold))
    return Conversation(
        sample_id=sample["sample_id"],
        speaker_a=conversation["speaker_a"],
        speaker_b=conversation["speaker_b"],
        sessions=sessions,
        questions=questions,
        skipped_questions=skipped,
    )


def load(path: Path = DEFAULT_DATA, *, captions: bool = True) -> list[Conversation]:
    if not path.exists():
        raise FileNotFoundError(
            f"No LoCoMo data at {path} (see ../shared/data/locomo-dev/README.md)."
        )
    return [conversation_from(sample, captions=captions) for sample in json.loads(path.read_text())]
