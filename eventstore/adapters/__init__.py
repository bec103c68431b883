"""Drop-in session backends for agent frameworks, each an optional extra.

Import the one you use; nothing here is imported by ``import eventstore``:

* :mod:`eventstore.adapters.litellm`: :class:`~eventstore.adapters.litellm.EventStoreLogger`,
  a litellm callback that records every ``completion``/``acompletion`` in a session
  (litellm is a core dependency, no extra needed).
"""
