"""One module per part of the benchmark; `--only` names them (bench.config.PARTS).

Each part module offers the same few functions, which bench/runner.py calls in the report's order:
- sizes_line(config): its piece of the header's "sizes" line;
- run(setup, server): the timed part and its section of the report, returning its result
  (llm, recall, import: run(setup), on a server of their own or none);
- record(result, setup): its entries in bench/results/<time>.json;
- profile(setup, client): its in-process profiles (not cleanup);
- summary(result, config, profiles): its lines in the closing summary;
- verdicts(result, config): its rows of the closing targets' table (bench.measure.Verdict).
Data a part needs before gunicorn starts (sessions, facts, policy tenants) comes from its
ensure_* functions, called by runner.prepare.
"""
