"""`python -m bench`: see bench/__init__.py and bench/README.md."""

import sys

from bench.runner import main

sys.exit(main())
