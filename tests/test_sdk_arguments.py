"""Every argument the program passes to pulumi-gcp exists in the installed SDK (its Args classes mirror the schema).

The program passes nested settings as dicts, which Python does not check; a misspelt key would only fail at
`pulumi preview`. This walks each recorded input against the Args class the SDK declares for it.
"""

from __future__ import annotations

import importlib
import inspect
import re
from typing import Any

import pytest

from tests.conftest import infra
from tpu_fallback.offline.mockrun import ProgramRun

_ARGS_NAME = re.compile(r"'(\w+Args)'")


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def args_class(resource_type: str) -> type:
    # "gcp:container/nodePool:NodePool" -> pulumi_gcp.container.NodePoolArgs
    _, module_path, class_name = resource_type.split(":")
    module = importlib.import_module(f"pulumi_gcp.{module_path.split('/')[0]}")
    return getattr(module, f"{class_name}Args")  # type: ignore[no-any-return]


def parameters(cls: type) -> dict[str, str]:
    """Parameter name -> its annotation as text (the SDK quotes nested Args class names)."""
    signature = inspect.signature(cls.__init__)  # type: ignore[misc]
    return {name: str(p.annotation) for name, p in signature.parameters.items() if name not in ("self", "__self__")}


def unknown_keys(value: Any, cls: type, path: str, module: Any) -> list[str]:
    params = parameters(cls)
    problems = []
    for key, inner in value.items():
        name = snake(key)
        if name not in params:
            problems.append(f"{path}{key} (not an argument of {cls.__name__})")
            continue
        nested = _ARGS_NAME.search(params[name])
        if nested is None:
            continue
        nested_cls = getattr(module, nested.group(1))
        items = inner if isinstance(inner, list) else [inner]
        for i, item in enumerate(items):
            if isinstance(item, dict):
                suffix = f"[{i}]" if isinstance(inner, list) else ""
                problems.extend(unknown_keys(item, nested_cls, f"{path}{key}{suffix}.", module))
    return problems


def gcp_resources(run: ProgramRun) -> list[Any]:
    return [r for r in run.resources if r.custom and r.type.startswith("gcp:")]


@pytest.mark.parametrize("stack", ["dev", "prod", "global"])
def test_every_gcp_argument_exists_in_the_sdk(stack: str) -> None:
    run = infra(stack)
    problems: list[str] = []
    for resource in gcp_resources(run):
        cls = args_class(resource.type)
        module = importlib.import_module(cls.__module__.rsplit(".", 1)[0] + "._inputs")
        problems.extend(f"{resource.name}: {p}" for p in unknown_keys(resource.inputs, cls, "", module))
    assert problems == []


def test_the_walk_catches_a_misspelt_key() -> None:
    cls = args_class("gcp:container/nodePool:NodePool")
    module = importlib.import_module("pulumi_gcp.container._inputs")
    found = unknown_keys({"nodeConfig": {"gcfsConfg": {"enabled": True}}, "autoscaling": {"maxNodes": 4}}, cls, "",
                         module)
    assert found == ["nodeConfig.gcfsConfg (not an argument of NodePoolNodeConfigArgs)",
                     "autoscaling.maxNodes (not an argument of NodePoolAutoscalingArgs)"]
