"""A griffe extension for the API reference: Sphinx cross-reference roles as code.

The docstrings name other objects the Sphinx way (:class:`~eventstore.EventStore`,
:func:`export_jsonl`), which Markdown would show with the role's name in front. Each
becomes a code span with the name as Sphinx would print it (the last component after ``~``).
Loaded by mkdocstrings from ``mkdocs.yml``; not part of the site.
"""

from __future__ import annotations

import re
from typing import Any

from griffe import Extension, Object

_ROLE = re.compile(r":(?:class|func|meth|data|attr|mod|exc|obj):`(~?)([^`]+)`")


def _code(match: re.Match[str]) -> str:
    short, target = match.group(1), match.group(2)
    return f"`{target.rsplit('.', 1)[-1] if short else target}`"


class SphinxRoles(Extension):
    """Rewrites every object's docstring once it is loaded."""

    def on_instance(self, *, obj: Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _ROLE.sub(_code, obj.docstring.value)
