"""``python -m eventstore``: the command line, as the ``eventstore`` script runs it."""

from __future__ import annotations

from .cli import main

if __name__ == "__main__":
    main()
