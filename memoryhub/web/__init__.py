"""The web UI's shared parts: login, which tenant a page is about, the dashboard, the layout.
Each app's pages live in its own views.py (DESIGN.md §2) and use `tenant_page` from here."""
