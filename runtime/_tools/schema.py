"""A tool's argument schema, read from its Python signature.

The JSON Schema a model is shown and the validator its arguments pass through
both come from one pydantic model built from the function's parameters and
type hints (``pydantic.create_model``), as the OpenAI Agents SDK's
``function_tool`` and pydantic-ai derive theirs. Parameter descriptions come
from the docstring's Google-style ``Args:`` section (``docstring_parser``).
The validator is built once per tool and reused for every call: a call costs
one ``model_validate``.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # imported where a tool is built: ``import durably`` does not load pydantic
    import pydantic
    from pydantic import TypeAdapter

from durably.errors import ArgumentTypeError, ToolArgumentsError

#: The parameter a tool declares to receive its ``ToolContext``.
CONTEXT_PARAMETER = "ctx"


@dataclass(frozen=True)
class ToolSignature:
    """What a function's signature says about it as a tool.

    ``schema``: the JSON Schema of its arguments; ``description``: the
    docstring's text without its sections; ``takes_context``: it declares
    ``ctx``; ``returns``: a ``TypeAdapter`` of its return annotation (None
    when it has none), used to rebuild a journaled result as that type.
    """

    schema: dict[str, Any]
    description: str
    takes_context: bool
    returns: TypeAdapter[Any] | None
    _model: type[pydantic.BaseModel]
    _names: tuple[str, ...]

    def validate(self, tool: str, arguments: Any) -> dict[str, Any]:
        """The arguments coerced to the annotated types (keyword -> value).

        Raises ``ToolArgumentsError`` naming each field that does not fit.
        """
        if not isinstance(arguments, dict):
            raise ToolArgumentsError(tool, [("", f"expected an object, got {type(arguments).__name__}")])
        import pydantic  # loaded already: read_signature built the model

        try:
            parsed = self._model.model_validate(arguments)
        except pydantic.ValidationError as exc:
            raise ToolArgumentsError(tool, [(_path(e["loc"]), e["msg"]) for e in exc.errors()]) from None
        # Attributes, not model_dump: a dataclass argument must arrive as that dataclass.
        values = {name: getattr(parsed, name) for name in self._names}
        if parsed.model_extra:
            values.update(parsed.model_extra)
        return values


def read_signature(name: str, fn: Callable[..., Any]) -> ToolSignature:
    """Build the ``ToolSignature`` of ``fn`` (the tool called ``name``).

    Raises ``TypeError`` for a signature a model cannot call by keyword
    (positional-only parameters, ``*args``), an annotation that cannot be
    resolved or has no JSON Schema.
    """
    import docstring_parser
    import pydantic
    from pydantic import ConfigDict, Field, TypeAdapter

    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:
        raise ArgumentTypeError(f"tool {name!r}: cannot resolve the type hints of {fn.__qualname__}: {exc}") from exc
    doc = docstring_parser.parse(inspect.getdoc(fn) or "", docstring_parser.DocstringStyle.GOOGLE)
    described = {p.arg_name: p.description or "" for p in doc.params}
    fields: dict[str, Any] = {}
    takes_context = False
    extra: Literal["allow", "forbid"] = "forbid"
    for param in inspect.signature(fn).parameters.values():
        if param.name == CONTEXT_PARAMETER:
            takes_context = True
            continue
        if param.kind is param.VAR_KEYWORD:
            extra = "allow"  # **kwargs: any further argument is passed on as given
            continue
        if param.kind in (param.POSITIONAL_ONLY, param.VAR_POSITIONAL):
            raise ArgumentTypeError(
                f"tool {name!r}: parameter {param.name!r} cannot be passed by keyword; "
                "a model calls tools with named arguments"
            )
        annotation = hints.get(param.name, Any)
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (annotation, Field(default, description=described.get(param.name) or None))
    try:
        model = pydantic.create_model(f"{name}_arguments", __config__=ConfigDict(extra=extra), **fields)
        schema = model.model_json_schema()
    except Exception as exc:
        raise ArgumentTypeError(f"tool {name!r}: its parameters have no JSON Schema: {exc}") from exc
    schema.pop("title", None)
    returns = hints.get("return")
    adapter = None
    if returns is not None and returns is not type(None):
        try:
            adapter = TypeAdapter(returns)
        except Exception as exc:
            raise ArgumentTypeError(
                f"tool {name!r}: return annotation {returns!r} is not a type pydantic knows: {exc}"
            ) from exc
    text = "\n\n".join(p for p in (doc.short_description, doc.long_description) if p)
    return ToolSignature(schema, text, takes_context, adapter, model, tuple(fields))


def _path(loc: tuple[Any, ...]) -> str:
    """A pydantic error location as a dotted path: ``("order", "lines", 0)`` -> ``order.lines[0]``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out
