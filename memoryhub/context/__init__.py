"""Context assembly (DESIGN.md §5): a pure function over inputs gathered by selectors.

A plain package, not a Django app: no models. `assemble`, `render` and `types` touch no
database and no settings; `gather` is the one module that reads (both apps), like DESIGN says.
"""

from memoryhub.context.assemble import (
    assemble_context,
    count_message_tokens,
    messages_token_count,
    render_markdown,
    render_messages,
)
from memoryhub.context.types import (
    AssembledContext,
    Budget,
    ContextInputs,
    FactItem,
    HistoryHit,
    HistoryTurn,
    MemoryItem,
    MessageItem,
    NoteItem,
    SectionReport,
    SummaryItem,
)

__all__ = [
    "AssembledContext",
    "Budget",
    "ContextInputs",
    "FactItem",
    "HistoryHit",
    "HistoryTurn",
    "MemoryItem",
    "MessageItem",
    "NoteItem",
    "SectionReport",
    "SummaryItem",
    "assemble_context",
    "count_message_tokens",
    "messages_token_count",
    "render_markdown",
    "render_messages",
]
