"""The model card, `results/reports/model_card.md`: what the model is, what it was trained on and
how, how well it does, the files to ship, and what it is for.

`evaluate` writes it whole (the last DVC stage; notebook 03 shows it); `export` rewrites only its
"Exported files" section. The section "Intended use and limits" is yours: whatever is between its
two HTML comment markers is kept, word for word, each time the card is written. Everything here
is read from files the other commands wrote: data/manifest.json and data/processed/spec.json
(`prepare`), results/metrics/train.json and the run record results/runs/<run_id>/manifest.json of
the run that saved the model (`train`), the test metrics (`evaluate`), results/metrics/export.json
(`export`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..config import COMMAND, Params
from ..core.files import atomic_write, file_sha256
from ..core.storage import MODEL_FILE, PROJECT_SLUG, SIDECAR_FILE, TRAIN_METRICS, results_root
from ..data import manifest
from ..data.split import origin
from ..spec import SPLITS, DataSpec
from ..task import Evaluation

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
# Keys left out of "params that differ from the defaults": where a job ran, not what it trained.
NOT_TRAINING = ({% if cookiecutter.vertex_ai == "yes" %}"vertex",{% endif %})


def card_path(project_dir: Path) -> Path:
    """`results/reports/model_card.md` (under `$PROJECT_RESULTS_DIR` when that is set)."""
    return results_root(Path(project_dir)) / CARD


def card_markdown(project_dir: Path) -> str:
    """The card's text, for notebook 03 (`Markdown(card_markdown(PROJECT))`)."""
    path = card_path(project_dir)
    if not path.is_file():
        return f"No model card yet: `{COMMAND} evaluate` writes {CARD}."
    return path.read_text(encoding="utf-8")


def write_card(params: Params, project_dir: Path, spec: DataSpec, evaluation: Evaluation) -> Path:
    """Write the whole card, keeping the user's section of the card that is there."""
    project_dir = Path(project_dir)
    results = results_root(project_dir)
    path = results / CARD
    old = path.read_text(encoding="utf-8") if path.is_file() else ""
    sidecar = _read_json(results / SIDECAR_FILE) or {  # a model saved without one: the data's
        "task": spec.task, "names": spec.names, "input_kind": spec.kind,
        "input_shape": list(spec.input_shape), "feature_names": spec.feature_names,
    }  # fmt: skip
    train = _read_json(results / TRAIN_METRICS)
    model_sha = file_sha256(results / MODEL_FILE)
    run = find_run(results, model_sha)
    model_cfg = (run or {}).get("params", {}).get("model") or params.to_dict()["model"]
    architecture = model_cfg["architecture"]
    if architecture == "backbone":
        architecture += f": {model_cfg['backbone']} (weights {model_cfg['weights']})"
    trained_on = ((run or {}).get("data", {}).get("manifest") or {}).get("sha256")
    sections = [
        f"# Model card: {PROJECT_SLUG}",
        f"<!-- Written by `{COMMAND} evaluate` (its exports section also by `export`). Edit only "
        'the section "Intended use and limits": the rest is rewritten each time. -->',
        model_section(sidecar, model_sha, architecture),
        data_section(project_dir, spec, trained_on),
        training_section(run, train),
        metrics_section(sidecar["task"], evaluation),
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
    """What the user wrote between the intended-use markers of the card `old` (to its end
    when the closing marker is gone), or the placeholder for a new card."""
    start = old.find(USER_BEGIN)
    if start < 0:
        return USER_PLACEHOLDER
    body = old[start + len(USER_BEGIN) :]
    end = body.rfind(USER_END)
    return (body[:end] if end >= 0 else body).strip("\n")


def _between(begin: str, end: str, body: str) -> str:
    return f"{begin}\n{body.strip(chr(10))}\n{end}"


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.is_file() else {}


def model_section(sidecar: dict[str, Any], model_sha: str, architecture: str) -> str:
    """What the model takes and gives (from model.json)."""
    kind, names = sidecar["task"], sidecar["names"]
    shape = "x".join(str(d) for d in sidecar["input_shape"])
    inputs = {
        "image": f"images as pixel values 0-255, {shape} (height x width x channels)",
        "vector": f"{shape} numbers: {_listed(sidecar.get('feature_names') or [])}",
    }.get(sidecar["input_kind"], f"{sidecar['input_kind']} ({shape})")
    outputs = {
        "classification": f"a probability per class ({len(names)}: {_listed(names)}), sum 1",
        "multilabel": f"a probability per label ({len(names)}: {_listed(names)}); a label is "
        f"predicted at {sidecar.get('threshold', 0.5)} or more",
        "regression": f"the value of `{names[0]}`, in its own units",
    }.get(kind, kind)
    rows = [
        ["file", f"`results/{MODEL_FILE}` (sha256 `{model_sha[:12]}`), `model.json` beside it"],
        ["task", kind],
        ["architecture", architecture],
        ["inputs", inputs],
        ["outputs", outputs],
    ]
    return "## Model\n\n" + _table(["", ""], rows)


def data_section(project_dir: Path, spec: DataSpec, trained_on: str | None) -> str:
    """Source, data version, the split and its sizes, the classes' balance."""
    doc = manifest.load(project_dir) or {}
    path = project_dir / manifest.MANIFEST
    sha = file_sha256(path) if path.is_file() else None
    version = f"`{manifest.MANIFEST}` sha256 `{sha[:12]}`" if sha else "no data manifest"
    if sha and trained_on and trained_on != sha:
        version += f" (**the model was trained on another version**: `{trained_on[:12]}`)"
    source = doc.get("source", "?") + (f" (`{doc['data_path']}`)" if doc.get("data_path") else "")
    sizes = ", ".join(f"{name} {count}" for name, count in spec.counts.items())
    rows = [
        ["source", source],
        ["data version", version],
        ["split", split_text(spec)],
        ["examples", sizes],
    ]
    text = "## Data\n\n" + _table(["", ""], rows)
    counts = spec.extra.get("class_counts")
    if spec.task == "regression":
        text += (
            f"\n\nTarget `{spec.names[0]}` on the training split: mean {spec.target_mean:.4g}, "
            f"standard deviation {spec.target_std:.4g}."
        )
    elif counts:
        what = "label (positives)" if spec.task == "multilabel" else "class"
        header = [what, *counts]
        rows = [[n, *(counts[s][i] for s in counts)] for i, n in enumerate(spec.names)]
        text += "\n\nExamples per " + what.split()[0] + " and split:\n\n" + _table(header, rows)
    return text


def split_text(spec: DataSpec) -> str:
    """How `prepare` made each split (data/split.py's record in spec.json), in words."""
    record = spec.split
    if not record:
        return "not recorded (run `prepare` again)"
    came = "; ".join(f"{s}: {origin(spec, s)}" for s in SPLITS if spec.counts.get(s))
    return f"`data.split: {record.get('method', '?')}`; {came}"


def find_run(results: Path, model_sha: str) -> dict[str, Any] | None:
    """The run record of the run that saved this model: the newest one whose artifacts hold
    `model.keras` with this sha256 (None when no record matches)."""
    for path in sorted((results / "runs").glob("*/manifest.json"), reverse=True):
        record = _read_json(path)
        for artifact in record.get("artifacts", []):
            if artifact.get("sha256") == model_sha and artifact["path"].endswith(MODEL_FILE):
                return record
    return None


def training_section(run: dict[str, Any] | None, train: dict[str, Any]) -> str:
    """How the model was trained: the run, commit, seed, hardware, time, steps, resumes, and
    the params that differ from the defaults (run record and train.json)."""
    if run is None:
        head = [["run", "no run record in results/runs/ holds this model.keras (sha256)"]]
        return "## Training\n\n" + _table(["", ""], head + _train_rows(train))
    git, env, timing = run.get("git", {}), run.get("environment", {}), run.get("timing", {})
    commit = f"`{git['commit'][:12]}` on {git.get('branch')}" if git.get("commit") else "none yet"
    if git.get("dirty"):
        commit += " (**uncommitted changes**: the commit alone does not reproduce it)"
    tf, python, machine = env.get("tensorflow", {}), env.get("python", {}), env.get("platform", {})
    hardware = (
        f"{env.get('colab', {}).get('accelerator', '?')}, {machine.get('cpu_count', '?')} CPUs, "
        f"{machine.get('memory_gb', '?')} GB RAM; TensorFlow {tf.get('version', '?')}, Keras "
        f"{tf.get('keras_version', '?')}, Python {python.get('version', '?')}"
    )
    rows = [
        ["run", f"`{run['run_id']}` ({run.get('status')}), record `results/runs/{run['run_id']}/`"],
        ["commit", commit],
        ["hardware", hardware],
        ["time", f"{timing.get('started_at')} to {timing.get('finished_at')}"],
        *_train_rows(train),
    ]
    changes = param_changes(run.get("params", {}))
    table = _table(["key", "value", "default"], changes) if changes else "None: all defaults."
    return (
        "## Training\n\n"
        + _table(["", ""], rows)
        + "\n\nParams that differ from the defaults (config.py):\n\n"
        + table
    )


def _train_rows(train: dict[str, Any]) -> list[list[Any]]:
    """Seed, steps, speed, resumes and the final validation scores from train.json."""
    if not train:
        return [["training metrics", "no results/metrics/train.json"]]
    steps = f"{train.get('steps')} (train.epochs {train.get('epochs')}"
    steps += f", global batch {train.get('global_batch')}, {train.get('replicas')} replica(s)"
    steps += f", {train.get('strategy')}); best at step {train.get('best_step')} by"
    steps += f" {train.get('monitor')}" + (", stopped early" if train.get("stopped_early") else "")
    resumes = train.get("resumes")
    resumed = "not recorded" if resumes is None else str(resumes)
    if resumes:
        resumed += f" (this session started at step {train.get('started_at_step', '?')})"
    validation = {k: v for k, v in train.items() if k.startswith("val_") and _is_number(v)}
    return [
        ["seed", f"{train.get('seed')} (deterministic ops: {train.get('deterministic')})"],
        ["steps", steps],
        [
            "speed",
            f"{train.get('examples_per_sec')} examples/s, {train.get('wall_time_s')} s "
            f"in the last session, precision {train.get('precision')}",
        ],
        ["resumes", resumed],
        ["class weights", _class_weights(train)],
        ["validation", ", ".join(f"{k} {_number(v)}" for k, v in validation.items())],
    ]


def _class_weights(train: dict[str, Any]) -> str:
    """The loss's class (multilabel: positive) weights, from train.json."""
    weights = train.get("class_weight")
    if not weights:
        return "none (unweighted loss)"
    shown = ", ".join(f"{name} {_number(w)}" for name, w in weights.items())
    return shown + ("; val_loss weighted alike" if train.get("val_loss_weighted") else "")


def param_changes(params: dict[str, Any]) -> list[list[Any]]:
    """[key, value, default] for each params key the run set to other than config.py's
    default (the sections in NOT_TRAINING left out)."""
    defaults = _flat(Params().to_dict())
    return [
        [f"`{key}`", _cell(value), _cell(defaults.get(key, "(no default)"))]
        for key, value in _flat(params).items()
        if key.split(".")[0] not in NOT_TRAINING and defaults.get(key, object()) != value
    ]


def _flat(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def metrics_section(kind: str, evaluation: Evaluation) -> str:
    """The test metrics overall, then per class or label (or the residuals: regression)."""
    metrics = evaluation.metrics
    overall = [
        [key.removeprefix("test_"), _number(value)]
        for key, value in metrics.items()
        if key != "test_examples" and _is_number(value)
    ]
    scored_on = metrics.get("scored_on") or f"the test split ({metrics.get('test_examples')})"
    text = (
        f"## Test metrics\n\nOn {scored_on} (`results/metrics/evaluate.json`, the plots' data "
        "in `results/plots/`; `test_loss` unweighted, whatever the class weights; each example's "
        "prediction in `results/predictions/test.csv`):\n\n" + _table(["metric", "value"], overall)
    )
    per_name = {"classification": "per_class.csv", "multilabel": "per_label.csv"}.get(kind)
    rows = evaluation.plots.get(per_name) if per_name else None
    if rows:
        body = [[row[0], *(_number(v) for v in row[1:])] for row in rows[1:]]
        text += f"\n\nPer {rows[0][0]}:\n\n" + _table(rows[0], body)
    return text


def exports_table(results: Path) -> str:
    """The files to ship that exist now, with their sizes (a file from an older model.keras is
    marked), then the LiteRT exports' test metrics beside the Keras model's (export.json)."""
    from .export import load_exports

    model = results / MODEL_FILE
    current = file_sha256(model) if model.is_file() else None
    rows = [
        [_shown(name), _size(results / name), what]
        for name, what in ((MODEL_FILE, "the Keras model"), (SIDECAR_FILE, "its sidecar"))
        if (results / name).is_file()
    ]
    checked, vocabularies = [], {}
    for name, entry in load_exports(results).items():
        path = results / name  # an absolute name stays as it is
        if not path.exists():
            continue
        what = _export_text(entry)
        if entry.get("model_sha256") != current:
            what = "**stale: from an older model.keras, export again**; " + what
        elif entry.get("checked_on") == "test split":
            checked.append((_shown(name), _size(path), entry))
        rows.append([_shown(name), _size(path), what])
        if entry.get("vocabulary") and (results / entry["vocabulary"]).is_file():
            vocabularies[entry["vocabulary"]] = "the token ids' vocabulary: " + entry["tokenize"]
    rows += [[_shown(name), _size(results / name), what] for name, what in vocabularies.items()]
    text = _table(["file", "size", "what"], rows)
    return text + ("\n\n" + litert_table(checked, _size(model)) if checked else "")


def litert_table(checked: list[tuple[str, str, dict[str, Any]]], keras_size: str) -> str:
    """The Keras model and each LiteRT export on the test split: headline metrics, the largest
    output difference and the share of examples where they pick the same class."""
    from .export import HEADLINE

    first = checked[0][2]
    names = [m for m in HEADLINE.get(first.get("task", ""), ()) if m in first["keras"]]
    classes = first.get("same_class") is not None
    header = ["model", "weights", "size", *names, "largest difference"]
    header += ["same class"] if classes else []
    keras = [_shown(MODEL_FILE), "float32", keras_size]
    rows = [keras + [_number(first["keras"][m]) for m in names] + [""] * (1 + classes)]
    for shown, size, entry in checked:
        weights = {"none": "float32", "int8": "int8 (dynamic range)"}.get(entry["quantize"])
        row = [shown, weights or entry["quantize"], size]
        row += [_number(entry["litert"][m]) for m in names] + [f"{entry['max_abs_diff']:.1e}"]
        rows.append(row + ([f"{entry['same_class']:.1%}"] if classes else []))
    return (
        f"On the {first['examples']} test examples ({first['interpreter']} runs the `.tflite` "
        "files; the largest difference is over every output, in your units):\n\n"
        + _table(header, rows)
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


def _table(header: list[Any], rows: list[list[Any]]) -> str:
    """A Markdown table; `|` in a cell is escaped."""

    def line(cells: list[Any]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

    return "\n".join([line(header), line(["---"] * len(header)), *(line(r) for r in rows)])


def _shown(name: str) -> str:
    """A file under the results root as the project shows it (an absolute path as it is)."""
    return f"`{name}`" if Path(name).is_absolute() else f"`results/{name}`"


def _listed(names: list[str], most: int = 12) -> str:
    shown = ", ".join(f"`{n}`" for n in names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _number(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, str) and value.replace(".", "", 1).lstrip("-").isdigit():
        return _number(float(value)) if "." in value else value
    return str(value)


def _cell(value: Any) -> str:
    return f"`{json.dumps(value)}`" if not isinstance(value, str) else f"`{value}`"


def _size(path: Path) -> str:
    """Bytes of a file, or of every file under a folder, in KiB or MiB."""
    size = (
        path.stat().st_size
        if path.is_file()
        else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    )
    return f"{size / 1024:.1f} KiB" if size < 2**20 else f"{size / 2**20:.1f} MiB"
