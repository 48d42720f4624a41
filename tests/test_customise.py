"""docs/customise.md's worked examples, run as a user would: each file written into a baked
project beside model.py, then the command the page shows (with tiny training settings added)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

MODULE = "colab_project"
TINY = ["train.epochs=1", "train.batch_size=64", "train.steps_per_execution=10"]


def examples(page: str) -> list[tuple[str, str, str]]:
    """(file path, code, command) of every example: a file name line, its python block, and the
    bash block that follows."""
    pattern = r"^`(src/[^`]+\.py)`[^\n]*\n+```python\n(.*?)^```\n.*?^```bash\n(.*?)^```"
    return re.findall(pattern, page, flags=re.S | re.M)


def test_every_worked_example_runs(default_project: Path, project_python: Path, tmp_path: Path) -> None:
    project = tmp_path / "project"
    shutil.copytree(default_project, project, ignore=shutil.ignore_patterns(".git"))
    found = examples((project / "docs" / "customise.md").read_text())
    assert {Path(path).stem for path, _, _ in found} == {"tiny_resnet", "jsonl", "noise", "focal"}
    calls = []
    for n, (path, code, command) in enumerate(found):
        (project / path).write_text(code)
        args = shlex.split(command.strip())
        assert args[:3] == ["python", "-m", MODULE], command
        if args[3] == "train":
            args += [f"--set={item}" for item in [*TINY, f"run_name=example-{n}"]]
        calls.append(args[3:])
    calls.sort(key=lambda call: call[0] == "prepare")  # the trains on the bundled digits first
    rows = [{"x": [i % 7, (i * 3) % 5], "label": "odd" if i % 2 else "even"} for i in range(60)]
    lines = "".join(json.dumps(row) + "\n" for row in rows)
    (project / "data" / "external" / "rows.jsonl").write_text(lines)
    (project / "tests" / "inputs").mkdir()
    (project / "tests" / "inputs" / "jsonl.jsonl").write_text(lines)  # the sample the page asks for
    # A user's line that is no JSON, has a word for a number, or more numbers than the first
    # line: one line naming the file and the line, no traceback.
    bad_lines = {
        "broken": '{"x": [1, 2], "label": "odd"\n',
        "word": '{"x": [1, "two"], "label": "odd"}\n',
        "longer": '{"x": [1, 2, 3], "label": "odd"}\n',
    }
    bad = []
    for name, bad_line in bad_lines.items():
        broken = lines.splitlines(keepends=True)
        broken[2] = bad_line
        (project / "data" / "external" / f"{name}.jsonl").write_text("".join(broken))
        bad.append(["prepare", "--set", "data.source=jsonl", "--set", f"data.path=data/external/{name}.jsonl"])
    # JSON's null, which the page's reader reads as NaN: prepare checks every source's numbers.
    with_null = lines.splitlines(keepends=True)
    with_null[2] = '{"x": [1, null], "label": "odd"}\n'
    (project / "data" / "external" / "null.jsonl").write_text("".join(with_null))
    bad.append(["prepare", "--set", "data.source=jsonl", "--set", "data.path=data/external/null.jsonl"])
    (project / "data" / "external" / "empty.jsonl").write_text("\n")  # no rows: one line too
    bad.append(["prepare", "--set", "data.source=jsonl", "--set", "data.path=data/external/empty.jsonl"])
    # Nested lists read, train and predict as flat vectors: x0..x3, row by row.
    nested = [{"x": [[i % 7, i % 2], [i % 3, 1]], "label": "odd" if i % 2 else "even"} for i in range(60)]
    (project / "data" / "external" / "nested.jsonl").write_text("".join(json.dumps(r) + "\n" for r in nested))
    (project / "new.csv").write_text("x0,x1,x2,x3\n1,1,2,1\n4,0,1,1\n")
    flat = [["prepare", "--set", "data.source=jsonl", "--set", "data.path=data/external/nested.jsonl"],
            ["train", *(f"--set={item}" for item in [*TINY, "train.batch_size=16", "run_name=nested"])], ["predict", "new.csv"]]
    script = (
        f"import sys; from {MODULE}.__main__ import main\n"
        f"codes = [main(args) for args in {calls!r}]\n"
        f"print('EXIT CODES', codes, 'BROKEN', [main(args) for args in {bad!r}])\n"
        f"codes += [main(args) for args in {flat!r}]; sys.exit(max(codes))"
    )
    env = {**os.environ, "PROJECT_STORAGE_DIR": str(tmp_path / "storage"), "PYTHONPATH": str(project / "src")}
    run = subprocess.run([str(project_python), "-c", script], cwd=project, env=env,
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert run.stdout.count("Done: step") == sum(call[0] == "train" for call in calls) + 1
    assert "BROKEN [2, 2, 2, 2, 2]" in run.stdout and "Traceback" not in run.stderr, run.stderr[-4000:]
    errors = [line for line in run.stderr.splitlines() if line.startswith("error: ")]
    assert errors[:-1] == [
        *(f"error: data/external/{name}.jsonl line 3: not a JSON object with 'x', as many numbers "
          """as on the first line, and 'label' (example: {"x": [0.5, 2.0], "label": "cat"})"""
          for name in bad_lines),
        "error: data/external/null.jsonl line 3: nan among its 2 numbers; fill in the missing or "
        "infinite values, or leave the example out (example: [0.5, 0.5])",
    ], run.stderr[-4000:]
    assert errors[-1].startswith("error: data.path: data/external/empty.jsonl holds no examples")
    assert "Prepared 60 examples from jsonl (classification: 2 class names; vectors 2)" in run.stdout
    spec = json.loads((project / "data" / "processed" / "spec.json").read_text())
    assert spec["input_shape"] == [4] and spec["feature_names"] == ["x0", "x1", "x2", "x3"]
    predictions = (project / "results" / "predictions.csv").read_text().splitlines()
    assert predictions[0].startswith("id,prediction,prob_even,prob_odd") and len(predictions) == 3
    # `make test` takes each of them, as the README says: the loop's tests of every component.
    names = " or ".join(sorted(Path(path).stem for path, _, _ in found))
    loop = subprocess.run([str(project_python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", names,
                           "tests/test_components.py", "tests/test_end_to_end.py"],
                          cwd=project, env=env, capture_output=True, text=True, timeout=900)  # fmt: skip
    assert loop.returncode == 0 and re.search(r"^4 passed", loop.stdout, re.M), loop.stdout[-6000:]


def test_the_module_map_lists_the_package(default_project: Path) -> None:
    page = (default_project / "docs" / "customise.md").read_text()
    section = page.split("## The package", 1)[1]
    listed = set(re.findall(r"^\| `([a-z_/]+\.py)` \|", section, flags=re.M))
    package = default_project / "src" / MODULE
    tree = {p.relative_to(package).as_posix() for p in package.rglob("*.py") if p.name != "__init__.py"}
    assert listed == tree
