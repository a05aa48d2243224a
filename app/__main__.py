"""`python -m app` runs the `logitlab` command."""

import sys

from app.cli import main

sys.exit(main())
