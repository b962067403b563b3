"""Semantic memory (UserMemory, Fact, Note) arrives with the long-term memory issue."""
