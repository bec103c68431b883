"""The ``eventstore`` command line.

Every command takes the database from ``--db`` (or ``EVENTSTORE_URL``, default
``sqlite:///eventstore.db``) and works inside one ``--tenant`` (default ``default``).
Commands that print data print it for people by default and as JSON with ``--json``.
Errors go to stderr with what to do about them, and the exit status is non-zero.

Only ``click`` is imported at module level: the store, SQLAlchemy, pydantic, rich, Alembic,
litellm and the condensers are imported inside the commands that need them, so
``eventstore --help`` answers at once.

Modules:

* :mod:`.root`: the root group, its options and state, error handling, :func:`main`;
* :mod:`.render`: JSON emission, previews, full events, progress bars;
* :mod:`.db`: ``db upgrade/current/check``;
* :mod:`.sessions`: ``sessions list/show/fork``, ``verify``, ``export``, ``import``, ``stats``;
* :mod:`.inspect`: ``log`` and ``view``;
* :mod:`.condense`: ``condense`` and ``prune``;
* :mod:`.runtime`: ``enqueue``, ``pending``, ``dequeue``, ``cancel`` and ``tail``;
* :mod:`.demo`: ``demo`` (the replay), with :mod:`.demo_script` (the generated session)
  and :mod:`.demo_report` (its numbers, re-derived from the store, and their rendering);
* :mod:`.serve`: ``serve``, the read-only web viewer in :mod:`.viewer` (the ``viewer`` extra);
* :mod:`.mcp`: ``mcp``, the read-only MCP server in :mod:`.mcp_server` (the ``mcp`` extra).
* :mod:`.watch`: ``watch``, following coding-agent transcripts as they grow.
"""

from __future__ import annotations

# Importing a command module registers its commands on the root group.
from . import condense, db, demo, inspect, mcp, runtime, serve, sessions, watch  # noqa: F401
from .root import cli, main

__all__ = ["main", "cli"]
