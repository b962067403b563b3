"""Moving memory in and out: MemoryHub's own JSON Lines export and import, and importers for the
stores bots keep today (basic-session, PicoBot, bub, sclaw). Reads and writes every app, like
memoryhub.people and memoryhub.context."""
