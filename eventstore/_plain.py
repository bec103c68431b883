"""Plain data for the canonical encoder: what ``pydantic_core.to_json`` writes byte for
byte as ``json.dumps`` does (:func:`_sorted_plain`), and a message's payload data built
straight from its fields (:func:`_message_plain`) when every field holds exactly its
annotated type. :mod:`eventstore.codec` uses both; nothing here touches the database."""

from __future__ import annotations

from typing import Any, get_args

from .events import Message, ReasoningPart, Role, TextPart, ToolCallPart, ToolResultPart


class _NotPlain(Exception):
    """Data the fast encoder leaves to ``json.dumps``."""


_FAST_INT = 1 << 63
_FAST_DEPTH = 100


def _sorted_plain(value: Any, depth: int = 0) -> Any:
    """``value`` with every dict's keys in sorted order, if it holds only data that
    ``pydantic_core.to_json`` writes exactly as ``json.dumps`` does: dicts with ``str``
    keys, lists, ``str``, ``bool``, ``None`` and ``int`` of at most 64 bits, each of
    exactly that type. Anything else raises :class:`_NotPlain`: floats (their shortest
    form differs below 1e-4, e.g. ``1e-05`` against ``0.00001``), subclasses, tuples,
    other key types and deep nesting go the ``json.dumps`` way."""
    t = type(value)
    if t is str or t is bool or value is None:
        return value
    if t is dict:
        if depth > _FAST_DEPTH:
            raise _NotPlain
        out = {}
        for k in sorted(value) if len(value) > 1 else value:
            if type(k) is not str:
                raise _NotPlain
            v = value[k]
            tv = type(v)
            # Leaves inline: a call per string or flag would cost as much as the rest.
            out[k] = v if tv is str or tv is bool or v is None else _sorted_plain(v, depth + 1)
        return out
    if t is list:
        if depth > _FAST_DEPTH:
            raise _NotPlain
        return [v if type(v) is str else _sorted_plain(v, depth + 1) for v in value]
    if t is int and -_FAST_INT <= value < _FAST_INT:
        return value
    raise _NotPlain


_ROLES = frozenset(get_args(Role))
_RESULT_STATES = frozenset(get_args(ToolResultPart.model_fields["state"].annotation))
_REASONING_FORMATS = frozenset(get_args(ReasoningPart.model_fields["format"].annotation))


def _message_plain(m: Message) -> dict[str, Any] | None:
    """What ``_sorted_plain`` makes of the serializer's dump of ``m`` (the payload's data,
    keys in sorted order), built from its fields directly, or None where that is not sure.

    Only for a message whose every payload field holds exactly the type its annotation
    names (``str``, ``bool``, ``None``, a ``list`` of exactly ``TextPart``,
    ``ReasoningPart``, ``ToolCallPart`` and ``ToolResultPart``, each with its own ``type``
    tag and literals among their values), and whose free-form dicts ``_sorted_plain``
    takes: the serializer gives such values back as they are, so the result is the same
    data in the same order as the general path's. Anything else (a subclass, an assigned
    value of another type, a field missing from ``__dict__``, a float or deep nesting in a
    free-form dict) gives None, and the general path decides.
    """
    d = m.__dict__
    try:
        content_list = d["content_list"]
        extra = d["extra"]
        interrupted = d["interrupted"]
        model = d["model"]
        name = d["name"]
        parts = d["parts"]
        metadata = d["provider_metadata"]
        role = d["role"]
        if (
            type(content_list) is not bool
            or type(parts) is not list
            or type(role) is not str
            or role not in _ROLES
        ):
            return None
        out: dict[str, Any] = {"content_list": content_list}
        if extra is not None:
            if type(extra) is not dict:
                return None
            out["extra"] = _sorted_plain(extra, 1)
        if interrupted is not None:
            if type(interrupted) is not bool:
                return None
            out["interrupted"] = interrupted
        if model is not None:
            if type(model) is not str:
                return None
            out["model"] = model
        if name is not None:
            if type(name) is not str:
                return None
            out["name"] = name
        plain_parts = []
        for part in parts:
            p = part.__dict__ if type(part) in _PLAIN_PARTS else None
            if p is None:
                return None
            if type(part) is TextPart:
                text = p["text"]
                if type(p["type"]) is not str or p["type"] != "text" or type(text) is not str:
                    return None
                plain_parts.append({"text": text, "type": "text"})
            elif type(part) is ToolCallPart:
                args, call_type, call_id, tool = p["arguments"], p["call_type"], p["id"], p["name"]
                if (
                    type(p["type"]) is not str
                    or p["type"] != "tool_call"
                    or type(args) is not str
                    or type(call_type) is not str
                    or type(call_id) is not str
                    or type(tool) is not str
                ):
                    return None
                plain_parts.append(
                    {"arguments": args, "call_type": call_type, "id": call_id, "name": tool,
                     "type": "tool_call"}
                )  # fmt: skip
            elif type(part) is ToolResultPart:
                is_error, tool, output = p["is_error"], p["name"], p["output"]
                state, call_id = p["state"], p["tool_call_id"]
                if (
                    type(p["type"]) is not str
                    or p["type"] != "tool_result"
                    or type(is_error) is not bool
                    or type(output) is not str
                    or type(state) is not str
                    or state not in _RESULT_STATES
                    or type(call_id) is not str
                ):
                    return None
                result: dict[str, Any] = {"is_error": is_error}
                if tool is not None:
                    if type(tool) is not str:
                        return None
                    result["name"] = tool
                result["output"] = output
                result["state"] = state
                result["tool_call_id"] = call_id
                result["type"] = "tool_result"
                plain_parts.append(result)
            else:  # ReasoningPart
                fmt, redacted, signature, text = (
                    p["format"], p["redacted_data"], p["signature"], p["text"]
                )  # fmt: skip
                if (
                    type(p["type"]) is not str
                    or p["type"] != "reasoning"
                    or type(fmt) is not str
                    or fmt not in _REASONING_FORMATS
                    or type(text) is not str
                ):
                    return None
                reasoning: dict[str, Any] = {"format": fmt}
                if redacted is not None:
                    if type(redacted) is not str:
                        return None
                    reasoning["redacted_data"] = redacted
                if signature is not None:
                    if type(signature) is not str:
                        return None
                    reasoning["signature"] = signature
                reasoning["text"] = text
                reasoning["type"] = "reasoning"
                plain_parts.append(reasoning)
        out["parts"] = plain_parts
        if metadata is not None:
            if type(metadata) is not dict:
                return None
            out["provider_metadata"] = _sorted_plain(metadata, 1)
        out["role"] = role
        return out
    except (KeyError, _NotPlain):
        return None


#: The part classes :func:`_message_plain` writes itself.
_PLAIN_PARTS = frozenset({TextPart, ToolCallPart, ToolResultPart, ReasoningPart})

#: The fields :func:`_message_plain` writes, by class.
_PLAIN_FIELDS: dict[type[Any], frozenset[str]] = {
    Message: frozenset(
        {"id", "created_at", "kind", "role", "parts", "name", "model", "provider_metadata",
         "content_list", "extra", "interrupted"}
    ),
    TextPart: frozenset({"type", "text"}),
    ToolCallPart: frozenset({"type", "id", "name", "arguments", "call_type"}),
    ToolResultPart: frozenset({"type", "tool_call_id", "name", "output", "is_error", "state"}),
    ReasoningPart: frozenset({"type", "text", "signature", "redacted_data", "format"}),
}  # fmt: skip


def _plain_dump(cls: type[Any]) -> bool:
    """Whether the serializer dumps ``cls`` as :func:`_message_plain` assumes: exactly the
    fields it knows, each under its own name, none left out or rewritten by a serializer."""
    decorators = cls.__pydantic_decorators__
    return (
        set(cls.model_fields) == _PLAIN_FIELDS[cls]
        and not cls.model_computed_fields
        and not decorators.field_serializers
        and not decorators.model_serializers
        and cls.model_config.get("extra") == "forbid"
        and not cls.model_config.get("serialize_by_alias")
        and all(
            f.exclude is None
            and getattr(f, "exclude_if", None) is None
            and f.alias is None
            and f.serialization_alias is None
            for f in cls.model_fields.values()
        )
    )


#: A field added to a message or part class (or a serializer) turns the fast path off
#: until :func:`_message_plain` learns it (a test says so).
_MESSAGE_FIELDS_KNOWN = all(_plain_dump(cls) for cls in _PLAIN_FIELDS)


def _validates_types_only(cls: type[Any]) -> bool:
    """Whether validating ``cls`` from JSON checks nothing but each field's type (and its
    literals): no validators but ``created_at``'s own (which the caller checks), no
    constraints on a field. Then data of exactly those types always reads back."""
    decorators = cls.__pydantic_decorators__
    validators = {
        name
        for name, d in decorators.field_validators.items()
        if not (set(d.info.fields) == {"created_at"} and d.func.__name__ == "_utc")
    }
    return (
        not validators
        and not decorators.model_validators
        and not decorators.validators
        and not decorators.root_validators
        and all(not f.metadata for f in cls.model_fields.values())
    )


#: Whether a payload :func:`_message_plain` built needs no read-back parse (a validator or
#: a constraint added to a message or part class turns this off; a test says so).
_READ_BACK_PROVEN = _MESSAGE_FIELDS_KNOWN and all(
    _validates_types_only(cls) for cls in _PLAIN_FIELDS
)
