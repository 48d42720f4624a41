"""Stop `make setup` before it installs anything when this Python is older than the project needs.

pip would install the whole lock (about a thousand packages) and only then refuse the package for
its `requires-python`. Runs on any Python 3, hence a regular expression and not tomllib (3.11+).
"""

import re
import sys
from pathlib import Path

found = re.search(r"requires-python *= *.>=(\d+)\.(\d+)", Path("pyproject.toml").read_text())
need = (int(found.group(1)), int(found.group(2))) if found else (0, 0)
if sys.version_info < need:
    sys.exit(
        f"make setup: {sys.executable} is Python {sys.version.split()[0]}; pyproject.toml "
        f"requires-python >={need[0]}.{need[1]}. Make the venv with that Python: "
        f"python{need[0]}.{need[1]} -m venv --clear .venv"
    )
