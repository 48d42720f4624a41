"""`make demo`: bake the default project into a folder, install it from its lock, run its pipeline.

    python scripts/demo.py FOLDER

The main job of a project is its DVC pipeline (prepare -> train -> evaluate on the bundled digits);
the demo runs it and shows the metrics, as a new user would after `make setup`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import project_env


def main() -> None:
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "demo").resolve()
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    project = project_env.bake(target)
    print(f"demo: baked {project}", flush=True)
    python = project_env.project_python(project)
    print(f"demo: installed the project's lock into {python.parent.parent}", flush=True)
    # The project's tools (dvc) come first on PATH, as in an activated environment.
    env = {**os.environ, "PATH": f"{python.parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("PROJECT_STORAGE_DIR", None)
    for command in (["dvc", "repro"], ["dvc", "metrics", "show"]):
        print("demo: $ " + " ".join(command), flush=True)
        subprocess.run(command, cwd=project, env=env, check=True)
    print(f"demo: done. Try: cd {project} && . {python.parent}/activate && make", flush=True)


if __name__ == "__main__":
    main()
