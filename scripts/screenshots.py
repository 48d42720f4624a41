"""`make screenshots`: the pictures of a generated project in the README and on the site.

    .venv/bin/python scripts/screenshots.py [--keep DIR] [--reports DIR]

Bakes the default project, installs its lock (as `make demo` does), runs its notebooks 01-03 the
way the project runs them headless (`python -m colab_project notebooks --only 01 02 03`: papermill,
then an HTML report per notebook in results/reports/), and has a real headless Chromium show the
training and evaluation reports. Writes, under docs/images/:

- 02_train.png, 03_evaluate.png: each report from its training or evaluation section on;
- notebooks.png: both side by side in one window (the README's picture).

Needs Debian's Chromium (`apt-get install -y chromium`; run as root here, hence --no-sandbox) and
takes about 2 minutes on 2 cores. Not part of `make docs` or CI: rerun it when the notebooks'
output changes and commit the PNGs. `--reports DIR` reuses the HTML reports of an earlier run
(`--keep` keeps the project; its reports are in DIR/colab-project/results/reports).
"""

from __future__ import annotations

import argparse
import html
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import project_env

ROOT = Path(__file__).resolve().parent.parent
IMAGES = ROOT / "docs" / "images"
NOTEBOOKS = ("01", "02", "03")
# Each report opens at its section that shows the run (the heading's id in nbconvert's HTML).
SHOTS = {"02_train": "Train", "03_evaluate": "Evaluate"}
PAGE = (1000, 2000)  # CSS pixels of one report's picture on the site
PANE = (960, 1000)  # and of each report's pane in the README's picture
# Chromium on a machine without Google's services: no sandbox as root, no GPU, no background
# connections (they are refused here, many at a time), a new empty profile each run.
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--hide-scrollbars", "--force-device-scale-factor=1",
]  # fmt: skip
# The reports are shown in frames: a frame opened at a section's #id is drawn as scrolled there
# (Chromium's --screenshot of a page opened at an #id draws a blank window).
FRAMES = """<!doctype html>
<html><head><meta charset="utf-8"><style>
body {{ margin: 0; background: #d0d7de; font: 15px system-ui, sans-serif; }}
main {{ display: flex; gap: {gap}px; padding: {gap}px; }}
figure {{ margin: 0; flex: 1; background: white; border: 1px solid #8c959f; }}
figcaption {{ padding: 6px 10px; background: #f6f8fa; border-bottom: 1px solid #8c959f; }}
iframe {{ display: block; width: 100%; height: {height}px; border: 0; }}
</style></head><body><main>{figures}</main></body></html>
"""
CAPTION = 32  # the height of a figure's caption bar, in CSS pixels


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        sys.exit("screenshots: Chromium not found; install it: apt-get update && apt-get install -y chromium")
    return found


def screenshot(url: str, out: Path, size: tuple[int, int], profile: Path) -> None:
    """One PNG of `url` as Chromium shows it in a window of `size` CSS pixels."""
    command = [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
               f"--window-size={size[0]},{size[1]}", f"--screenshot={out}", url]  # fmt: skip
    run = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if run.returncode != 0 or not out.is_file() or out.stat().st_size < 20_000:  # blank: ~7 kB
        sys.exit(f"screenshots: Chromium made no picture of {url}:\n{run.stderr[-3000:]}")
    print(f"screenshots: {out.relative_to(ROOT)} <- {url}", flush=True)


def run_notebooks(folder: Path) -> Path:
    """Bake the default project into `folder`, install it, run notebooks 01-03; its reports folder."""
    project = project_env.bake(folder)
    python = project_env.project_python(project)
    print(f"screenshots: baked {project}, lock installed in {python.parent.parent}", flush=True)
    # As a user runs it on their machine: the project's tools first on PATH, storage in the project.
    env = {**os.environ, "PATH": f"{python.parent}{os.pathsep}{os.environ['PATH']}"}
    for name in ("PROJECT_STORAGE_DIR", "COLAB_RELEASE_TAG", "PROJECT_RESULTS_DIR", "TF_CONFIG", "MLFLOW_TRACKING_URI"):
        env.pop(name, None)
    module = next(p.name for p in (project / "src").iterdir() if (p / "__main__.py").is_file())
    command = [str(python), "-m", module, "notebooks", "--only", *NOTEBOOKS]
    print("screenshots: $ " + " ".join(command[1:]), flush=True)
    if subprocess.run(command, cwd=project, env=env).returncode != 0:
        sys.exit(f"screenshots: the notebooks failed (the message above; reports in {project}/results/reports)")
    return project / "results" / "reports"


def frames(reports: Path, names: list[str], size: tuple[int, int], gap: int, page: Path) -> tuple[int, int]:
    """Write a page showing these reports side by side, each opened at its section, in panes of
    `size`; return the window size that holds it."""
    figures = ""
    for name in names:
        report, section = (reports / name).with_suffix(".html"), SHOTS[name]
        if f'id="{section}"' not in report.read_text(encoding="utf-8"):
            sys.exit(f"screenshots: {report} has no section {section!r}: update SHOTS in {__file__}")
        caption = html.escape(f"notebooks/{name}.ipynb: results/reports/{name}.html")
        figures += f'<figure><figcaption>{caption}</figcaption><iframe src="{report.as_uri()}#{section}"></iframe></figure>'
    page.write_text(FRAMES.format(gap=gap, height=size[1], figures=figures), encoding="utf-8")
    return len(names) * (size[0] + gap) + gap + 2 * len(names), size[1] + CAPTION + 2 * gap


def take(reports: Path, work: Path) -> None:
    IMAGES.mkdir(parents=True, exist_ok=True)
    for name in SHOTS:
        window = frames(reports, [name], PAGE, 0, work / f"{name}.html")
        screenshot((work / f"{name}.html").as_uri(), IMAGES / f"{name}.png", window, work / f"profile-{name}")
    window = frames(reports, list(SHOTS), PANE, 12, work / "notebooks.html")
    screenshot((work / "notebooks.html").as_uri(), IMAGES / "notebooks.png", window, work / "profile-both")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="bake into this folder and keep it (default: a temporary one)")
    parser.add_argument("--reports", type=Path, help="take the pictures from these HTML reports; run nothing")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="screenshots-") as tmp:
        work = Path(tmp)
        if args.reports:
            reports = args.reports.resolve()
        else:
            folder = args.keep.resolve() if args.keep else work
            if args.keep and folder.exists() and any(folder.iterdir()):
                sys.exit(f"screenshots: --keep {folder}: the folder is not empty; name a new one")
            reports = run_notebooks(folder)
        take(reports, work)


if __name__ == "__main__":
    main()
