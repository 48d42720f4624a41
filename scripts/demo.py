"""`make demo`: bake the default project into a folder, install it, run its main job.

    python scripts/demo.py FOLDER
"""

from __future__ import annotations

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
    subprocess.run([str(python), "-m", "pytest", "-q"], cwd=project, check=True)


if __name__ == "__main__":
    main()
