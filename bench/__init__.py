"""MemoryHub benchmark: the API against raw psycopg, on PostgreSQL. Run it as `python -m bench`.

    .venv/bin/python -m bench            # quick: 4 x 300 appends, a 100,000-message session,
                                         #   100,000 facts across 1,000 users
    .venv/bin/python -m bench --big      # 4 x 1,000 appends, a 1,000,000-message session,
                                         #   1,000,000 facts across 10,000 users
    .venv/bin/python -m bench --only facts   # one part only (see bench/parts/)

It serves the API the way production does (gunicorn, several workers, DEBUG off) and measures
each part in bench/parts/ (appends, reads, facts, context, llm, cleanup, recall, import), then
profiles one request of each in-process (Django's WSGI handler, no HTTP): each DB statement's time
and where the Python time goes; it ends with one table of every target (issue 18). It connects as
a plain role (row-level security applies, as in production), created with its database by a
superuser (--admin-url) when missing.

- config.py: the options and sizes; measure.py: timing, percentiles, CPU and the report's
  lines; harness.py: database, Django, broker, tenants and keys, gunicorn, the HTTP client;
  profiling.py: the in-process profiler; runner.py: the run, in order, and the summary.
- bench/prune_worker.py and bench/import_memory.py are scripts of their own (the cleanup part
  starts the first; the import part runs the second as a subprocess).

It is a report: the exit code is 0 unless something broke. See bench/README.md.
"""
