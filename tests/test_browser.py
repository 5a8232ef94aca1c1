"""What a person sees in ``report.html``, checked in a real headless Chromium (Debian's
``chromium``; ``.ci/run`` installs it when missing) on a failing demo run whose
implementation writes hostile markup and terminal escapes to its stderr.

``--dump-dom`` prints the DOM after the page's scripts ran (Chromium's headless mode
docs), so the test sees that the page's own filter script ran (it marks ``<html>``) and
that the implementation's ``<script>``/``<img onerror>`` did not. A screenshot is kept
at ``reports/ci/report-failing-demo.png`` (a CI artefact; ``.ci/run`` prints its path).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCREENSHOT = ROOT / "reports" / "ci" / "report-failing-demo.png"
HOSTILE = ('<script>document.documentElement.setAttribute("data-pwned","1")</script>'
           '<img src=x onerror="document.title=\'pwned\'">\x1b[2J\x1b]0;pwned\x07')
SCENARIO = """name = "demo-fail"
description = "keys off and no expected failure: the duplicate send must fail it"
[sut]
idempotency_keys = false
[crash]
points = ["t6.gateway_accepted"]
baseline = false
"""


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("headless Chromium is not installed (apt-get install -y chromium; "
                    ".ci/run installs it)")
    return found


def _browser(binary: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [binary, "--headless", "--no-sandbox", "--disable-gpu",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--no-first-run", f"--user-data-dir={profile}", *args],
        capture_output=True, text=True, timeout=180)


def _hostile_implementation(into: Path) -> Path:
    """The reference loop, plus a first line of hostile stderr in every worker."""
    shutil.copytree(ROOT / "shopops", into / "shopops",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "fixtures", into / "fixtures")
    main = into / "shopops" / "__main__.py"
    text = main.read_text(encoding="utf-8")
    main.write_text(text.replace("sys.exit(main())",
                                 f"sys.stderr.write({HOSTILE!r} + '\\n')\nsys.exit(main())"),
                    encoding="utf-8")
    return into


def test_a_person_sees_the_failure_and_no_hostile_script_runs(tmp_path: Path) -> None:
    binary = _chromium()
    sut = _hostile_implementation(tmp_path / "sut")
    scenario = tmp_path / "demo-fail.toml"
    scenario.write_text(SCENARIO, encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "harness", "run", str(scenario), "--sut",
                           str(sut), "--report-dir", str(tmp_path / "r")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "\x1b" not in proc.stdout and "\x07" not in proc.stdout  # console: made visible
    page = (tmp_path / "r" / "latest" / "report.html").resolve()
    assert "\x1b" not in page.read_text(encoding="utf-8")

    dom = _browser(binary, tmp_path / "profile", "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    assert 'data-filters="ready"' in html  # the page's own script ran (CSP allowed it)
    assert "data-pwned" not in html.split("<body", 1)[0]  # the hostile one did not
    assert not re.search(r"<html[^>]*data-pwned", html)
    assert "<title>pwned</title>" not in html and "<title>shopops-chaos" in html
    assert not re.search(r"<img\b", html)  # the <img onerror> is text, not an element
    assert "&lt;script&gt;document.documentElement" in html  # shown to the reader
    # the verdict first, a failing cell, a timeline with a kill
    banner = re.search(r'<header class="banner v-(\w+)[^"]*" id="verdict">\s*<h1>(\w+)', html)
    assert banner and banner.groups() == ("fail", "FAIL")
    assert re.search(r'<td class="c v-fail[^"]*"[^>]*><a href="#x0" title="'
                     r'demo-fail\[t6\.gateway_accepted\]: fail"', html)
    section = html[html.index('id="x0"'):]
    assert 'class="tl"' in section and "m k-kill" in section and "m k-delivery" in section
    assert "exactly_one_delivery" in section and "--schedule t6.gateway_accepted" in section

    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    shot = _browser(binary, tmp_path / "profile", "--window-size=1400,1800",
                    f"--screenshot={SCREENSHOT}", page.as_uri())
    assert shot.returncode == 0 and SCREENSHOT.stat().st_size > 10_000, shot.stderr[-2000:]
