"""The audit viewer behind ``eventstore serve``: a read-only web application.

Starlette routes and Jinja2 templates over the library's public API, htmx (shipped in
``static/``) for the fragments, and charts drawn as SVG on the server: no build step and
nothing fetched from the network. Install with ``pip install "agent-eventstore[viewer]"``.
Importing this package imports Starlette and Jinja2; ``eventstore.cli.serve`` imports it
only when the command runs.
"""

from __future__ import annotations

from .app import create_app

__all__ = ["create_app"]
