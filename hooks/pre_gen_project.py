"""Refuse bad answers before any file is written.

The checks live in `local_extensions.py` at the template's root, which cookiecutter already ran
while collecting the answers; they run again here because `cookiecutter --replay` skips that step.
"""

import json
import sys

sys.path.insert(0, {{ cookiecutter._repo_dir | tojson }})

from local_extensions import find_error  # noqa: E402

answers = json.loads(r"""{{ cookiecutter | tojson }}""")
error = find_error(answers)
if error:
    print(f"ERROR: {error}", file=sys.stderr)
    sys.exit(1)
