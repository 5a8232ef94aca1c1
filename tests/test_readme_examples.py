"""The README's examples, and those of the documentation pages, run as written.

Every ``shopops-chaos …`` command that README.md or a page of ``docs/`` (the reference moved
there from the README; ``mkdocs.yml`` builds it) shows is parsed by the real argument parser
(placeholders such as ``path/to/submission`` or ``'…'`` are left out); the cheap ones run
for real in a scratch project: the "Adding a kill scenario" steps (copy, change three
lines, run, replay, pytest), ``points``, the pytest selection examples, and
``run --schedule t4.parked`` across every shipped scenario; the whole default matrix and
the default exploration run as written behind ``--crash-soak`` (minutes).
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from inner_pytest import inner_env

from harness.cli.main import build_parser

ROOT = Path(__file__).resolve().parent.parent
#: README.md and every page of docs/ (a command the README showed may have moved to one).
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TEXTS = [page.read_text(encoding="utf-8") for page in PAGES]
PLACEHOLDER = re.compile(r"path/to|<|…|\[--|\bN\b|\bDIR\b|rubric\.toml|my-scenario|prev/|shard-")


def _commands(tool: str) -> list[str]:
    found = []
    for text in TEXTS:  # each page on its own: a fence never spans two pages
        for block in re.findall(r"```(?:bash|sh)\n(.*?)```", text, re.S):
            for line in block.replace("\\\n", " ").splitlines():
                line = line.split(" #", 1)[0].strip()
                if tool in line:
                    found.append(line[line.index(tool):].split(" && ")[0])
        prose = re.sub(r"```.*?```", "", text, flags=re.S)
        for span in re.findall(r"`([^`\n]+)`", prose):
            if span.startswith(f"{tool} "):
                found.append(span)
    return list(dict.fromkeys(found))


def _chaos(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


def _project(tmp_path: Path, *scenarios: str) -> Path:
    (tmp_path / "scenarios").mkdir()
    for name in scenarios:
        shutil.copy(ROOT / "scenarios" / name, tmp_path / "scenarios" / name)
    return tmp_path


@pytest.mark.pure
@pytest.mark.parametrize("command", [c for c in _commands("shopops-chaos")
                                     if not PLACEHOLDER.search(c)])
def test_every_shopops_chaos_example_parses(command: str) -> None:
    args = shlex.split(command)[1:]
    build_parser().parse_args(args)  # SystemExit(2) on an option the docs invented


@pytest.mark.pure
def test_the_readme_or_the_docs_show_the_commands_this_file_runs() -> None:
    chaos = _commands("shopops-chaos")
    for expected in ("shopops-chaos points", "shopops-chaos run scenarios/my-scenario.toml",
                     "shopops-chaos run --schedule t4.parked"):
        assert any(c.startswith(expected) for c in chaos), expected
    pytests = _commands("pytest")
    assert "pytest scenarios/gateway-5xx.toml -k 'request_leaving:2 or gateway_accepted'" \
        in pytests
    assert "pytest 'scenarios/o1001.toml::o1001[t6.gateway_accepted]'" in pytests


def test_adding_a_kill_scenario_as_the_readme_says(tmp_path: Path, inner_pyc: Path) -> None:
    project = _project(tmp_path, "late-approval.toml")
    mine = project / "scenarios" / "my-scenario.toml"
    shutil.copy(project / "scenarios" / "late-approval.toml", mine)  # step 1
    text = mine.read_text(encoding="utf-8")  # step 2: three lines
    text = re.sub(r'(?m)^name = .*$', 'name = "my-scenario"', text)
    text = re.sub(r'(?m)^description = .*$', 'description = "my first scenario"', text)
    text = re.sub(r'(?m)^points = .*$', 'points = ["t4.parked", "t6.request_leaving"]', text)
    mine.write_text(text, encoding="utf-8")
    ran = _chaos("run", "scenarios/my-scenario.toml", cwd=project)  # step 3
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "my-scenario[t6.request_leaving]" in ran.stdout
    replay = _chaos("run", "scenarios/my-scenario.toml", "--schedule", "t6.request_leaving",
                    cwd=project)
    assert replay.returncode == 0, replay.stdout + replay.stderr
    items = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                            "scenarios/my-scenario.toml"], cwd=project, capture_output=True,
                           text=True, timeout=600, env=inner_env(inner_pyc))
    assert items.returncode == 0, items.stdout + items.stderr
    assert "3 passed" in items.stdout


def test_points_and_the_pytest_selection_examples(tmp_path: Path, inner_pyc: Path) -> None:
    project = _project(tmp_path, "gateway-5xx.toml", "o1001.toml")
    points = _chaos("points", cwd=project)
    assert points.returncode == 0 and "t6.request_leaving" in points.stdout
    for command, outcome in (
            ("pytest scenarios/gateway-5xx.toml -k 'request_leaving:2 or gateway_accepted'",
             "passed"),
            ("pytest 'scenarios/o1001.toml::o1001[t6.gateway_accepted]'", "1 passed")):
        proc = subprocess.run([sys.executable, "-m", *shlex.split(command), "-q",
                               "-p", "no:cacheprovider"], cwd=project, env=inner_env(inner_pyc),
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, command + "\n" + proc.stdout + proc.stderr
        assert outcome in proc.stdout and "failed" not in proc.stdout


def test_one_schedule_across_every_shipped_scenario_passes_on_the_reference(
        tmp_path: Path) -> None:
    proc = _chaos("run", str(ROOT / "scenarios"), "--schedule", "t4.parked", "--report-dir",
                  str(tmp_path / "r"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "--schedule skipped" in proc.stdout and "demo-keys-off" in proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize("command", ["shopops-chaos run", "shopops-chaos explore"])
def test_the_heavy_examples_as_written(tmp_path: Path, command: str) -> None:
    """The README's first command (the whole default matrix) and the default exploration,
    from a copy of the repository's scenarios (minutes: only with --crash-soak)."""
    assert command in _commands("shopops-chaos")
    project = _project(tmp_path, *(p.name for p in (ROOT / "scenarios").glob("*.toml")))
    proc = _chaos(*shlex.split(command)[1:], cwd=project)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
