"""Command line: `python -m <module> COMMAND [--params FILE] [--set KEY=VALUE ...]`.

Each command is one small function that calls one module; add a command by writing a
`cmd_<name>` function and registering it in `build_parser`. The modules that prepare, train,
evaluate or export, and what they import (TensorFlow: 10-20 s), are imported by their command when
it runs, so that `--help`, `env` or `hooks` start at once, also where TensorFlow is not installed.
"""

from __future__ import annotations

import argparse
import errno
import os
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

from .colab.githooks import install
from .colab.runtime_check import TPU_STOP, on_colab_tpu
from .config import COMMAND, ConfigError, Params, load_params
from .core.environment import log_environment
from .core.storage import results_root
from .data.manifest import ManifestMismatch
from .data.staging import StagingError, stage
from .registry import check
from .training.checkpoints import CheckpointMismatch, ResultsWriteError, without_op
from .training.lease import EXIT_LEASE_HELD, LeaseHeld
from .training.strategy import StrategyError

# A setting or the data (exit code 2), the hardware or the storage (1): docs/training-faults.md.
USER_ERRORS = (ConfigError, CheckpointMismatch, ManifestMismatch, StagingError)
RUN_ERRORS = (StrategyError, ResultsWriteError)
# A disk, a file's permissions or Google Drive's connection, met by any command: how to go on, by
# errno. TensorFlow's errors for them are no OSErrors, but say the same words (`os.strerror`).
REMOUNT = (
    "the storage's connection dropped: remount it (Google Drive, in a Colab cell: from "
    'google.colab import drive; drive.mount("/content/drive", force_remount=True))'
)
FREE_SPACE = "free some space (`df -h` shows each disk's free space)"
MAKE_YOURS = "make it yours to read and write (example: chmod u+rwX PATH)"
STORAGE_FIXES = {
    errno.ENOSPC: FREE_SPACE,
    errno.EDQUOT: FREE_SPACE,  # a quota's "full disk"
    errno.EACCES: MAKE_YOURS,
    errno.EPERM: MAKE_YOURS,
    errno.EROFS: "remount it read-write, or write elsewhere (PROJECT_RESULTS_DIR, "
    "PROJECT_STORAGE_DIR)",
    errno.EIO: REMOUNT,  # what Drive's FUSE mount answers once it dropped
    errno.ENOTCONN: REMOUNT,
    errno.ESTALE: REMOUNT,
}
# A command returns its exit code; None when it succeeded (0, as sys.exit takes None).
Command = Callable[[argparse.Namespace, Params], int | None]


def cmd_train(args: argparse.Namespace, params: Params) -> int:
    """Train, resuming the run named `run_name` (--fresh: deleting its checkpoints first)."""
    from .training.trainer import train  # when the command runs

    # The command to continue after a stop: the same one, without --fresh or --take-over.
    argv = [a for a in args.argv if a not in ("--fresh", "--take-over")]
    resume = shlex.join([*COMMAND.split(), *argv])
{%- if cookiecutter.vertex_ai %}
    if args.sweep_trial:  # a Vertex AI tuning trial: its values come as --<key>=<value>
        from .cloud.tuning import run_tuning_trial  # when the command runs

        return run_tuning_trial(
            params, args.project, args.sweep_trial, args.extra, args.overrides, args.params_file
        )
{%- endif %}
    return train(
        params,
        args.project,
        args.fresh,
        resume,
        take_over=args.take_over,
        new_run_if_changed=args.new_run_if_changed,
    ).exit_code


def cmd_speed(args: argparse.Namespace, params: Params) -> None:
    """Time the input pipeline, the training step and both; name the bottleneck."""
    from .training.speed import speed  # when the command runs

    if args.steps < 1:
        raise ConfigError(f"--steps: expected a positive integer, got {args.steps} (example: 50)")
    speed(params, args.project, args.steps, shlex.join([*COMMAND.split(), *args.argv]))


def cmd_sweep(args: argparse.Namespace, params: Params) -> int:
    """Search hyperparameters (`sweep:`), resuming the study; --best promotes the best trial."""
    if args.best:
        from .training.sweep_results import promote_best  # when the command runs

        return promote_best(params, args.project, args.params_file)
    from .training.sweep import run_sweep  # when the command runs

    return run_sweep(params, args.project, args.params_file, args.overrides, args.take_over)


def cmd_prepare(args: argparse.Namespace, params: Params) -> None:
    """Write data/raw, the seeded split in data/processed and data/manifest.json."""
    from .data.prepare import prepare  # when the command runs

    prepare(params, args.project)


def cmd_evaluate(args: argparse.Namespace, params: Params) -> None:
    """Evaluate results/models/model.keras on the test split."""
    from .evaluation.evaluate import evaluate  # when the command runs

    check(params)  # the components' names and arguments, as every command checks them
    evaluate(params, args.project)


def cmd_predict(args: argparse.Namespace, params: Params) -> None:
    """Score a CSV, images or .txt files with results/models/model.keras."""
    from .evaluation.predict import predict  # when the command runs

    check(params)
    results = results_root(args.project)
    output = Path(args.output) if args.output else results / "predictions.csv"
    count = predict(Path(args.input), output, results / "models")
    print(f"Wrote {count} predictions to {output}", flush=True)


def cmd_export(args: argparse.Namespace, params: Params) -> None:
    """Export results/models/model.keras: a TensorFlow SavedModel (serving) or LiteRT `.tflite`."""
    from .evaluation import export  # when the command runs
    from .evaluation.model_card import update_exports

    check(params)
    results = results_root(args.project)
    if args.quantize and args.format != "litert":
        raise ConfigError(
            f"--quantize {args.quantize}: only a LiteRT model is quantised "
            f"(example: --format litert --quantize {args.quantize})"
        )
    default = export.LITERT_FILE if args.format == "litert" else export.SAVED_MODEL_DIR
    output = Path(args.output) if args.output else results / default
    if args.format == "litert":
        entry = export.export_litert(params, args.project, output, args.quantize)
        said = export.litert_summary(output, entry)
    else:
        export.export_saved_model(args.project, output)
        said = f"Wrote a SavedModel (endpoint `serve`) to {output}"
    update_exports(results)
    print(said, flush=True)


def cmd_stage(args: argparse.Namespace, params: Params) -> None:
    """Copy SRC to DEST (fast local disk), skipping what is already there."""
    print(stage(args.src, args.dest, verify=args.verify).summary())

{%- if cookiecutter.vertex_ai %}


def cmd_vertex(args: argparse.Namespace, params: Params) -> int:
    """Write a Vertex AI custom job spec; submit it with gcloud (or print the command)."""
    from .cloud.tuning import tuning_job  # when the command runs
    from .cloud.vertex import run_vertex

    check(params, space=args.sweep)  # here, not after a job has started in the cloud
    return run_vertex(
        params,
        args.project,
        args.dry_run,
        args.output,
        args.overrides,
        args.params_file,
        tuning_job=tuning_job if args.sweep else None,  # --sweep: trials that run the job
    )
{%- endif %}


def cmd_env(args: argparse.Namespace, params: Params) -> None:
    """Print the environment (TensorFlow build, devices, git, data, package count) and save it
    (every package's version too)."""
    log_environment(args.project, args.output)


def cmd_notebooks(args: argparse.Namespace, params: Params) -> int | None:
    """Execute every numbered notebook headless (papermill); HTML reports in results/reports/.
    Exit code 1 when a notebook fails; a bad `-p` or `--only` is a setting (2, in main)."""
    from .colab import notebooks  # when the command runs

    try:
        notebooks.run_notebooks(args.project, args.parameter, args.only, args.timeout)
    except notebooks.NotebookError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def cmd_hooks(args: argparse.Namespace, params: Params) -> None:
    """Register nbstripout (git filter), nbdime (diff/merge drivers) and pre-commit."""
    print(*install(args.project), sep="\n")


def build_parser() -> argparse.ArgumentParser:
    """The command line: one subcommand per `cmd_<name>` function, each with --params and --set."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--params", default="params.yaml", help="default: %(default)s")
    common.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a params key, e.g. --set train.epochs=5 (repeatable)",
    )
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(
        func: Command, help: str, flags: dict[str, str] | None = None
    ) -> argparse.ArgumentParser:
        """The subcommand of `cmd_<name>`, with its on/off options (`flags`: {"--fresh": help})."""
        p = sub.add_parser(func.__name__.removeprefix("cmd_"), parents=[common], help=help)
        p.set_defaults(func=func)
        for flag, text in (flags or {}).items():
            p.add_argument(flag, action="store_true", help=text)
        return p

    _add_pipeline_commands(command)
    _add_other_commands(command)
    return parser


def _add_pipeline_commands(command: Callable[..., argparse.ArgumentParser]) -> None:
    command(cmd_prepare, "write data/raw, the split, the manifest")

    flags = {"--verify": "re-hash every file on both sides"}
    p = command(cmd_stage, "copy data to fast local disk (resumable)", flags)
    p.add_argument("src", help="file or folder, e.g. /content/drive/MyDrive/data/images")
    p.add_argument("dest", help="folder on local disk, e.g. /content/data")

    flags = {
        "--fresh": "delete this run's checkpoints (it says which) and start it over",
        "--take-over": "train this run even if another session holds its lease (that one then "
        "stops)",
        "--new-run-if-changed": "(the DVC stage) if run_name was trained with other settings, "
        "data or code, train a run of its own, <run_name>-<hash>, instead of refusing",
    }
    p = command(cmd_train, "train (resumes the run named run_name)", flags)
{%- if cookiecutter.vertex_ai %}
    p.add_argument(
        "--sweep-trial",
        metavar="NAME",
        help="run as a trial of a Vertex AI tuning job for sweep NAME (`vertex --sweep` sets it)",
    )
{%- endif %}

    p = command(cmd_speed, "input vs compute: which one limits train")
    p.add_argument("--steps", type=int, default=50, help="steps per measurement (default: 50)")

    command(cmd_evaluate, "test-split metrics and plot data")

    p = command(cmd_predict, "score new data with the saved model")
    p.add_argument("input", help="a CSV with the training columns, an image, a .txt, or a folder")
    p.add_argument("--output", help="CSV (default: results/predictions.csv)")

    p = command(cmd_export, "SavedModel (serving) or LiteRT (devices)")
    p.add_argument(
        "--format",
        choices=["saved_model", "litert"],
        default="saved_model",
        help="saved_model: a folder for TF Serving; litert: a .tflite (default: %(default)s)",
    )
    p.add_argument(
        "--quantize",
        choices=["float16", "int8"],
        help="litert: float16 weights (half the size) or int8 dynamic range (a quarter)",
    )
    p.add_argument(
        "--output",
        help="default: results/models/saved_model, or results/models/model.tflite (litert)",
    )


def _add_other_commands(command: Callable[..., argparse.ArgumentParser]) -> None:
    flags = {
        "--best": "promote the best trial: its model to results/models, its settings to "
        "params.yaml",
        "--take-over": "run this sweep even if another session holds it (that one then stops)",
    }
    command(cmd_sweep, "hyperparameter search (resumes the study)", flags)
{%- if cookiecutter.vertex_ai %}

    flags = {
        "--dry-run": "print the gcloud command, do not run it",
        "--sweep": "a hyperparameter tuning job for `sweep:` (results/vertex/hpt-<name>.yaml)",
    }
    p = command(cmd_vertex, "run training as a Vertex AI custom job", flags)
    p.add_argument("--output", help="job spec file (default: vertex.output)")
{%- endif %}

    p = command(cmd_env, "print and save the environment")
    p.add_argument("--output", help="file (default: results/environment.json)")

    p = command(cmd_notebooks, "run the notebooks, write HTML reports")
    p.add_argument(
        "-p",
        dest="parameter",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="notebook parameter, e.g. -p epochs=1 (repeatable)",
    )
    p.add_argument("--only", nargs="+", metavar="PREFIX", help="e.g. --only 01 02")
    p.add_argument("--timeout", type=int, default=1800, help="seconds per cell")

    command(cmd_hooks, "register the git hooks (nbstripout, ...)")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
{%- if cookiecutter.vertex_ai %}
    if extra and not getattr(args, "sweep_trial", None):  # only a tuning trial takes more
{%- else %}
    if extra:
{%- endif %}
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.argv, args.extra = argv, extra
    args.params_file = Path(args.params).resolve()
    args.project = args.params_file.parent
    try:
        return args.func(args, load_params(args.params, args.overrides)) or 0
    except LeaseHeld as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_LEASE_HELD
    except (*USER_ERRORS, *RUN_ERRORS) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, USER_ERRORS) else 1
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in ("tensorflow", "keras", "optuna"):
            raise
        fix = TPU_STOP if on_colab_tpu() else "run `pip install -r requirements.txt`."
        print(f"error: {exc.name} is not installed: {fix}", file=sys.stderr)
        return 1
    except Exception as exc:
        said = storage_fault(exc)
        if said is None:
            raise
        print(f"error: {said}, then run the same command again", file=sys.stderr)
        return 1


def storage_fault(exc: Exception) -> str | None:
    """`FILE: cause; how to go on` for a full disk, a refused permission or a dropped mount."""
    if isinstance(exc, OSError):
        fix = STORAGE_FIXES.get(exc.errno or 0)
        path = exc.filename2 or exc.filename  # a rename's target, not its temporary file
        if fix == MAKE_YOURS and path and not os.path.lexists(path):  # a file it could not make
            path = os.path.dirname(path) or path  # in a folder that is not yours
        line = f"{path}: {exc.strerror}" if path else str(exc.strerror)
        return f"{line}; {fix.replace('PATH', str(path))}" if fix else None
    # TensorFlow's errors say `FILE; cause` on one of their lines, with its op's name
    for line in str(exc).splitlines():
        line = without_op(line).replace("; ", ": ")
        for code, fix in STORAGE_FIXES.items():
            if line.endswith(os.strerror(code)):
                return f"{line}; {fix}"
    return None


if __name__ == "__main__":
    sys.exit(main())
