"""The model card, `results/reports/model_card.md` (docs/customise.md, "The model card").

`evaluate` writes it whole, `export` only its "Exported files"; what the user writes between the
markers of "Intended use and limits" is kept, word for word.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from ..config import COMMAND, Params, flat, load_params
from ..core.files import atomic_write, file_sha256, read_json
from ..core.storage import (
    EXPORTS,
    MODEL_FILE,
    PROJECT_SLUG,
    SIDECAR_FILE,
    TRAIN_METRICS,
    results_root,
)
from ..data import manifest
from ..data.split import describe, origin
from ..spec import SPLITS, DataSpec
from ..tasks.base import Evaluation, Task, make_task, task_class

CARD = "reports/model_card.md"  # under the results root
USER_BEGIN = "<!-- intended-use: yours; regeneration keeps everything up to the closing marker -->"
USER_END = "<!-- /intended-use -->"
EXPORTS_BEGIN = "<!-- exports: rewritten by `evaluate` and `export` -->"
EXPORTS_END = "<!-- /exports -->"
USER_PLACEHOLDER = """\
_Fill this in; `evaluate` and `export` keep it._ What the model is for, and what it is not for;
who uses its outputs and how (a threshold, a person who checks them); data it has not seen and
should not be trusted on (other sources, devices, populations, time periods); known failure
cases; the metric that matters for the use, and the level that is good enough."""
# Keys left out of "params that differ": where and how a job ran, not what it trained.
NOT_TRAINING = ("run_name", "sweep", "distribute"{% if cookiecutter.vertex_ai %}, "vertex"{% endif %})


def card_markdown(project_dir: Path) -> str:
    """The card's text, for notebook 03 (`Markdown(card_markdown(PROJECT))`)."""
    path = results_root(Path(project_dir)) / CARD
    if not path.is_file():
        return f"No model card yet: `{COMMAND} evaluate` writes {CARD}."
    return path.read_text(encoding="utf-8")


def write_card(
    params: Params, project_dir: Path, spec: DataSpec, evaluation: Evaluation, run: dict[str, Any]
) -> Path:
    """Write the whole card, keeping the user's section of the card that is there (`run`: the
    saved model's run record, `find_run`'s, or {})."""
    project_dir = Path(project_dir)
    results = results_root(project_dir)
    path = results / CARD
    old = path.read_text(encoding="utf-8") if path.is_file() else ""
    model_sha = file_sha256(results / MODEL_FILE)
    task = make_task(params, spec)  # with the class weights that train.class_weight gives
    # The run record holds every number of the run; train.json the ones DVC compares.
    numbers = run.get("metrics") or read_json(results / TRAIN_METRICS)
    sections = [
        f"# Model card: {PROJECT_SLUG}",
        f"<!-- Written by `{COMMAND} evaluate` (its exports section also by `export`). Edit only "
        'the section "Intended use and limits": the rest is rewritten each time. -->',
        model_section(read_json(results / SIDECAR_FILE), task, model_sha, run, params),
        data_section(project_dir, spec, task, run),
        training_section(run, numbers, task, params, project_dir),
        metrics_section(evaluation, describe(spec, "test")),
        "## Exported files\n\n" + _between(EXPORTS_BEGIN, EXPORTS_END, exports_table(results)),
        "## Intended use and limits\n\n" + _between(USER_BEGIN, USER_END, user_section(old)),
    ]
    if old and USER_BEGIN not in old:  # no markers (edited away): keep the user's whole card
        atomic_write(path.with_name(path.stem + ".previous.md"), old)
        print(f"Note: {path.name} had no intended-use markers; the old card is kept beside it")
    return atomic_write(path, "\n\n".join(s.rstrip() for s in sections) + "\n")


def update_exports(results: Path) -> Path | None:
    """Rewrite the card's "Exported files" section only (`export`); None without a card."""
    path = Path(results) / CARD
    if not path.is_file():
        return None
    text = path.read_text(encoding="utf-8")
    user = text.find(USER_BEGIN)
    head = text[:user] if user >= 0 else text  # markers quoted in the user's text do not count
    start, end = head.find(EXPORTS_BEGIN), head.find(EXPORTS_END)
    if start < 0 or end < start:
        return None  # markers edited away: `evaluate` writes the card again
    body = _between(EXPORTS_BEGIN, EXPORTS_END, exports_table(Path(results)))
    return atomic_write(path, text[:start] + body + text[end + len(EXPORTS_END) :])


def user_section(old: str) -> str:
    """The user's text between the intended-use markers of `old` (or to its end), else the
    placeholder."""
    start = old.find(USER_BEGIN)
    if start < 0:
        return USER_PLACEHOLDER
    body = old[start + len(USER_BEGIN) :]
    end = body.rfind(USER_END)
    return (body[:end] if end >= 0 else body).strip("\n")


def _between(begin: str, end: str, body: str) -> str:
    return f"{begin}\n{body.strip(chr(10))}\n{end}"


def model_section(
    sidecar: dict[str, Any], task: Task, model_sha: str, run: dict[str, Any], params: Params
) -> str:
    """What the model takes and gives (model.json; the task's kind says its outputs)."""
    model = run.get("params", {}).get("model") or params.to_dict()["model"]
    architecture = model["architecture"] + (f" {model['args']}" if model.get("args") else "")
    if model["architecture"] == "backbone":
        architecture += f": {model['backbone']} (weights {model['weights']})"
    shape = "x".join(str(d) for d in sidecar["input_shape"])
    inputs = {
        "image": f"images as pixel values 0-255, {shape} (height x width x channels)",
        "vector": f"{shape} numbers: {', '.join(sidecar.get('feature_names') or [])}",
    }.get(sidecar["input_kind"], f"{sidecar['input_kind']} ({shape})")
    kind = f" (kind {task.kind})" if task.kind != params.task.type else ""  # said once
    rows = [
        ["file", f"`results/{MODEL_FILE}` (sha256 `{model_sha[:12]}`), `model.json` beside it"],
        ["task", params.task.type + kind],
        ["architecture", architecture],
        ["inputs", inputs],
        ["outputs", task.outputs_text()],
    ]
    return "## Model\n\n" + table(rows)


def data_section(project_dir: Path, spec: DataSpec, task: Task, run: dict[str, Any]) -> str:
    """Source, data version, the split and its sizes, the classes' balance or the target."""
    doc = manifest.load(project_dir)
    path = project_dir / manifest.MANIFEST
    sha = file_sha256(path) if path.is_file() else None
    version = f"`{manifest.MANIFEST}` sha256 `{sha[:12]}`" if sha else "no data manifest"
    trained_on = (run.get("data", {}).get("manifest") or {}).get("sha256")
    if sha and trained_on and trained_on != sha:
        version += f" (**the model was trained on another version**: `{trained_on[:12]}`)"
    source = doc.get("source", "?") + (f" (`{doc['data_path']}`)" if doc.get("data_path") else "")
    came = "; ".join(f"{s}: {origin(spec, s)}" for s in SPLITS if spec.counts.get(s))
    rows = [
        ["source", source],
        ["data version", version],
        ["split", f"`data.split: {spec.split.get('method', '?')}`; {came}"],
        ["examples", ", ".join(f"{name} {count}" for name, count in spec.counts.items())],
    ]
    text = "## Data\n\n" + table(rows)
    counts = spec.extra.get("class_counts")
    if counts:
        per = pd.DataFrame(counts, index=pd.Index(spec.names, name=task.name_word)).reset_index()
        text += f"\n\nExamples per {task.name_word} and split:\n\n" + table(per)
    elif spec.target_mean is not None:
        text += (
            f"\n\nTarget `{spec.names[0]}` on the training split: mean {spec.target_mean:.4g}, "
            f"standard deviation {spec.target_std:.4g}."
        )
    return text


def training_section(
    run: dict[str, Any], train: dict[str, Any], task: Task, params: Params, project_dir: Path
) -> str:
    """The run record, its numbers (`train`), the class weights, and the run's params that differ
    from params.yaml (`--set`, a notebook's parameters, edits since)."""
    file = project_dir / "params.yaml"
    params = load_params(file) if file.is_file() else params
    ran = {**flat(params.to_dict()), **flat(run.get("params", {}))}  # the run's, else the file's
    fact = (run.get("facts") or {}).get
    git, env, timing = run.get("git", {}), run.get("environment", {}), run.get("timing", {})
    commit = f"`{git['commit'][:12]}` on {git.get('branch')}" if git.get("commit") else "none yet"
    if git.get("dirty"):
        commit += " (**uncommitted changes**: the commit alone does not reproduce it)"
    tf, python, machine = env.get("tensorflow", {}), env.get("python", {}), env.get("platform", {})
    weights = zip(task.names, task.class_weights, strict=False)  # none: unweighted
    resumed = str(fact("resumes", "not recorded"))
    if fact("resumes"):
        resumed += f" (this session started at step {fact('started_at_step', '?')})"
    run_row = "no run record in results/runs/ holds this model.keras (sha256)"
    if run:
        run_row = f"`{run['run_id']}` ({run['status']}), record `results/runs/{run['run_id']}/`"
    rows = [
        ["run", run_row],
        ["commit", commit],
        [
            "hardware",
            f"{fact('device', '?')}, "
            f"{machine.get('cpu_count', '?')} CPUs, {machine.get('memory_gb', '?')} GB RAM; "
            f"TensorFlow {tf.get('version', '?')}, Keras {tf.get('keras_version', '?')}, Python "
            f"{python.get('version', '?')}",
        ],
        ["time", f"{timing.get('started_at', '?')} to {timing.get('finished_at', '?')}"],
        ["seed", f"{ran['seed']} (deterministic ops: {ran['repro.deterministic']})"],
        [
            "steps",
            f"{train.get('steps', '?')} (global batch {fact('global_batch', '?')}, "
            f"{fact('replicas', '?')} replica(s), {fact('strategy', '?')}); best at step "
            f"{train.get('best_step', '?')} by {fact('monitor', ran['train.monitor'])}",
        ],
        [
            "speed",
            f"{train.get('examples_per_sec', '?')} examples/s, precision {fact('precision', '?')}",
        ],
        ["resumes", resumed],
        ["class weights", ", ".join(f"{n} {w:.4g}" for n, w in weights) or "none (unweighted)"],
        [
            "validation",
            ", ".join(f"{k} {number_text(v)}" for k, v in train.items() if k.startswith("val_")),
        ],
    ]
    changes = param_changes(run.get("params", {}), params)
    changed = table(changes, ["key", "run", "params.yaml"]) if changes else "None."
    differ = "Params of the run that differ from params.yaml"
    return f"## Training\n\n{table(rows)}\n\n{differ}:\n\n{changed}"


def param_changes(run_params: dict[str, Any], params: Params) -> list[list[Any]]:
    """[key, the run's value, params.yaml's] for each training key the run set otherwise."""
    now = flat(params.to_dict())
    return [
        [f"`{key}`", f"`{json.dumps(value)}`", f"`{json.dumps(now.get(key))}`"]
        for key, value in flat(run_params).items()
        if key.split(".")[0] not in NOT_TRAINING and now.get(key, object()) != value
    ]


def metrics_section(evaluation: Evaluation, scored_on: str) -> str:
    """What was scored, the test metrics overall, then per class or label."""
    overall = [[key.removeprefix("test_"), v] for key, v in evaluation.metrics.items()]
    text = (
        f"## Test metrics\n\nOn {scored_on} (the headline ones in `results/metrics/evaluate.json`, "
        "the plots' data in `results/plots/`; `test_loss` unweighted, whatever the class weights; "
        "each example's prediction in `results/predictions/test.csv`):\n\n"
        + table(overall, ["metric", "value"], ".4f")  # as `evaluate` prints them
    )
    if evaluation.table is not None:
        per = table(evaluation.table, digits=".4f")
        text += f"\n\nPer {evaluation.table.columns[0]}:\n\n" + per
    return text


def exports_table(results: Path) -> str:
    """The files to ship that exist now (those of an older model.keras marked), then the LiteRT
    exports' test metrics beside the Keras model's (export.json)."""
    model = results / MODEL_FILE
    current = file_sha256(model) if model.is_file() else None
    rows = [
        [_shown(n), _size(results / n), what]
        for n, what in ((MODEL_FILE, "the Keras model"), (SIDECAR_FILE, "its sidecar"))
        if (results / n).is_file()
    ]
    checked = []
    for name, entry in read_json(results / EXPORTS).items():
        # An absolute name stays as it is; `replaces`: an export a kill stopped (export again).
        if not (results / name).exists() or "replaces" in entry:
            continue
        what = _export_text(entry)
        if entry.get("model_sha256") != current:
            what = "**stale: from an older model.keras, export again**; " + what
        elif entry.get("checked_on") == "test split":
            checked.append((_shown(name), _size(results / name), entry))
        rows.append([_shown(name), _size(results / name), what])
        if entry.get("vocabulary") and (results / entry["vocabulary"]).is_file():
            vocabulary = entry["vocabulary"]
            rows.append([_shown(vocabulary), _size(results / vocabulary), entry["tokenize"]])
    text = table(rows, ["file", "size", "what"])
    return text + ("\n\n" + litert_table(checked, _size(model)) if checked else "")


def litert_table(checked: list[tuple[str, str, dict[str, Any]]], keras_size: str) -> str:
    """The Keras model and each LiteRT export on the test split."""
    first = checked[0][2]
    names = [m for m in task_class(first["task"]).headline if m in first["keras"]]
    same = ["same prediction"] if "same_prediction" in first else []  # names, not numbers
    header = ["model", "weights", "size", *names, "largest difference", *same]
    keras = [number_text(first["keras"][m]) for m in names]
    rows = [[_shown(MODEL_FILE), "float32", keras_size, *keras, "", *["" for _ in same]]]
    for shown, size, entry in checked:
        weights = {"none": "float32", "int8": "int8 (dynamic range)"}.get(entry["quantize"])
        metrics = [number_text(entry["litert"][m]) for m in names]
        diff = number_text(entry["max_abs_diff"], ".1e")
        shares = [number_text(entry["same_prediction"], ".1%") for _ in same]
        rows.append([shown, weights or entry["quantize"], size, *metrics, diff, *shares])
    return (
        f"On the {first['examples']} test examples ({first['interpreter']} runs the `.tflite` "
        "files; the largest difference is over every output, in your units):\n\n"
        + table(rows, header)
    )


def _export_text(entry: dict[str, Any]) -> str:
    """What an export is, in a few words."""
    if entry.get("format") == "saved_model":
        return "TensorFlow SavedModel, endpoint `serve` (TF Serving)"
    weights = {"none": "float32", "int8": "int8 dynamic range"}.get(entry["quantize"])
    text = f"LiteRT, {weights or entry['quantize']} weights, builtin ops only"
    text += f"; inputs {entry['inputs']}"
    if entry.get("checked_on") != "test split":
        text += f"; run on a probe example only, without test data ({entry.get('interpreter')})"
    return text


def table(rows: Any, header: list[str] | tuple[str, ...] = ("", ""), digits: str = ".4g") -> str:
    """A Markdown table of rows ([name, value] without a header) or a DataFrame: floats to
    `digits`, an int and text as they are (an id `007` stays), `|` escaped."""
    frame = (
        rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(rows, columns=header, dtype=object)
    )

    def cell(value: Any) -> Any:
        if isinstance(value, float):
            return f"{value:{digits}}"
        return value.replace("|", "\\|") if isinstance(value, str) else value

    return frame.map(cell).to_markdown(index=False, disable_numparse=True)


def _shown(name: str) -> str:
    """A file under the results root as the project shows it (an absolute path as it is)."""
    return f"`{name}`" if Path(name).is_absolute() else f"`results/{name}`"


def number_text(value: float | None, spec: str = ".4f") -> str:
    """A number of the JSON files as shown (a metric as the commands print it: 4 decimals): null
    (JSON has no NaN; a diverged run's) as nan."""
    return format(math.nan if value is None else value, spec)


def _size(path: Path) -> str:
    """Bytes of a file, or of every file under a folder, in KiB or MiB."""
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    size = sum(p.stat().st_size for p in files)
    return f"{size / 1024:.1f} KiB" if size < 2**20 else f"{size / 2**20:.1f} MiB"
