"""One source for every default: the generated params.yaml holds exactly the schema's defaults
(config.py), key for key. Here, not in the project's own tests: a user's first edit of
params.yaml must not break their CI."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml


def test_params_yaml_is_the_schema_defaults(default_project: Path, project_python: Path) -> None:
    script = "import json; from colab_project.config import Params; print(json.dumps(Params().to_dict()))"
    run = subprocess.run([str(project_python), "-c", script], cwd=default_project,
                         capture_output=True, text=True, check=True)
    schema = json.loads(run.stdout)
    written = yaml.safe_load((default_project / "params.yaml").read_text())
    assert written == schema
