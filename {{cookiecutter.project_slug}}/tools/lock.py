"""Resolve requirements into a lock that installs on every supported Python and agrees with Colab.

    python tools/lock.py requirements.in -o requirements.txt
    python tools/lock.py requirements-dev.in -c requirements.txt -o requirements-dev.txt

uv resolves once per Python version (3.10 to 3.13) with Colab's preinstalled versions as
constraints. Where Colab's version does not install on an older Python (Keras 3.13 needs 3.11), that
Python gets the newest release no newer than Colab's. The per-version results are merged into one
file: a pin that differs between versions carries a `python_version` marker.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

PYTHONS = ("3.10", "3.11", "3.12", "3.13")
COLAB_PYTHON = "3.13"
# Colab runs on Linux x86_64; resolving for it keeps platform-specific wheels right.
PLATFORM = "x86_64-manylinux_2_28"
COLAB_CONSTRAINTS = Path(__file__).resolve().parent.parent / "requirements" / "colab-constraints.txt"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)")


def normalize(name: str) -> str:
    """PEP 503 name: `PyYAML` and `pyyaml` are the same package."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(path: Path) -> dict[str, str]:
    """`name==version` lines of a requirements file, by normalized name (markers ignored)."""
    pins = {}
    for line in path.read_text().splitlines():
        match = PIN.match(line.strip())
        if match:
            pins[normalize(match[1])] = match[2]
    return pins


def resolve(requirements: list[Path], constraints: list[Path], python: str, uv: str) -> dict[str, str]:
    """Pins for one Python version; Colab's versions exact if they install there, else as ceilings."""
    with tempfile.TemporaryDirectory() as tmp:
        output = Path(tmp) / "lock.txt"
        base = [uv, "pip", "compile", *map(str, requirements), "--python-version", python,
                "--python-platform", PLATFORM, "--no-header", "--no-annotate", "--quiet",
                "-o", str(output)]
        exact = [arg for c in constraints for arg in ("-c", str(c))]
        run = subprocess.run([*base, *exact], capture_output=True, text=True)
        if run.returncode != 0:
            if python == COLAB_PYTHON:
                sys.exit(f"lock: Colab's versions do not resolve on Python {python}:\n{run.stderr}")
            ceilings = Path(tmp) / "ceilings.txt"
            ceilings.write_text(
                "".join(f"{name}<={version.split('+')[0]}\n" for c in constraints for name, version in read_pins(c).items())
            )
            run = subprocess.run([*base, "-c", str(ceilings)], capture_output=True, text=True)
            if run.returncode != 0:
                sys.exit(f"lock: no resolution on Python {python}:\n{run.stderr}")
        return read_pins(output)


def marker(pythons: list[str]) -> str:
    """The `python_version` marker for a contiguous run of supported versions."""
    first, last = PYTHONS.index(pythons[0]), PYTHONS.index(pythons[-1])
    if last - first + 1 != len(pythons):
        return " or ".join(f'python_version == "{p}"' for p in pythons)
    parts = []
    if first > 0:
        parts.append(f'python_version >= "{pythons[0]}"')
    if last < len(PYTHONS) - 1:
        parts.append(f'python_version < "{PYTHONS[last + 1]}"')
    return " and ".join(parts)


def merge(per_python: dict[str, dict[str, str]]) -> list[str]:
    """One requirement line per (package, version), with a marker where versions differ."""
    lines = []
    for name in sorted({n for pins in per_python.values() for n in pins}):
        by_version: dict[str, list[str]] = {}
        for python in PYTHONS:
            if name in per_python[python]:
                by_version.setdefault(per_python[python][name], []).append(python)
        for version, pythons in by_version.items():
            condition = marker(pythons) if len(pythons) < len(PYTHONS) else ""
            lines.append(f"{name}=={version}" + (f" ; {condition}" if condition else ""))
    return sorted(lines, key=lambda line: (PIN.match(line)[1], line))


def lock(requirements: list[Path], constraints: list[Path], uv: str = "uv") -> list[str]:
    """Resolve for every supported Python and merge into requirement lines."""
    return merge({p: resolve(requirements, constraints, p, uv) for p in PYTHONS})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("requirements", nargs="+", type=Path)
    parser.add_argument("-c", "--constraint", action="append", type=Path, default=[],
                        help="more constraints besides Colab's (e.g. the runtime lock for dev tools)")
    parser.add_argument("-o", "--output", type=Path, required=True)
    parser.add_argument("--uv", default="uv", help="the uv executable")
    args = parser.parse_args()
    lines = lock(args.requirements, [COLAB_CONSTRAINTS, *args.constraint], args.uv)
    header = [
        "# Generated by `make lock` (tools/lock.py) from " + ", ".join(p.name for p in args.requirements) + ".",
        "# Every package pinned; Colab's preinstalled ones at Colab's versions. Do not edit by hand.",
    ]
    # Written whole, then renamed: an interrupted lock never leaves a half-written file.
    tmp = args.output.with_suffix(".tmp")
    tmp.write_text("\n".join(header + lines) + "\n")
    tmp.replace(args.output)
    print(f"lock: {len(lines)} pins written to {args.output}")


if __name__ == "__main__":
    main()
