"""`python -m app` runs the `logitlab` command."""

import sys

from app.cli.main import main

sys.exit(main())
