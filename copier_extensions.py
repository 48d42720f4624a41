"""Copier only: what cookiecutter gives the template's files and copier does not.

- `cookiecutter`: the project's files say `{{ cookiecutter.module_name }}`; copier puts the answers
  at the top level of its context, so a context hook (copier-template-extensions) adds them under
  `cookiecutter` too.
- `{% now 'utc', '%Y' %}`: cookiecutter's date tag (the LICENSE's year).

Loaded by copier.yml's `_jinja_extensions`; a copier user installs copier and
copier-template-extensions only, so nothing here imports cookiecutter.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from copier_template_extensions import ContextHook
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.parser import Parser

ANSWER_TYPES = (str, bool, int, float, list, dict)


class CookiecutterVariable(ContextHook):
    """Adds `cookiecutter`: every answer (copier's own variables start with `_`)."""

    def hook(self, context: dict[str, Any]) -> None:
        # The context also holds Jinja's and copier's globals (range, now, ...): answers are data.
        context["cookiecutter"] = {
            name: value
            for name, value in context.items()
            if not name.startswith("_") and name != "cookiecutter" and isinstance(value, ANSWER_TYPES)
        }


class NowTag(Extension):
    """`{% now 'utc', '%Y' %}` as in cookiecutter (timezones 'utc' and 'local'; no offsets)."""

    tags = {"now"}

    def parse(self, parser: Parser) -> nodes.Output:
        lineno = next(parser.stream).lineno
        zone = parser.parse_expression()
        date_format = parser.parse_expression() if parser.stream.skip_if("comma") else nodes.Const("%Y-%m-%d")
        call = self.call_method("_now", [zone, date_format], lineno=lineno)
        return nodes.Output([call], lineno=lineno)

    def _now(self, zone: str, date_format: str) -> str:
        if zone not in ("utc", "local"):
            raise ValueError(f"now: timezone {zone!r} is not supported here; use 'utc' or 'local'")
        moment = datetime.now(timezone.utc) if zone == "utc" else datetime.now().astimezone()
        return moment.strftime(date_format)
