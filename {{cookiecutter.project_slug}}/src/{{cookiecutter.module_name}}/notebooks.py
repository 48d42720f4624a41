"""The notebooks' side of the package: the shared start of a session, and headless runs.

- `start_session` is what every notebook's setup cell calls once the package is importable:
  git hooks, the environment log, the seed.
- `run_notebooks` (`make notebooks`, `python -m <module> notebooks`) executes every numbered
  notebook with papermill, in order, on the bundled data, and writes each executed notebook and
  an HTML report of it to `results/reports/`.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

REPORTS = Path("results") / "reports"
PATTERN = "[0-9][0-9]_*.ipynb"


class NotebookError(RuntimeError):
    """A notebook failed; the message names it and the report that shows where."""


def start_session(project_dir: Path, seed: int | None = None, hooks: bool = True) -> Any:
    """Register the git hooks, log the environment, seed everything; return the params.

    `seed` overrides params.yaml's `seed` (a notebook parameter); None keeps it.
    """
    from .config import load_params
    from .environment import log_environment
    from .githooks import install
    from .seeding import seed_everything

    project_dir = Path(project_dir)
    params = load_params(project_dir / "params.yaml", [f"seed={seed}"] if seed is not None else [])
    if hooks:
        try:
            for line in install(project_dir):
                print(line)
        except (subprocess.CalledProcessError, OSError) as exc:
            detail = getattr(exc, "stderr", "") or exc
            print(f"WARNING: git hooks not registered ({detail}); run `make hooks`")
    log_environment(project_dir)
    try:
        seeded = seed_everything(params.seed, params.repro.deterministic)
    except ModuleNotFoundError as exc:  # Colab's TPU runtime ships no TensorFlow
        print(
            f"WARNING: {exc.name} is not installed: nothing was seeded, nothing can train here; "
            "use a GPU or CPU runtime, or `pip install tensorflow-tpu` on a TPU VM"
        )
        return params
    print(f"Seed {params.seed} ({', '.join(seeded)})")
    return params


def parse_parameters(items: list[str]) -> dict[str, Any]:
    """`["epochs=1", "run_name=nb"]` -> {"epochs": 1, "run_name": "nb"} (YAML types)."""
    parameters = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"-p {item!r}: expected NAME=VALUE (example: -p epochs=1)")
        parameters[key.strip()] = yaml.safe_load(text) if text.strip() else ""
    return parameters


def run_notebooks(
    project_dir: Path,
    parameters: dict[str, Any] | None = None,
    only: list[str] | None = None,
    timeout_s: int = 1800,
) -> list[Path]:
    """Execute the numbered notebooks in order; return the HTML reports written.

    Each notebook gets those of `parameters` that its `parameters` cell declares; a name that no
    notebook declares is an error (a typo would otherwise be ignored). `only` selects notebooks
    by name prefix, e.g. ["01", "02"].
    """
    import nbformat
    import papermill
    from nbconvert import HTMLExporter

    project_dir = Path(project_dir).resolve()
    notebooks = sorted((project_dir / "notebooks").glob(PATTERN))
    if only:
        notebooks = [nb for nb in notebooks if nb.name.startswith(tuple(only))]
    if not notebooks:
        raise NotebookError(f"no notebooks matching {PATTERN} in {project_dir / 'notebooks'}")
    parameters = parameters or {}
    declared = {nb: set(papermill.inspect_notebook(str(nb))) for nb in notebooks}
    unknown = set(parameters) - set().union(*declared.values())
    if unknown:
        known = ", ".join(sorted(set().union(*declared.values())))
        raise NotebookError(
            f"-p {sorted(unknown)[0]}: no notebook has this parameter (they have: {known}; "
            "example: -p epochs=1)"
        )
    out_dir = project_dir / REPORTS
    out_dir.mkdir(parents=True, exist_ok=True)
    exporter = HTMLExporter()
    reports = []
    for nb in notebooks:
        executed = out_dir / nb.name
        started = time.monotonic()
        print(f"Running {nb.relative_to(project_dir)} ...", flush=True)
        try:
            papermill.execute_notebook(
                str(nb),
                str(executed),
                parameters={k: v for k, v in parameters.items() if k in declared[nb]},
                cwd=str(nb.parent),
                kernel_name="python3",
                progress_bar=False,
                execution_timeout=timeout_s,
            )
            failed = None
        except papermill.PapermillExecutionError as exc:
            failed = exc
        html, _ = exporter.from_notebook_node(nbformat.read(executed, as_version=4))
        report = executed.with_suffix(".html")
        report.write_text(html, encoding="utf-8")
        reports.append(report)
        if failed is not None:
            raise NotebookError(
                f"{nb.name} failed in cell {failed.exec_count}: {failed.ename}: {failed.evalue} "
                f"(see {report})"
            )
        print(f"  {time.monotonic() - started:.0f} s -> {report.relative_to(project_dir)}")
    return reports
