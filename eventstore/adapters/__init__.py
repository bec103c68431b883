"""Drop-in session backends for agent frameworks, each an optional extra.

Import the one you use; nothing here is imported by ``import eventstore``:

* :mod:`eventstore.adapters.litellm`: :class:`~eventstore.adapters.litellm.EventStoreLogger`,
  a litellm callback that records every ``completion``/``acompletion`` in a session
  (litellm is a core dependency, no extra needed);
* :mod:`eventstore.adapters.adk`: :class:`~eventstore.adapters.adk.EventStoreSessionService`,
  a Google ADK session service (``pip install "agent-eventstore[adk]"``);
* :mod:`eventstore.adapters.openai_agents`:
  :class:`~eventstore.adapters.openai_agents.EventStoreSession`, an OpenAI Agents SDK
  session (``pip install "agent-eventstore[openai-agents]"``);
* :mod:`eventstore.adapters.pydantic_ai`:
  :class:`~eventstore.adapters.pydantic_ai.EventStoreConversationStore`, a pydantic-ai
  conversation store (``pip install "agent-eventstore[pydantic-ai]"``);
* :mod:`eventstore.adapters.langgraph`:
  :class:`~eventstore.adapters.langgraph.EventStoreSaver`, a LangGraph checkpointer that
  stores each step's change (``pip install "agent-eventstore[langgraph]"``);
* :mod:`eventstore.adapters.strands`:
  :class:`~eventstore.adapters.strands.EventStoreSessionRepository`, a Strands Agents
  session repository (``pip install "agent-eventstore[strands]"``).
"""
