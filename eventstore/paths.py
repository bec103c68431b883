"""File names in text: what the summaries list as files and what a cut names.

One rule for what counts as a file path, shared by the extractive summary (its inventory
of files) and by the view's cut of a tool call's arguments (whose marker names the files
the omitted part mentioned): a token with a slash and a letter, or a bare name with a
typical source, documentation, configuration or data extension.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

__all__ = ["FILE_EXTENSIONS", "PATH_KEYS", "looks_like_path", "path_spans", "paths_in_value"]

PATH_KEYS = frozenset(
    {"path", "file", "filename", "file_path", "filepath", "paths", "files", "target"}
)
"""Argument keys whose one-line string values are file paths, whatever they look like."""

# A directory keeps its trailing slash (``./src/pkg/``): the slash is part of how it was named.
_PATH_RE = re.compile(
    r"(?<![\w.:/-])(?:~|\.{1,2})?/?(?:[\w.@+-]+/)+(?:[\w.@+-]+)?|[\w@+-]+\.[A-Za-z]\w{0,5}\b"
)

FILE_EXTENSIONS = frozenset(
    """
    py pyi pyx ipynb c h cc cpp cxx hpp hh m mm rs go java kt kts scala groovy clj cs fs vb
    swift dart js mjs cjs ts tsx jsx vue svelte rb php pl pm lua r jl ex exs erl hs ml elm
    sh bash zsh fish ps1 bat cmd sql html htm css scss sass less md rst txt adoc tex org
    json jsonl ndjson yaml yml toml ini cfg conf env properties lock xml csv tsv log
    patch diff proto graphql gql tf hcl mk cmake gradle dockerfile make traj out err
    """.split()
)
"""Extensions a bare name must carry to count as a file: source code of the common
languages, build files, documentation, configuration and data."""


def looks_like_path(token: str) -> bool:
    """Whether ``token`` names a file: a slash and a letter, or a known extension."""
    if "://" in token or len(token) > 200 or len(token) < 3:
        return False
    if "/" in token:
        return bool(re.search(r"[A-Za-z]", token))
    # A bare name counts only with a typical source/data extension.
    ext = token.rsplit(".", 1)[-1].lower() if "." in token else ""
    return ext in FILE_EXTENSIONS


def paths_in_value(value: Any, key: str | None = None) -> Iterable[str]:
    """The file paths in ``value`` (a string, or decoded JSON), in order, repeats included:
    a one-line string under a :data:`PATH_KEYS` key whole, else every path-like token."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from paths_in_value(v, k)
    elif isinstance(value, list):
        for v in value:
            yield from paths_in_value(v, key)
    elif isinstance(value, str):
        if key and key.lower() in PATH_KEYS and value.strip() and "\n" not in value:
            yield value.strip()
        else:
            yield from (path for _, _, path in path_spans(value))


def path_spans(text: str) -> Iterable[tuple[int, int, str]]:
    """Every path-like token of ``text`` that :func:`looks_like_path`, with where it
    starts and ends, in order."""
    for m in _PATH_RE.finditer(text):
        path = m.group(0)
        if path.endswith(".") and not path.endswith(".."):
            path = path.rstrip(".")  # the end of a sentence, not of the name
        if looks_like_path(path):
            yield m.start(), m.start() + len(path), path
