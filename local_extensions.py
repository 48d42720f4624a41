"""Checks on the answers to the template's questions, for cookiecutter, cruft and copier.

One check per question, run right after that question is answered:
- cookiecutter and cruft render the private variable `__check_<question>` that follows each
  question in `cookiecutter.json` (cookiecutter renders private variables in order, between the
  questions); its `checked_answer` filter stops the run with the one-line message, before the next
  question and before anything is written (the project folder is named from the slug before
  `hooks/pre_gen_project.py` runs). That hook checks every answer again for `--replay`, which skips
  the questions.
- copier renders each question's `validator` (copier.yml, generated from cookiecutter.json and
  `CHECKS` by scripts/copier_yml.py) with the `answer_error` filter, and re-asks a bad answer.

This module imports only the standard library and Jinja at import time: a copier user has no
cookiecutter installed.
"""

from __future__ import annotations

import keyword
import re
import sys
import unicodedata
from collections.abc import Callable, Mapping
from typing import Any

from jinja2.ext import Extension

PYTHON_VERSIONS = ("3.11", "3.12", "3.13")
CHOICES = {
    "python_version": PYTHON_VERSIONS,
    "dvc_remote": ("drive", "gcs", "gdrive", "local", "none"),
    "tracking": ("tensorboard", "mlflow", "wandb"),
    "open_source_license": ("MIT", "BSD-3-Clause", "Apache-2.0", "none"),
}
# Yes/no questions: cookiecutter's boolean variables, copier's `type: bool`. Both tools turn the
# "no", "false", "n", "0", ... of a command line or a config file into False.
BOOLEANS = ("vertex_ai",)
# The words cookiecutter takes for them; copier alone would read any other word as True.
YES_NO = ("1", "true", "t", "yes", "y", "on", "0", "false", "f", "no", "n", "off")
# Import names of the generated project's dependencies: a package with one of these names
# would shadow the real one.
DEPENDENCY_MODULES = frozenset(
    {
        "tensorflow", "keras", "tf_keras", "tensorboard", "numpy", "scipy", "sklearn", "pandas",
        "matplotlib", "yaml", "tqdm", "dvc", "dvc_gs", "dvc_gdrive", "papermill", "nbconvert",
        "nbformat", "nbclient", "ipykernel", "mlflow", "wandb", "pytest", "ruff", "nbstripout",
        "nbdime", "pre_commit", "google", "absl", "h5py", "ml_dtypes", "gcsfs", "fsspec",
        "jupyter", "IPython", "setuptools", "pip", "test", "tests", "optuna", "sqlalchemy",
        "psycopg", "psycopg2", "pydantic", "psutil", "packaging", "tensorflow_datasets",
        "keras_hub", "ai_edge_litert", "hypertune", "ruamel", "requests", "PIL", "torch",
        "typing_extensions", "xdist", "uv", "apitools", "googlecloudsdk", "src", "tools",
    }
)

SLUG = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")
MODULE = re.compile(r"[a-z][a-z0-9_]*")
EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[A-Za-z]{2,}")
# GitHub: 1-39 letters, digits or single hyphens, not starting or ending with a hyphen.
GITHUB_OWNER = re.compile(r"(?=.{1,39}$)[A-Za-z0-9]+(-[A-Za-z0-9]+)*")


def _single_line(field: str) -> Callable[[str], str | None]:
    """A check that refuses a line break (the answer lands in one-line TOML and YAML strings)."""

    def check(value: str) -> str | None:
        if "\n" in value or "\r" in value:
            return f"{field}: must be a single line (example: 'Digit Classifier')"
        return None

    return check


def _project_name(value: str) -> str | None:
    if not value.strip():
        return "project_name: must not be empty (example: 'Digit Classifier')"
    return _single_line("project_name")(value)


def _project_slug(slug: str) -> str | None:
    if not SLUG.fullmatch(slug) or len(slug) > 100:
        return (
            f"project_slug: {slug!r} must be lowercase letters, digits and single hyphens, "
            "start with a letter, at most 100 characters (example: digit-classifier)"
        )
    return None


def _module_name(module: str) -> str | None:
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
    return None


def _author_email(email: str) -> str | None:
    if not EMAIL.fullmatch(email):
        return f"author_email: {email!r} is not an email address (example: ada@example.com)"
    return None


def _github_owner(owner: str) -> str | None:
    if not GITHUB_OWNER.fullmatch(owner):
        return (
            f"github_owner: {owner!r} is not a GitHub user or organisation name: 1-39 letters, "
            "digits or single hyphens, not starting or ending with a hyphen (example: ada-lovelace)"
        )
    return None


def _yes_or_no(field: str) -> Callable[[Any], str | None]:
    """A check that accepts only True and False (a replay from an older template holds text)."""

    def check(value: Any) -> str | None:
        if not isinstance(value, bool):
            return f"{field}: {value!r} must be true or false, not text (example: {field}: false)"
        return None

    return check


def _one_of(field: str, allowed: tuple[str, ...]) -> Callable[[str], str | None]:
    """A check that accepts only the listed values (a replay or `--data` can hold any string)."""

    def check(value: str) -> str | None:
        if value not in allowed:
            return (
                f"{field}: {value!r} is not supported; choose one of {', '.join(allowed)} "
                f"(example: {allowed[0]})"
            )
        return None

    return check


# One check per question, in the order of the questions.
CHECKS: dict[str, Callable[[Any], str | None]] = {
    "project_name": _project_name,
    "project_slug": _project_slug,
    "module_name": _module_name,
    "author_name": _single_line("author_name"),
    "author_email": _author_email,
    "description": _single_line("description"),
    "github_owner": _github_owner,
    **{field: _one_of(field, allowed) for field, allowed in CHOICES.items()},
    **{field: _yes_or_no(field) for field in BOOLEANS},
}


def check_answer(field: str, value: Any) -> str | None:
    """The one-line message about the answer to `field`, or None when it is good."""
    if field in BOOLEANS:
        return CHECKS[field](value)
    # A YAML file reads an unquoted yes, no, on, off or an empty value as a bool or None, and
    # 0123 as the octal number 83: the text the user typed is lost, so ask for quotes. (Copier
    # hands the number over; cookiecutter makes it text, "83", before any check can see it.)
    if value is None or isinstance(value, bool):
        return f"{field}: {value!r} is not text; quote it in a YAML config (example: {field}: 'No')"
    if isinstance(value, (int, float)) and str(value) not in CHOICES.get(field, ()):
        example = CHOICES[field][-1] if field in CHOICES else "0123"
        return (
            f"{field}: YAML read this answer as the number {value!r} (unquoted, 0123 reads as 83 "
            f"and 3.10 as 3.1); quote it in the YAML file (example: {field}: '{example}')"
        )
    return CHECKS[field](str(value))


def answer_error(value: Any, field: str, given: Mapping[str, Any] | None = None) -> str:
    """The one-line message about this answer, or '' when it is good (copier's validators).
    `given`: the answers as `--data` and `--data-file` gave them (`_copier_conf.data`), before
    copier turned a YAML bool or number into the text "False" or "83", or any word into a bool."""
    raw = (given or {}).get(field)
    if field in BOOLEANS and isinstance(raw, str) and raw.strip().lower() not in YES_NO:
        return f"{field}: {raw!r} is not a yes or no answer (example: {field}=false)"
    if field not in BOOLEANS and raw is not None and str(raw) == str(value):
        value = raw
    return check_answer(field, value) or ""


def given_answers_checked(given: Mapping[str, Any] | None) -> str:
    """Jinja filter, the first question's `when` in copier.yml: stop copier with the one-line
    message when an answer given with `--data` or `--data-file` (`_copier_conf.data`) is bad,
    before copier reads it. Copier's own refusals (a value outside a question's choices, a
    validator's message for a given answer) end in a traceback."""
    given = given or {}
    for field in [name for name in CHECKS if name in given]:
        # A yes/no word is copier's to read (answer_error refuses any other word); any other
        # answer is checked as given.
        yes_or_no = field in BOOLEANS and isinstance(given[field], str)
        error = answer_error(True if yes_or_no else given[field], field, given)
        if error:
            # Imported here: only copier renders this filter, and a cookiecutter user has no
            # copier installed.
            from copier.errors import UserMessageError

            raise UserMessageError(error)
    return "true"


def find_error(answers: dict[str, Any]) -> str | None:
    """Return a one-line message about the first bad answer, or None when all are good."""
    for field in CHECKS:
        error = check_answer(field, answers.get(field, ""))
        if error:
            return error
    return None


def _stop(message: str) -> None:
    """Stop cookiecutter (or cruft) with this one line and nothing written."""
    # cruft's command line (typer) shows any exception as a traceback: there the line is the
    # exit's message (exit code 1). Cookiecutter's command line prints a FailedHookException's
    # message alone, and a program that calls either tool can catch it.
    if "cruft._cli" in sys.modules:
        raise SystemExit(message)
    # Imported here: only cookiecutter and cruft call the filters below, and a copier user
    # has no cookiecutter installed.
    from cookiecutter.exceptions import FailedHookException

    raise FailedHookException(message)


def checked_answer(answers: dict[str, Any], field: str) -> str:
    """Jinja filter: stop generation with a one-line message when the answer to `field` is bad."""
    error = check_answer(field, dict(answers).get(field, ""))
    if error:
        _stop(error)
    return "ok"


def checked_answers(answers: dict[str, Any]) -> str:
    """Jinja filter: stop generation with a one-line message when any answer is bad."""
    error = find_error(dict(answers))
    if error:
        _stop(error)
    return "ok"


def slugify(text: str) -> str:
    """`Colab Project` -> `colab-project`, for copier, which has no `slugify` filter.

    Cookiecutter's own filter (python-slugify) gives the same result for accented Latin text; it
    also transliterates letters such as `ß` and other scripts, which this one drops. Only copier's
    default for the slug uses this; the answer can be edited at the prompt.
    """
    ascii_text = unicodedata.normalize("NFKD", str(text)).encode("ascii", "ignore").decode()
    return re.sub(r"[^a-z0-9]+", "-", ascii_text.lower()).strip("-")


class AnswerChecks(Extension):
    """Registers the checks as Jinja filters for cookiecutter.json, the hooks and copier.yml."""

    def __init__(self, environment):  # noqa: ANN001 - Jinja's signature
        super().__init__(environment)
        environment.filters["checked_answer"] = checked_answer
        environment.filters["checked_answers"] = checked_answers
        environment.filters["answer_error"] = answer_error
        environment.filters["given_answers_checked"] = given_answers_checked
        # Cookiecutter registers its own `slugify` first: keep it there.
        environment.filters.setdefault("slugify", slugify)
