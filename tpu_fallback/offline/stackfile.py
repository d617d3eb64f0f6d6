"""Reading Pulumi.yaml and Pulumi.<stack>.yaml as the Pulumi CLI does, and saying so where pyyaml would differ.

The CLI parses them with Go's gopkg.in/yaml.v3 (YAML 1.2 core schema); pyyaml follows YAML 1.1. Where the two
disagree, the offline plan would render something `pulumi up` does not, so it refuses with the fix instead,
naming the file, the line and the key:
- `yes`, `no`, `on`, `off`, `y`, `n` are booleans to pyyaml but strings to the CLI: write true/false, or quote
  (as a mapping key, such a word is read as the text, as the CLI reads it);
- an unquoted timestamp (2026-12-01T00:00:00Z), as a value or a key, is a date to pyyaml, and the CLI hands it to
  the program in Go's format ("2026-12-01 00:00:00 +0000 UTC"), not as written: quote it;
- a repeated key is an error for yaml.v3 ("mapping key already defined") while pyyaml keeps the last one.
And where YAML 1.1 alone reads a number, it is read as the CLI reads it: 3:00 is the text "3:00", not the
base-60 number 180.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml


class StackFileError(ValueError):
    """A stack or project file the CLI would read differently or refuse. Names the file, line and key."""


# libyaml's parser where the wheel has it (every offline plan and mock run reads two or three of these files;
# the pure-Python parser was a tenth of a dev-stack run); the resolvers and constructors below are Python either way.
_BaseLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _CliLoader(_BaseLoader):  # type: ignore[misc,valid-type]
    """SafeLoader with YAML 1.2's booleans and no base-60 numbers; _refuse_unlike_cli refuses YAML 1.1's other
    booleans, timestamps and duplicate keys."""


_STR_TAG = "tag:yaml.org,2002:str"
_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"
_YAML12_BOOL = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
_YAML11_ONLY_BOOL = re.compile(r"^(?:yes|Yes|YES|no|No|NO|on|On|ON|off|Off|OFF|y|Y|n|N)$")
_YAML11_TAG = "tag:tpu-fallback,2026:yaml11-bool"
# YAML 1.1's base-60 numbers (3:00 is 180, 1:30.5 is 90.5); YAML 1.2 has none: text. Tried before the int and float
# resolvers, which would match them.
_SEXAGESIMAL = re.compile(r"^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$")

_CliLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
for _first in "+-0123456789":
    _CliLoader.yaml_implicit_resolvers.setdefault(_first, []).insert(0, (_STR_TAG, _SEXAGESIMAL))
_CliLoader.add_implicit_resolver("tag:yaml.org,2002:bool", _YAML12_BOOL, list("tTfF"))
_CliLoader.add_implicit_resolver(_YAML11_TAG, _YAML11_ONLY_BOOL, list("yYnNoO"))


def _key_path(path: list[Any]) -> str:
    """config / tpu-fallback:flexStart / enabled as `tpu-fallback:flexStart.enabled` (the config key, then its
    path inside the value, as the config errors name it)."""
    steps = path[1:] if path[:1] == ["config"] and len(path) > 1 else path
    out = str(steps[0]) if steps else "(top level)"
    for step in steps[1:]:
        out += f"[{step}]" if isinstance(step, int) else f".{step}"
    return out


def _refuse_unlike_cli(name: str, node: yaml.Node, path: list[Any]) -> None:
    """Raise StackFileError for a value (or key) the CLI reads otherwise than pyyaml would (see the module
    docstring); a mapping key that is a YAML 1.1 boolean is made the text, as the CLI reads it."""
    if isinstance(node, yaml.MappingNode):
        seen: dict[tuple[str, str], int] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                continue  # (a complex key: not in a Pulumi file)
            if key_node.tag == _YAML11_TAG:
                key_node.tag = _STR_TAG
            key, line = key_node.value, key_node.start_mark.line + 1
            if key_node.tag == _TIMESTAMP_TAG:
                raise StackFileError(f"{name}, line {line}, {_key_path(path)}: the key {key} unquoted is a timestamp "
                                     f"to YAML, which the Pulumi CLI turns into Go's format (such as \"2026-12-01 "
                                     f'00:00:00 +0000 UTC"): quote it ("{key}")')
            if (key_node.tag, key) in seen:
                raise StackFileError(f"{name}, line {line}, {_key_path(path)}: key {key!r} appears twice (first on "
                                     f"line {seen[key_node.tag, key]}); the Pulumi CLI refuses that")
            seen[key_node.tag, key] = line
            _refuse_unlike_cli(name, value_node, [*path, key])
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _refuse_unlike_cli(name, item, [*path, i])
    elif node.tag in (_YAML11_TAG, _TIMESTAMP_TAG) and isinstance(node, yaml.ScalarNode):
        value = node.value
        where = f"{name}, line {node.start_mark.line + 1}, {_key_path(path)}"
        if node.tag == _YAML11_TAG:
            raise StackFileError(
                f"{where}: {value!r} is a boolean to YAML 1.1 but the string {value!r} to the Pulumi CLI (YAML 1.2): "
                f'write true or false, or quote it ("{value}") if you mean the text')
        raise StackFileError(
            f"{where}: {value} unquoted is a timestamp to YAML, and the Pulumi CLI hands a timestamp to the program "
            f'in Go\'s format (such as "2026-12-01 00:00:00 +0000 UTC"), not as written: quote it ("{value}")')


def _load(text: str, name: str) -> Any:
    loader = _CliLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _refuse_unlike_cli(name, node, [])
        return loader.construct_document(node)
    finally:
        loader.dispose()


def read(path: Path) -> dict[str, Any]:
    """A Pulumi project or stack file as the CLI reads it: a mapping, or StackFileError naming what is wrong."""
    try:
        document = _load(path.read_text(), path.name)
    except yaml.YAMLError as err:
        raise StackFileError(f"{path.name}: {err}") from None
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise StackFileError(f"{path.name}: expected a mapping of settings (config: ...), "
                             f"not {type(document).__name__}")
    config = document.get("config")
    if config is not None and not isinstance(config, dict):
        raise StackFileError(f"{path.name}: config must be a mapping of namespace:key to value, "
                             f"not {type(config).__name__}")
    return document
