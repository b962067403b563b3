"""Recall of a person's past conversation turns: a windowed BM25 index, optional dense vectors,
and the measured priors (shared/research/retrieval.md). Pure Python and numpy; no models, no
database: callers load the messages, build an index per person, and cache it."""

from memoryhub.core.recall.hybrid import H5, L5, Hit, Mode, Signals, Weights, rank
from memoryhub.core.recall.index import RecallDoc, RecallIndex

__all__ = ["H5", "L5", "Hit", "Mode", "RecallDoc", "RecallIndex", "Signals", "Weights", "rank"]
