"""Pages of semantic memory.

The search page (`facts_pages:search`, /search/) reads facts *and* messages, and facts_app must
not import sessions_app (DESIGN.md §2), so its view lives in memoryhub.web.search, which may
read both apps; facts_app/urls.py only routes to it. Its fact filters are facts_app.forms.
"""
