"""Regenerate the template's locks: `{{cookiecutter.project_slug}}/requirements*.txt`.

    make lock        (or: python scripts/refresh_lock.py [--upgrade])

The generated project's `requirements.in` names a DVC plugin and a tracker that depend on the
answers. This renders it for every answer, resolves all of them together once (so one package has
one version whichever options are chosen), then each alone against that, and writes
requirements.txt as a Jinja template: the shared pins as they are, the option-only pins inside
`{% if %}`. The resolver is the generated project's own `tools/lock.py`, the same one `make lock`
runs inside a project, so a fresh project's `make lock` reproduces its lock. The current locks' pins
are kept where they still resolve (`--upgrade`: not), so a refresh changes only what it must.
"""

from __future__ import annotations

import importlib.util
import itertools
import shutil
import sys
import tempfile
from pathlib import Path

import jinja2

ROOT = Path(__file__).resolve().parent.parent
PROJECT = ROOT / "{{cookiecutter.project_slug}}"
OPTIONS = {"dvc_remote": ["drive", "gcs", "gdrive", "local", "none"], "tracking": ["tensorboard", "mlflow", "wandb"]}


def load_lock_tool():
    """Import the generated project's tools/lock.py (plain Python: it has no Jinja in it)."""
    spec = importlib.util.spec_from_file_location("lock_tool", PROJECT / "tools" / "lock.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def render_requirements(answers: dict[str, str], folder: Path) -> Path:
    """requirements.in as a project with these answers would have it."""
    text = jinja2.Template((PROJECT / "requirements.in").read_text()).render(cookiecutter=answers)
    path = folder / ("requirements-" + "-".join(answers.values()) + ".in")
    path.write_text(text + "\n")
    return path


def condition(combos: list[dict[str, str]]) -> str:
    """A Jinja condition true exactly for these answer combinations."""
    for key, values in OPTIONS.items():
        others = [k for k in OPTIONS if k != key]
        chosen = sorted({c[key] for c in combos}, key=values.index)
        # The common case: the line depends on one question only.
        if len(combos) == len(chosen) * len(list(itertools.product(*(OPTIONS[k] for k in others)))):
            return " or ".join(f'cookiecutter.{key} == "{v}"' for v in chosen)
    return " or ".join(
        "(" + " and ".join(f'cookiecutter.{k} == "{v}"' for k, v in c.items()) + ")" for c in combos
    )


def current_pins(path: Path, upgrade: bool) -> list[str]:
    """The pin lines of a current lock (every option's, Jinja left out): uv's preferences."""
    if upgrade or not path.is_file():
        return []
    return [line for line in path.read_text().splitlines() if line and not line.startswith(("#", "{"))]


def main() -> None:
    upgrade = "--upgrade" in sys.argv[1:]
    lock_tool = load_lock_tool()
    freeze = lock_tool.COLAB_CONSTRAINTS
    preferred = current_pins(PROJECT / "requirements.txt", upgrade)
    uv = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    combos = [dict(zip(OPTIONS, values)) for values in itertools.product(*OPTIONS.values())]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        inputs = [render_requirements(c, folder) for c in combos]
        union = folder / "requirements-all.in"
        union.write_text("\n".join(sorted({
            line for path in inputs for line in path.read_text().splitlines()
            if line.strip() and not line.startswith("#")
        })) + "\n")
        everything = folder / "everything.txt"
        everything.write_text("\n".join(lock_tool.lock([union], [], uv, freeze, preferences=preferred)) + "\n")
        print("lock: resolved every option together", flush=True)

        lines_of, by_input = {}, {}
        for combo, path in zip(combos, inputs):
            text = path.read_text()  # several answers give the same requirements.in
            if text not in by_input:
                by_input[text] = lock_tool.lock([path], [everything], uv, freeze, preferences=preferred)
                print(f"lock: {combo}", flush=True)
            lines_of[tuple(combo.values())] = by_input[text]

        # Ordered like tools/lock.py orders a project's lock: by package name, then version.
        all_lines = sorted({line for lines in lines_of.values() for line in lines},
                           key=lambda line: (lock_tool.PIN.match(line)[1], line))
        out = lock_tool.header([PROJECT / "requirements.in"], freeze)
        for line in all_lines:
            having = [dict(zip(OPTIONS, key)) for key, lines in lines_of.items() if line in lines]
            if len(having) == len(combos):
                out.append(line)
            else:
                out += ["{%- if " + condition(having) + " %}", line, "{%- endif %}"]
        (PROJECT / "requirements.txt").write_text("\n".join(out) + "\n")

        # Dev tools do not depend on the answers: resolve them against the default project's lock.
        base = folder / "base.txt"
        base.write_text("\n".join(lines_of[("drive", "tensorboard")]) + "\n")
        dev_preferred = current_pins(PROJECT / "requirements-dev.txt", upgrade)
        dev = lock_tool.lock([PROJECT / "requirements-dev.in"], [base], uv, freeze, preferences=dev_preferred)
        dev_lock = lock_tool.header([PROJECT / "requirements-dev.in"], freeze) + dev
        (PROJECT / "requirements-dev.txt").write_text("\n".join(dev_lock) + "\n")
    print(f"lock: wrote {PROJECT.name}/requirements.txt and requirements-dev.txt")


if __name__ == "__main__":
    main()
