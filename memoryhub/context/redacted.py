"""Recall-time redaction of a context's inputs (issue 17): data stored before the policy's
redaction was switched on is masked on its way out, before the budget is counted."""

from __future__ import annotations

from dataclasses import replace

from memoryhub.context.types import ContextInputs, HistoryHit, HistoryTurn, MessageItem
from memoryhub.core.redaction import Redactor


def _turn(turn: HistoryTurn, redact: Redactor) -> HistoryTurn:
    return replace(turn, content=redact(turn.content))


def _hit(hit: HistoryHit, redact: Redactor) -> HistoryHit:
    return replace(
        hit,
        turn=_turn(hit.turn, redact),
        neighbours=tuple(_turn(turn, redact) for turn in hit.neighbours),
    )


def _message(item: MessageItem, redact: Redactor) -> MessageItem:
    content = redact(item.content)
    if content == item.content:
        return item
    # The stored count is the unmasked text's: the assembler counts the masked one.
    return replace(item, content=content, token_count=None)


def inputs_redacted(*, inputs: ContextInputs, redact: Redactor) -> ContextInputs:
    """Every text of `inputs` through `redact`: memories, facts, notes, the summary, the
    recent messages and the recalled history."""
    return replace(
        inputs,
        tenant_memories=[replace(m, content=redact(m.content)) for m in inputs.tenant_memories],
        user_memories=[replace(m, content=redact(m.content)) for m in inputs.user_memories],
        facts=[replace(fact, content=redact(fact.content)) for fact in inputs.facts],
        long_term_note=(
            replace(inputs.long_term_note, content=redact(inputs.long_term_note.content))
            if inputs.long_term_note
            else None
        ),
        today_note=(
            replace(inputs.today_note, content=redact(inputs.today_note.content))
            if inputs.today_note
            else None
        ),
        recent_notes=[replace(note, content=redact(note.content)) for note in inputs.recent_notes],
        summary=(
            replace(inputs.summary, text=redact(inputs.summary.text)) if inputs.summary else None
        ),
        messages=[_message(item, redact) for item in inputs.messages],
        history=[_hit(hit, redact) for hit in inputs.history],
    )
