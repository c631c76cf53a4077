"""``gpuyield simulate --report``: four PNGs and one self-contained HTML page, byte for byte.

The page is also opened in a real headless browser (Debian's ``chromium``,
which ``.ci/run`` installs where it is missing), driven over the DevTools
protocol on a pipe: every embedded plot must decode, and the console must
stay free of errors (console.error, uncaught exceptions, failed loads).
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import io
import json
import os
import random
import re
import select
import struct
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from PIL import Image  # comes with matplotlib
from typer.testing import CliRunner

from gpuyield.agents.simulator import DEFAULT_POLICIES, run_policy
from gpuyield.agents.simulator.defaults import default_scenario
from gpuyield.agents.simulator.workload import generate
from gpuyield.cli import app
from gpuyield.report import DPI, HEIGHT_IN, METRIC_ROWS, QUEUE_PANEL_IN, WIDTH_IN, write_report
from gpuyield.schemas.scenario import Scenario
from gpuyield.schemas.simulation import PolicyResult

PNGS = ("utilization.png", "queues.png", "evictions.png", "lost-work.png")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="module")
def tiny() -> tuple[Scenario, dict[str, PolicyResult]]:
    scenario = default_scenario().model_copy(update={"days": 0.5, "nodes": 8})
    jobs = generate(scenario, random.Random(scenario.seed))
    return scenario, {name: run_policy(scenario, jobs, name) for name in DEFAULT_POLICIES}


@pytest.fixture(scope="module")
def report_dir(
    tmp_path_factory: pytest.TempPathFactory, tiny: tuple[Scenario, dict[str, PolicyResult]]
) -> Path:
    out = tmp_path_factory.mktemp("report") / "nested" / "dir"
    write_report(out, *tiny)
    return out


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == PNG_SIGNATURE
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def png_text_keys(data: bytes) -> list[bytes]:
    """The keywords of every tEXt/iTXt/zTXt chunk (metadata that could vary)."""
    keys, pos = [], 8
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        if kind in (b"tEXt", b"iTXt", b"zTXt", b"tIME"):
            keys.append(kind + b":" + data[pos + 8 : pos + 8 + length].split(b"\0")[0])
        pos += 12 + length
    return keys


def test_writes_four_pngs_and_a_page(report_dir: Path) -> None:
    assert sorted(p.name for p in report_dir.iterdir()) == sorted([*PNGS, "index.html"])
    expected = {
        name: (round(WIDTH_IN * DPI), round(HEIGHT_IN * DPI))
        for name in ("utilization.png", "evictions.png", "lost-work.png")
    }
    expected["queues.png"] = (round(WIDTH_IN * DPI), round((QUEUE_PANEL_IN * 3 + 0.8) * DPI))
    for name, size in expected.items():
        data = (report_dir / name).read_bytes()
        assert png_size(data) == size, name
        assert png_text_keys(data) == [], f"{name} carries metadata that may vary"


def test_same_results_give_the_same_bytes(
    tmp_path: Path, report_dir: Path, tiny: tuple[Scenario, dict[str, PolicyResult]]
) -> None:
    again = tmp_path / "again"
    written = write_report(again, *tiny)
    assert [p.name for p in written] == [*PNGS, "index.html"]
    for path in written:
        assert path.read_bytes() == (report_dir / path.name).read_bytes(), path.name


def test_the_page_is_self_contained(
    report_dir: Path, tiny: tuple[Scenario, dict[str, PolicyResult]]
) -> None:
    page = (report_dir / "index.html").read_text(encoding="utf-8")
    assert "http://" not in page
    assert "https://" not in page
    assert re.findall(r'(?:src|href)="(?!data:)', page) == []
    assert "url(" not in page
    assert page.count('<img src="data:image/png;base64,') == 4
    for name in PNGS:
        encoded = base64.b64encode((report_dir / name).read_bytes()).decode("ascii")
        assert encoded in page, f"{name} is not embedded as written"
    _, results = tiny
    for _, label, _ in METRIC_ROWS:
        assert label in page
    evictions = next(fmt for key, _, fmt in METRIC_ROWS if key == "evictions")
    for name, result in results.items():
        assert f">{name}</th>" in page
        assert f'<td class="num">{evictions.format(result.metrics.evictions)}</td>' in page
    assert page.count("<figcaption>") == 4


def test_cli_writes_the_report_and_keeps_json_on_stdout(tmp_path: Path) -> None:
    out = tmp_path / "rep"
    args = ["simulate", "--days", "0.25", "--nodes", "4", "--policies", "gpuyield,volcano-gang"]
    result = CliRunner().invoke(app, [*args, "--json", "--report", str(out)])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert set(document["policies"]) == {"gpuyield", "volcano-gang"}
    assert sorted(p.name for p in out.iterdir()) == sorted([*PNGS, "index.html"])

    plain = CliRunner().invoke(app, [*args, "--report", str(tmp_path / "rep2")])
    assert plain.exit_code == 0, plain.output
    assert str(tmp_path / "rep2" / "index.html") in plain.stderr
    for name in [*PNGS, "index.html"]:
        assert (out / name).read_bytes() == (tmp_path / "rep2" / name).read_bytes()


def test_cli_report_into_a_file_fails_in_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    result = CliRunner().invoke(
        app, ["simulate", "--days", "0.1", "--nodes", "2", "--report", str(blocker / "sub")]
    )
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("gpuyield: --report ")


# -- in a real browser ---------------------------------------------------------------------


class Browser:
    """Headless chromium driven over the DevTools protocol on a pipe (fds 3 and 4)."""

    def __init__(self, profile: Path, log: Path) -> None:
        to_child, self._to_browser = os.pipe()
        self._from_browser, from_child = os.pipe()
        # Move the child's ends above 10, so the redirections to 3 and 4 cannot clash.
        ends = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_child, from_child)]
        os.close(to_child)
        os.close(from_child)
        flags = [
            "--headless",
            "--no-sandbox",  # CI runs as root
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--window-size=1200,900",
            f"--user-data-dir={profile}",
            "--remote-debugging-pipe",
            "about:blank",
        ]
        with log.open("wb") as sink:
            self._proc = subprocess.Popen(
                ["bash", "-c", f'exec "$0" "$@" 3<&{ends[0]} 4>&{ends[1]}', CHROMIUM, *flags],
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=sink,
                pass_fds=ends,
            )
        for fd in ends:
            os.close(fd)
        self._log = log
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []

    def close(self) -> None:
        with contextlib.suppress(AssertionError, OSError):
            self.call("Browser.close", timeout=5)
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)

    def call(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        session: str | None = None,
        timeout: float = 10.0,
    ) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        reply = self._wait(lambda m: m.get("id") == self._next_id, timeout, method)
        assert "error" not in reply, f"{method}: {reply['error']}"
        return dict(reply.get("result", {}))

    def wait_event(self, method: str, timeout: float = 10.0) -> dict[str, Any]:
        return self._wait(lambda m: m.get("method") == method, timeout, method)

    def _wait(self, match: Any, timeout: float, what: str) -> dict[str, Any]:
        for seen in self.events:
            if "method" in seen and match(seen) and not seen.get("_taken"):
                seen["_taken"] = True
                return seen
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" in self._buffer:
                raw, self._buffer = self._buffer.split(b"\0", 1)
                message = json.loads(raw)
                if "method" in message:
                    self.events.append(message)
                if match(message):
                    message["_taken"] = True
                    return dict(message)
            left = deadline - time.monotonic()
            ready = select.select([self._from_browser], [], [], max(left, 0))[0] if left > 0 else []
            chunk = os.read(self._from_browser, 1 << 20) if ready else b""
            if not chunk:
                tail = self._log.read_text(errors="replace")[-2000:]
                raise AssertionError(f"chromium: no answer to {what}; its log ends:\n{tail}")
            self._buffer += chunk


def console_errors(events: list[dict[str, Any]]) -> list[str]:
    """Everything the DevTools console would show as an error."""
    errors = []
    for event in events:
        params = event.get("params", {})
        method = event.get("method")
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            errors.append(" ".join(str(a.get("value", a)) for a in params.get("args", [])))
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            errors.append(details.get("exception", {}).get("description") or details.get("text"))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            errors.append(f"{entry.get('text')} {entry.get('url', '')}".strip())
    return errors


def open_page(page: Path, tmp_path: Path) -> tuple[list[str], str, bytes]:
    """Load ``page``: (console errors, body[data-images-loaded], a PNG screenshot)."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing (.ci/run installs Debian's chromium)")
    browser = Browser(tmp_path / "profile", tmp_path / "chromium.log")
    try:
        target = browser.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = browser.call("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        for domain in ("Page", "Runtime", "Log"):
            browser.call(f"{domain}.enable", session=session)
        browser.call("Page.navigate", {"url": page.resolve().as_uri()}, session=session)
        browser.wait_event("Page.loadEventFired")
        state = browser.call(
            "Runtime.evaluate",
            {
                "expression": "Promise.all(Array.from(document.images, i => i.decode()))"
                ".then(() => document.body.dataset.imagesLoaded || '')",
                "awaitPromise": True,
                "returnByValue": True,
            },
            session=session,
        )
        loaded = str(state.get("result", {}).get("value", state))
        shot = browser.call(
            "Page.captureScreenshot",
            {"format": "png", "captureBeyondViewport": True},
            session=session,
        )
        screenshot = base64.b64decode(shot["data"])
        return console_errors(browser.events), loaded, screenshot
    finally:
        browser.close()


@pytest.mark.slow
def test_the_page_renders_in_a_headless_browser_without_console_errors(
    report_dir: Path, tmp_path: Path
) -> None:
    errors, loaded, screenshot = open_page(report_dir / "index.html", tmp_path)
    assert errors == []
    assert loaded == "4/4", "the embedded plots did not all decode"
    image = Image.open(io.BytesIO(screenshot)).convert("RGB")
    assert image.width >= 1000
    assert image.height > 2000, "the page should be long: tables and four figures"
    colors = image.getcolors(maxcolors=1 << 20)
    assert colors is not None
    assert len(colors) > 50, "the screenshot is blank"


@pytest.mark.slow
def test_the_browser_check_sees_errors(tmp_path: Path) -> None:
    """The check above could pass by seeing nothing: a broken page must fail it."""
    bad = tmp_path / "bad.html"
    bad.write_text(
        '<!DOCTYPE html><html><head><link rel="icon" href="data:,"></head><body>'
        '<img src="missing.png"><script>console.error("boom"); notDefined();</script>'
        "</body></html>",
        encoding="utf-8",
    )
    errors, _, _ = open_page(bad, tmp_path)
    joined = "\n".join(errors)
    assert "boom" in joined
    assert "notDefined" in joined
    assert "ERR_FILE_NOT_FOUND" in joined
