"""Refuse bad answers before any file is written.

Cookiecutter already checked each answer right after its question (the `__check_*` variables of
cookiecutter.json); `--replay` skips the questions, so rendering this file checks every answer
again: the `checked_answers` filter of `local_extensions.py` stops generation with the one-line
message while this hook is rendered. Nothing here needs the template's path, which cruft does not
give (`cookiecutter._repo_dir`).
"""

# Answers checked: {{ cookiecutter | checked_answers }}
