"""Reading Pulumi.yaml and Pulumi.<stack>.yaml as the Pulumi CLI does, and saying so where pyyaml would differ.

The CLI parses them with Go's gopkg.in/yaml.v3 (YAML 1.2 core schema); pyyaml follows YAML 1.1. Where the two
disagree, the offline plan would render something `pulumi up` does not, so it refuses with the fix instead:
- `yes`, `no`, `on`, `off`, `y`, `n` are booleans to pyyaml but strings to the CLI: write true/false, or quote;
- a repeated key is an error for yaml.v3 ("mapping key already defined") while pyyaml keeps the last one.
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
    """SafeLoader with YAML 1.2's booleans, YAML 1.1's extra ones refused, and duplicate keys refused."""


_YAML12_BOOL = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
_YAML11_ONLY_BOOL = re.compile(r"^(?:yes|Yes|YES|no|No|NO|on|On|ON|off|Off|OFF|y|Y|n|N)$")
_YAML11_TAG = "tag:tpu-fallback,2026:yaml11-bool"

_CliLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_CliLoader.add_implicit_resolver("tag:yaml.org,2002:bool", _YAML12_BOOL, list("tTfF"))
_CliLoader.add_implicit_resolver(_YAML11_TAG, _YAML11_ONLY_BOOL, list("yYnNoO"))


def _yaml11_bool(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    value = loader.construct_scalar(node)  # type: ignore[arg-type]
    raise yaml.constructor.ConstructorError(
        None, None, f"{value!r} is a boolean to YAML 1.1 but the string {value!r} to the Pulumi CLI (YAML 1.2): "
        f"write true or false, or quote it (\"{value}\") if you mean the text", node.start_mark)


def _mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: dict[Any, yaml.Node] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                "in a mapping", node.start_mark,
                f"key {key!r} appears twice (first on line {seen[key].start_mark.line + 1}); the Pulumi CLI "
                "refuses that",
                key_node.start_mark)
        seen[key] = key_node
    return loader.construct_mapping(node, deep=deep)


_CliLoader.add_constructor(_YAML11_TAG, _yaml11_bool)
_CliLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def read(path: Path) -> dict[str, Any]:
    """A Pulumi project or stack file as the CLI reads it: a mapping, or StackFileError naming what is wrong."""
    try:
        document = yaml.load(path.read_text(), Loader=_CliLoader)
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
