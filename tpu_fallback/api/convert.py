"""Between the components' args (snake_case TypedDicts, tpu_fallback/api/args.py) and a stack's raw config
(camelCase keys, as tpu_fallback.model.settings parses it), led by the TypedDicts' annotations: a nested TypedDict's
keys are renamed, a free map's keys (featureGates, namespaceLabels, quotas) are not."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Mapping
from typing import Any

from tpu_fallback.model.validation import ConfigError, show


def camel(name: str) -> str:
    """`max_slices` -> `maxSlices`, as Pulumi's analyzer names a schema property (pulumi/provider/experimental/util)."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def config_of(args: Mapping[str, Any], typ: type, path: str = "") -> dict[str, Any]:
    """The raw config a TypedDict's value stands for. Unknown keys and values known only after deployment (a
    pulumi.Output, where a setting must be plain) are errors naming the setting."""
    fields = fields_of(typ)
    if not isinstance(args, Mapping):
        raise ConfigError(f"{path or 'args'} is invalid: {show(args)}: expected an object with keys "
                          f"{', '.join(camel(f) for f in fields)}")
    raw: dict[str, Any] = {}
    for key, value in args.items():
        name = f"{path}.{camel(key)}" if path else camel(key)
        if key not in fields:
            known = ", ".join(camel(f) for f in fields)
            raise ConfigError(f"{name} is not a known setting; known: {known}")
        if value is None:
            continue
        raw[camel(key)] = _value(value, fields[key], name)
    return raw


def args_of(raw: Mapping[str, Any], typ: type) -> dict[str, Any]:
    """The args a raw config stands for (the inverse of config_of), for keys `typ` declares; others are left out
    (the caller has checked the config with the settings parser first, which refuses unknown keys)."""
    fields = {camel(f): (f, t) for f, t in fields_of(typ).items()}
    args: dict[str, Any] = {}
    for key, value in raw.items():
        if key in fields:
            name, annotation = fields[key]
            args[name] = _back(value, annotation)
    return args


def fields_of(typ: type) -> dict[str, Any]:
    """A TypedDict's fields and their types, without NotRequired/Required. Read as Pulumi's analyzer reads them
    (the annotations of the class and its bases, unevaluated: pulumi.Input's forward reference to Output stays one)."""
    hints: dict[str, Any] = {}
    for cls in reversed(typ.__mro__):
        hints.update(inspect.get_annotations(cls))
    return {name: _unwrap(hint) for name, hint in hints.items()}


def _unwrap(hint: Any) -> Any:
    while typing.get_origin(hint) in (typing.NotRequired, typing.Required):
        hint = typing.get_args(hint)[0]
    return hint


def _value(value: Any, hint: Any, name: str) -> Any:
    if _is_output(value) and not _is_input(hint):
        raise ConfigError(f"{name} is invalid: a pulumi.Output: it decides which resources exist, so it must be a "
                          "plain value known before deployment")
    if _is_input(hint) and not _is_output(value) and typing.get_origin(typing.get_args(hint)[0]) is list:
        hint = typing.get_args(hint)[0]  # a list typed Input for the SDK generators, given as a plain list
    if typing.is_typeddict(hint):
        return config_of(value, hint, name)
    origin = typing.get_origin(hint)
    if origin is list and isinstance(value, list | tuple):
        (item,) = typing.get_args(hint)
        return [_value(v, item, f"{name}[{i}]") for i, v in enumerate(value)]
    if _is_input(hint):
        return value
    return _whole_numbers(value)


def _back(value: Any, hint: Any) -> Any:
    if _is_input(hint):
        hint = typing.get_args(hint)[0]
    if typing.is_typeddict(hint) and isinstance(value, Mapping):
        return args_of(value, hint)
    if typing.get_origin(hint) is list and isinstance(value, list):
        (item,) = typing.get_args(hint)
        return [_back(v, item) for v in value]
    return value


def _whole_numbers(value: Any) -> Any:
    """Pulumi hands numbers across languages as floats (a property typed Any or a map's value is not converted
    back): 2.0 is the 2 a stack file would say."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {k: _whole_numbers(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_whole_numbers(v) for v in value]
    return value


def _is_output(value: Any) -> bool:
    return type(value).__name__ == "Output" and type(value).__module__.startswith("pulumi")


def _is_input(hint: Any) -> bool:
    """pulumi.Input[T]: a Union of T, Awaitable[T] and Output[T]."""
    return any(getattr(arg, "__name__", "") == "Output" or str(getattr(arg, "__forward_arg__", "")).startswith("Output")
               for arg in typing.get_args(hint))
