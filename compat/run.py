"""Run LangGraph's own test suite against `DurableSaver` in one write mode.

    python -m compat.run --mode through|behind [--summary FILE] [--parity-check]
                         [--test-timeout S] [--no-install] [--keep] [-- PYTEST_ARGS...]

Refuses to run unless the installed langgraph stack is the one pinned in
compat/constraints.txt; installs the suite's test dependencies (the ``compat`` extra of
pyproject.toml) when some are missing; takes the sdist of the pinned langgraph from
``.compat-cache/`` (downloaded once); extracts its tests into a temporary folder with the
checkpointer fixtures rebound to `compat.fixtures`; and runs them with pytest. Exit status:
pytest's (0 only when every selected test passed), 2 for a problem of the runner itself.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections import Counter
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from compat import DUMP_ENV, MODE_ENV, SUMMARY_ENV, UPSTREAM_ENV, CompatError, sdist

ROOT = Path(__file__).resolve().parent.parent
CONSTRAINTS = ROOT / "compat" / "constraints.txt"
CACHE = ROOT / ".compat-cache"
INSTALL_HINT = f"{sys.executable} -m pip install -e '.[compat]' -c compat/constraints.txt"
PYTEST_LINE = re.compile(r"^=+ (.* in [\d.]+s\b.*?) =+$")

WALL_CLOCK = frozenset({"test_stream_buffering_single_node",
                        "test_stream_subgraphs_during_execution"})
"""Upstream tests (sync and async) that assert when stream chunks arrive, in 0.1 s windows
of wall-clock time around ``time.sleep`` calls. A pause of the machine fails them whatever
the saver; one that fails is run once more on its own, and passes only if that run passes."""


# The packages the suite runs against. The other pins are the suite's test dependencies,
# or the package's own (langchain for create_agent, the LangGraph server for its test),
# which stay out of the suite's venv: see the Makefile's compat target.
STACK = frozenset({"langgraph", "langgraph-checkpoint", "langgraph-prebuilt", "langchain-core"})


def _installed(name: str) -> str | None:
    """The installed version of distribution ``name``, None when it is not installed."""
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def pins() -> dict[str, str]:
    """``name -> version`` of every ``name==version`` line of compat/constraints.txt."""
    found = {}
    for line in CONSTRAINTS.read_text().splitlines():
        name, sep, pinned = line.partition("#")[0].strip().partition("==")
        if sep:
            found[name.strip()] = pinned.strip()
    return found


def check_pins() -> None:
    """Raise `CompatError` unless the installed langgraph stack (`STACK`) is the pinned one;
    warn about the other pins the venv does not match."""
    for name, pinned in pins().items():
        have = _installed(name)
        stack = name in STACK
        if have == pinned or (have is None and not stack):  # missing test deps get installed
            continue
        what = f"{name} {have} is installed" if have else f"{name} is not installed"
        if stack:
            raise CompatError(f"{what}, but compat/constraints.txt pins {name}=={pinned}; "
                              f"the suite runs only against the pinned langgraph.\n"
                              f"  Install the pins: {INSTALL_HINT}")
        print(f"compat: warning: {what}, compat/constraints.txt pins {name}=={pinned}")


def install_test_deps() -> None:
    """pip-install the requirements of the ``compat`` extra that are not installed, under
    compat/constraints.txt."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    missing = [req for req in extras["compat"]
               if _installed(re.split(r"[\s\[<>=!~;]", req, maxsplit=1)[0]) is None]
    if missing:
        print(f"compat: installing the suite's test dependencies {missing}", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-c", str(CONSTRAINTS),
                        *missing], check=True)


def pytest_env(mode: str, **extra: str) -> dict[str, str]:
    """The environment of a pytest run in the extracted suite."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "NO_DOCKER": "true", "PYTHONPATH": path, MODE_ENV: mode,
            "PYTHONDONTWRITEBYTECODE": "1", **extra}


def selection(src: Path, pytest_args: list[str]) -> list[str]:
    """The test files to run: none when the pytest arguments name tests, else every file
    that mentions a checkpointer fixture."""
    if any(arg.startswith("tests/") for arg in pytest_args):
        return []
    return sdist.checkpointer_test_files(src / "tests")


def parity_check(tarball: Path, work: Path, args: argparse.Namespace) -> int:
    """Collect the pristine and the patched suite; 0 when the patched run selects exactly
    the items upstream runs for its ``memory`` param (same tests, same other params)."""
    keys: dict[str, Counter[tuple[str, str]]] = {}
    for side in ("upstream", "patched"):
        src = sdist.extract(tarball, work / side, patch=side == "patched")
        files = selection(src, args.pytest)
        dump = work / f"{side}.json"
        upstream = "1" if side == "upstream" else "0"
        env = pytest_env(args.mode, **{DUMP_ENV: str(dump), UPSTREAM_ENV: upstream})
        command = [sys.executable, "-m", "pytest", "-p", "compat.plugin", "-p", "no:asyncio",
                   "-o", "addopts=", "--collect-only", "-q", *files, *args.pytest]
        run = subprocess.run(command, cwd=src, env=env, capture_output=True, text=True)
        if run.returncode != 0 or not dump.is_file():
            print(run.stdout[-3000:], run.stderr[-3000:], sep="\n")
            print(f"compat: parity check: collecting the {side} suite failed")
            return 2
        keys[side] = Counter((func, json.dumps(others))
                             for func, others in json.loads(dump.read_text()))
    missing, extra = keys["upstream"] - keys["patched"], keys["patched"] - keys["upstream"]
    print(f"compat: parity check: upstream selects {keys['upstream'].total()} items for its "
          f"'memory' param, the patched run {keys['patched'].total()}; "
          f"{missing.total()} missing, {extra.total()} extra")
    for label, items in (("missing", missing), ("extra", extra)):
        for func, others in sorted(items)[:20]:
            print(f"  {label}: {func} {others}")
    return 0 if not missing and not extra else 1


def run_suite(src: Path, args: argparse.Namespace, tests: list[str] | None = None,
              summary: Path | None = None) -> tuple[int, str]:
    """Run pytest in ``src`` (on ``tests`` when given, else on the selection and the
    command line's pytest arguments), echoing its output; its exit status and final
    summary line."""
    chosen = tests if tests is not None else [*selection(src, args.pytest), *args.pytest]
    command = [sys.executable, "-m", "pytest", "-p", "compat.plugin", "-p", "no:asyncio",
               "-o", f"addopts={sdist.addopts(src / 'pyproject.toml')}",
               f"--timeout={args.test_timeout}", "-rfE", "--tb=short", *chosen]
    print(f"compat: (in {src}) {shlex.join(command)}", flush=True)
    env = pytest_env(args.mode, **{SUMMARY_ENV: str(summary or args.summary)})
    last = ""
    with subprocess.Popen(command, cwd=src, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, bufsize=1) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            if match := PYTEST_LINE.match(line.strip()):
                last = match.group(1)
    return proc.returncode, last


def rerun_wall_clock(src: Path, args: argparse.Namespace, status: int) -> int:
    """When the only failures are `WALL_CLOCK` tests, run them once more on their own and
    record them in the summary (``rerun_ids``, ``rerun_passed``); the run's exit status:
    0 when that rerun passed, else ``status`` unchanged."""
    if status == 0 or not args.summary.is_file():
        return status
    summary = json.loads(args.summary.read_text())
    failed = summary["failed_ids"]
    if summary["error_ids"] or not failed or any(
            nodeid.split("::")[-1].split("[")[0] not in WALL_CLOCK for nodeid in failed):
        return status
    print(f"compat: {len(failed)} test(s) missed a wall-clock window; once more on their "
          f"own: {' '.join(failed)}", flush=True)
    again = args.summary.with_suffix(".rerun.json")
    rerun_status, _ = run_suite(src, args, tests=failed, summary=again)
    passed = rerun_status == 0 and json.loads(again.read_text())["passed"] == len(failed)
    again.unlink(missing_ok=True)
    summary.update(rerun_ids=failed, rerun_passed=passed)
    args.summary.write_text(json.dumps(summary, indent=2) + "\n")
    return 0 if passed else status


def report(args: argparse.Namespace, status: int, pytest_line: str, seconds: float) -> None:
    """Add the timing and pytest's line to the summary file and print the closing lines."""
    tag = f"compat[{args.mode}]"
    if not args.summary.is_file():
        print(f"== {tag}: no summary written; pytest exit status {status} ({seconds:.0f}s)")
        return
    summary = json.loads(args.summary.read_text())
    summary.update(wall_s=round(seconds, 1), pytest_summary=pytest_line)
    args.summary.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"== {tag}: langgraph {summary['langgraph']}, {summary['selected']} tests selected "
          f"({summary['deselected_no_checkpointer']} without a checkpointer deselected)")
    print(f"== {tag}: {summary['passed']} passed, {summary['failed']} failed, "
          f"{summary['errors']} errors, {summary['skipped']} skipped in {seconds:.0f}s; "
          f"pytest exit status {status}; summary {args.summary}")
    print(f"== {tag}: pytest: {pytest_line or '(no summary line)'}", flush=True)
    if summary.get("rerun_ids"):
        verdict = "passed" if summary["rerun_passed"] else "failed again"
        print(f"== {tag}: wall-clock test(s) {verdict} when run on their own: "
              f"{' '.join(summary['rerun_ids'])}", flush=True)


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line (everything after ``--`` goes to pytest)."""
    split = argv.index("--") if "--" in argv else len(argv)
    ours, theirs = argv[:split], argv[split + 1:]
    parser = argparse.ArgumentParser(prog="python -m compat.run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=("through", "behind"), required=True,
                        help="write mode of the savers under test")
    parser.add_argument("--summary", type=Path,
                        help="JSON summary (default .compat-cache/summary-MODE.json)")
    parser.add_argument("--parity-check", action="store_true",
                        help="collection-only self-test of the fixture override; no run")
    parser.add_argument("--test-timeout", type=float, default=60,
                        help="seconds a test may take (pytest-timeout; default 60)")
    parser.add_argument("--no-install", action="store_true",
                        help="do not pip-install missing test dependencies")
    parser.add_argument("--keep", action="store_true", help="keep the extracted suite")
    args = parser.parse_args(ours)
    args.pytest = theirs
    args.summary = (args.summary or CACHE / f"summary-{args.mode}.json").resolve()
    return args


def main(argv: list[str] | None = None) -> int:
    """The command line; its exit status (2 for a problem of the runner or its setup)."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return execute(args)
    except (CompatError, subprocess.CalledProcessError) as exc:
        print(f"compat: {exc}", file=sys.stderr)
        return 2


def execute(args: argparse.Namespace) -> int:
    """Check, prepare, run (or parity-check) and report; the exit status."""
    started = time.monotonic()
    check_pins()
    if not args.no_install:
        install_test_deps()
    tarball = sdist.fetch(pins()["langgraph"], CACHE)
    work = Path(tempfile.mkdtemp(prefix="lgc-suite-"))
    try:
        if args.parity_check:
            return parity_check(tarball, work, args)
        src = sdist.extract(tarball, work / "src", patch=True)
        args.summary.parent.mkdir(parents=True, exist_ok=True)
        args.summary.unlink(missing_ok=True)
        status, line = run_suite(src, args)
        status = rerun_wall_clock(src, args, status)
        report(args, status, line, time.monotonic() - started)
        return status
    finally:
        if args.keep:
            print(f"compat: kept the extracted suite in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
