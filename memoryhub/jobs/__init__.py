"""Job visibility: the state of each session's background work (summary, fact extraction,
embedding) for its API, its page and the dashboard."""
