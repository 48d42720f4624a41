"""One source for every value: the generated params.yaml holds them all, config.py none (it says
what each key takes). Here, not in the project's own tests: a user's first edit of params.yaml
must not break their CI."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

SCRIPT = """
import json
from pydantic_core import PydanticUndefined
from colab_project.config import Params, load_params

def keys(cls, prefix=""):
    for name, info in cls.__pydantic_fields__.items():
        nested = getattr(info.annotation, "__pydantic_fields__", None)
        yield prefix + name, info.default is not PydanticUndefined or info.default_factory is not None
        if nested is not None:
            yield from keys(info.annotation, prefix + name + ".")

print(json.dumps({"keys": dict(keys(Params)), "loaded": load_params("params.yaml").to_dict()}))
"""


def _flat(tree: dict, prefix: str = "") -> set[str]:
    out = set()
    for key, value in tree.items():
        out.add(prefix + key)
        if isinstance(value, dict) and not key.endswith("args") and key != "space":
            out |= _flat(value, prefix + key + ".")
    return out


def test_params_yaml_holds_every_value_and_config_py_none(default_project: Path, project_python: Path) -> None:
    run = subprocess.run([str(project_python), "-c", SCRIPT], cwd=default_project,
                         capture_output=True, text=True, check=True)
    found = json.loads(run.stdout)
    defaulted = [key for key, has_default in found["keys"].items() if has_default]
    assert defaulted == [], f"config.py gives these keys a value of its own: {defaulted}"
    written = yaml.safe_load((default_project / "params.yaml").read_text())
    assert _flat(written) == set(found["keys"])  # every key of the schema, nothing else
    assert found["loaded"]["model"]["args"] == {} and found["loaded"]["data"]["args"] == {}
