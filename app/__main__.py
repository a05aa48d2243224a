"""`python -m app` runs the `logitlab` command."""

from app.cli.main import entry

entry()
