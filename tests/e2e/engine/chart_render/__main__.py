"""One helm.v4.Chart per entry of renders.json ({"name", "release", "chart", "namespace", "values", "out"}), each
through its own provider whose renderYamlToDirectory is `out`: `pulumi up` writes every object it rendered there."""

import json
from pathlib import Path

import pulumi
import pulumi_kubernetes as k8s

for render in json.loads((Path(__file__).parent / "renders.json").read_text()):
    provider = k8s.Provider(f"{render['name']}-render", render_yaml_to_directory=render["out"])
    k8s.helm.v4.Chart(render["name"], name=render["release"], chart=render["chart"], namespace=render["namespace"],
                      values=render["values"], opts=pulumi.ResourceOptions(provider=provider))
