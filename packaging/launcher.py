"""The bundle's entry point: the `logitlab` command (the window by default, `generate`, `models`, `bench`)."""

import multiprocessing
import sys

from app.cli.main import main

if __name__ == "__main__":
    multiprocessing.freeze_support()  # a child process of the frozen app runs its task, not a second app
    sys.exit(main())
