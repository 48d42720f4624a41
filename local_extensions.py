"""Checks on the answers to the template's questions.

Cookiecutter renders the project's folder name before `hooks/pre_gen_project.py` runs, so a bad
slug (empty, `../x`) would already have touched the disk by then. The `checked_answers` filter runs
these checks while the answers are being collected, before anything is written; the pre-generation
hook runs them again for `--replay`, which skips the questions.
"""

from __future__ import annotations

import keyword
import re
import sys
from typing import Any

from cookiecutter.exceptions import FailedHookException
from jinja2.ext import Extension

PYTHON_VERSIONS = ("3.10", "3.11", "3.12", "3.13")
CHOICES = {
    "python_version": PYTHON_VERSIONS,
    "dvc_remote": ("drive", "gcs", "gdrive", "local", "none"),
    "tracking": ("tensorboard", "mlflow", "wandb"),
    "open_source_license": ("MIT", "BSD-3-Clause", "Apache-2.0", "none"),
}
# Import names of the generated project's dependencies: a package with one of these names
# would shadow the real one.
DEPENDENCY_MODULES = frozenset(
    {
        "tensorflow", "keras", "tf_keras", "tensorboard", "numpy", "scipy", "sklearn", "pandas",
        "matplotlib", "yaml", "tqdm", "dvc", "dvc_gs", "dvc_gdrive", "papermill", "nbconvert",
        "nbformat", "nbclient", "ipykernel", "mlflow", "wandb", "pytest", "ruff", "nbstripout",
        "nbdime", "pre_commit", "google", "absl", "h5py", "ml_dtypes", "gcsfs", "fsspec",
        "jupyter", "IPython", "setuptools", "pip", "test", "tests",
    }
)

SLUG = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")
MODULE = re.compile(r"[a-z][a-z0-9_]*")
EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[A-Za-z]{2,}")
# GitHub: 1-39 letters, digits or single hyphens, not starting or ending with a hyphen.
GITHUB_OWNER = re.compile(r"(?=.{1,39}$)[A-Za-z0-9]+(-[A-Za-z0-9]+)*")


def find_error(answers: dict[str, Any]) -> str | None:
    """Return a one-line message about the first bad answer, or None when all are good."""
    name = str(answers.get("project_name", ""))
    slug = str(answers.get("project_slug", ""))
    module = str(answers.get("module_name", ""))
    owner = str(answers.get("github_owner", ""))
    email = str(answers.get("author_email", ""))

    if not name.strip():
        return "project_name: must not be empty (example: 'Digit Classifier')"
    for field in ("project_name", "author_name", "description"):
        if "\n" in str(answers.get(field, "")) or "\r" in str(answers.get(field, "")):
            return f"{field}: must be a single line (example: 'Digit Classifier')"
    if not SLUG.fullmatch(slug) or len(slug) > 100:
        return (
            f"project_slug: {slug!r} must be lowercase letters, digits and single hyphens, "
            "start with a letter, at most 100 characters (example: digit-classifier)"
        )
    if not MODULE.fullmatch(module) or not module.isidentifier():
        return (
            f"module_name: {module!r} must be a Python identifier of lowercase letters, digits "
            "and underscores, starting with a letter (example: digit_classifier)"
        )
    if keyword.iskeyword(module):
        return f"module_name: {module!r} is a Python keyword (example: digit_classifier)"
    if module in sys.stdlib_module_names or module in DEPENDENCY_MODULES:
        return (
            f"module_name: {module!r} would shadow the module of that name in the standard "
            "library or a dependency (example: digit_classifier)"
        )
    if not EMAIL.fullmatch(email):
        return f"author_email: {email!r} is not an email address (example: ada@example.com)"
    if not GITHUB_OWNER.fullmatch(owner):
        return (
            f"github_owner: {owner!r} is not a GitHub user or organisation name: 1-39 letters, "
            "digits or single hyphens, not starting or ending with a hyphen (example: ada-lovelace)"
        )
    for field, allowed in CHOICES.items():
        value = str(answers.get(field, ""))
        if value not in allowed:
            return f"{field}: {value!r} is not supported; choose one of {', '.join(allowed)} (example: {allowed[0]})"
    return None


def checked_answers(answers: dict[str, Any]) -> str:
    """Jinja filter: stop generation with a one-line message when an answer is bad."""
    error = find_error(dict(answers))
    if error:
        raise FailedHookException(error)
    return "ok"


class AnswerChecks(Extension):
    """Registers the `checked_answers` filter for cookiecutter.json."""

    def __init__(self, environment):  # noqa: ANN001 - Jinja's signature
        super().__init__(environment)
        environment.filters["checked_answers"] = checked_answers
