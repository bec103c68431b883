"""Alembic environment.

Code passes an open connection through ``config.attributes["connection"]`` (see
``eventstore.migrate``); the command line passes a URL with ``-x url=...`` or
``EVENTSTORE_URL``. SQLite runs in batch mode so that ALTERs work there too.
"""

from __future__ import annotations

import os

from alembic import context
from sqlalchemy import create_engine

from eventstore.schema import metadata

config = context.config


def _run(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = (
        context.get_x_argument(as_dictionary=True).get("url")
        or os.environ.get("EVENTSTORE_URL")
        or "sqlite:///eventstore.db"
    )
    engine = create_engine(url)
    with engine.connect() as conn:
        _run(conn)
        conn.commit()
    engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline (--sql) migrations are not supported; pass a database URL")
run_online()
