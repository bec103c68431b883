"""Fewer garbage collections while a transcript is imported.

An import allocates a few dozen containers per line (the parsed record, the event model,
its parts, the rows), nearly all of them freed again without a cycle, so reference
counting reclaims them; the cyclic collector only walks them. With the default
thresholds it runs a young collection every 700 allocations and now and then a full one
over everything the process holds (the library's modules, the driver's, the caller's
objects): about a sixth of an import's CPU time. For the length of an import,
:func:`fewer_collections` moves what the process held before it out of the collector's
way (``gc.freeze``) and lets the young generation grow to :data:`YOUNG_THRESHOLD`
allocations before it is collected. Cyclic garbage is still collected, in fewer and larger
rounds: memory stays bounded. Everything is put back as it was when the outermost import
ends (imports in several threads share one pause), unless the caller changed it in the
meantime; a process that froze objects itself, or turned the collector off, is left
alone.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["YOUNG_THRESHOLD", "fewer_collections"]

YOUNG_THRESHOLD = 100_000
"""Allocations between two young collections during an import (Python's default: 700).
A batch of 1,000 events being assembled holds some tens of thousands of containers (the
parsed records, the models): with 10,000 a young collection walked it about once a batch
(3-7% of the CPU time of an import of 20 MB, in eight collections); with 100,000 an import
of 20 MB collects once."""

_lock = threading.Lock()
_depth = 0
_saved: tuple[int, int, int] | None = None  # the thresholds to put back, when changed
_frozen = False  # whether the pause froze the heap (and so unfreezes it)


@contextmanager
def fewer_collections() -> Iterator[None]:
    """Collect less often for the length of the ``with`` block (see the module)."""
    global _depth, _saved, _frozen
    with _lock:
        if _depth == 0:
            _saved, _frozen = None, False
            if gc.isenabled():
                before = gc.get_threshold()
                if 0 < before[0] < YOUNG_THRESHOLD:
                    gc.set_threshold(YOUNG_THRESHOLD, *before[1:])
                    _saved = before
                if gc.get_freeze_count() == 0:
                    gc.freeze()
                    _frozen = True
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                if _saved is not None and gc.get_threshold() == (YOUNG_THRESHOLD, *_saved[1:]):
                    gc.set_threshold(*_saved)
                if _frozen:
                    gc.unfreeze()
                _saved, _frozen = None, False
