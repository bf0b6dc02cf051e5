"""The live dashboard of a real run in a real browser: Debian's Chromium, headless, driven by selenium through
chromedriver. A short Pong run with --dashboard; the page's figures change between two reads and agree with the
run's CSV files (its learning rate and entropy weight too), the bottleneck is named, a worker killed with SIGKILL is
restarted and the page goes on updating and shows the restart, an evaluation during training is named as eval.csv
has it, and when the run stops the page says it ended. A screenshot is kept as the test's artefact
(tests/artifacts/dashboard.png, or $ZRL_TEST_ARTIFACTS).

Chromium and chromedriver come from Debian's packages (``apt-get install chromium chromium-driver``; .ci/run
installs them where they are missing). Where they are not installed the test is skipped, unless
``ZRL_REQUIRE_BROWSER=1`` (set by .ci/run), when it fails.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from conftest import REPO, command, csv_rows

pytestmark = pytest.mark.e2e

SMOKE = REPO / "config" / "smoke.toml"
BROWSER, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
ARTIFACTS = Path(os.environ.get("ZRL_TEST_ARTIFACTS", REPO / "tests" / "artifacts"))
# Chromium as root in a container, with no network: no sandbox, no GPU, none of its background connections.
CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--no-first-run",
    "--window-size=1440,900",
)


@pytest.fixture
def browser(tmp_path):
    if not (BROWSER and DRIVER):
        message = "needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)"
        if os.environ.get("ZRL_REQUIRE_BROWSER") == "1":
            pytest.fail(message)
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = BROWSER
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def _wait(what: str, check: Callable[[], object], timeout: float, every: float = 0.25):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


def _text(driver, element_id: str) -> str:
    return driver.find_element("id", element_id).text


def _frames(driver) -> int:
    value = driver.find_element("id", "env-frames").get_attribute("data-value")
    return int(value) if value else 0


def _worker(launcher: int, name: str) -> psutil.Process | None:
    for proc in psutil.Process(launcher).children(recursive=True):
        try:
            if " ".join(proc.cmdline()).startswith(name):
                return proc
        except psutil.Error:
            continue
    return None


def test_the_dashboard_of_a_real_run_in_chromium(tmp_path, browser, no_leaks):
    run = subprocess.Popen(
        command(
            "zrl-launch",
            "--config",
            SMOKE,
            "--dashboard",
            "--set",
            "run.max_env_frames=1000000000",
            "--set",
            "run.max_seconds=900",  # the test stops it; this is a backstop
            "--set",
            "run.log_interval_s=1.0",
            "--set",
            "eval.interval_frames=20000",  # evaluations during training: points on the learning curve
            "--set",
            "eval.episodes=1",
            "--set",
            "eval.nice=0",
        ),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=open(tmp_path / "stderr.txt", "w"),  # a file: a pipe nobody reads could fill
        text=True,
    )
    try:
        lines: list[str] = []
        threading.Thread(target=lambda: lines.extend(run.stdout), daemon=True).start()  # ends at the run's end
        line = _wait("the dashboard's address", lambda: _address(run, lines), 120)
        url = re.search(r"http://127\.0\.0\.1:\d+/", line).group(0)
        browser.get(url)
        (run_dir,) = (tmp_path / "results").iterdir()

        # The figures come, and change between two reads.
        first = _wait("frames on the page", lambda: _frames(browser), 120)
        second = _wait("the frames to change", lambda: _frames(browser) if _frames(browser) != first else 0, 30)
        assert second > first
        # They agree with the CSV files: the frames are a row of metrics.csv, the return the mean of the last 100
        # episodes of episodes.csv as it stood at some moment.
        _wait("a row of metrics.csv with the page's frames", lambda: _frames_in_csv(browser, run_dir), 15)
        _wait("the page's return to be episodes.csv's", lambda: _return_in_csv(browser, run_dir), 60)
        _wait("the page's learning rate and entropy weight", lambda: _schedules_in_csv(browser, run_dir), 15)
        assert _text(browser, "status") == "running"

        # The bottleneck is named, from the roles' time split.
        named = _wait(
            "the bottleneck",
            lambda: re.fullmatch(r"(learner|broker|workers \(2\)), .+", _text(browser, "bottleneck")),
            60,
        )
        assert named
        assert _text(browser, "procs").count("zrl-worker-") == 2 and "zrl-learner" in _text(browser, "procs")

        # A worker killed outright is restarted, and the page goes on, and says so.
        victim = _wait("worker 0", lambda: _worker(run.pid, "zrl-worker-0"), 10)
        victim.send_signal(signal.SIGKILL)
        killed_at = _frames(browser)
        _wait("the restart on the page", lambda: _text(browser, "restarts") == "1", 120)
        _wait("the restart among the warnings", lambda: "restarted it" in _text(browser, "warnings"), 30)
        after = _wait("frames after the kill", lambda: _frames(browser) if _frames(browser) > killed_at else 0, 60)
        assert after > killed_at
        _wait("the frames to change again", lambda: _frames(browser) != after, 30)
        new = _wait("the new worker 0", lambda: _worker(run.pid, "zrl-worker-0"), 10)
        assert new.pid != victim.pid

        # An evaluation during training is named on the page as eval.csv has it, and drawn on the learning curve.
        _wait("an evaluation on the page", lambda: _evaluation_in_csv(browser, run_dir), 120)

        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shot = ARTIFACTS / "dashboard.png"
        height = browser.execute_script("return document.documentElement.scrollHeight")
        browser.set_window_size(1440, height + 140)  # the whole page in one picture (the window's frame aside)
        time.sleep(1.5)  # the next update redraws the charts at the new size
        browser.save_screenshot(str(shot))
        assert shot.stat().st_size > 20_000
        print(f"screenshot: {shot}")

        # When the run stops, the open page is told it ended.
        run.send_signal(signal.SIGINT)
        assert run.wait(timeout=120) == 130, _stderr(run)
        _wait("the page to say the run ended", lambda: _text(browser, "status") == "ended", 10)
    finally:
        if run.poll() is None:
            run.send_signal(signal.SIGINT)
            run.wait(timeout=120)


def _address(run: subprocess.Popen, lines: list[str]) -> str | None:
    """The launcher's line with the page's address, once it has printed it (``lines``: its output so far)."""
    found = next((line for line in lines if line.startswith("dashboard: http://127.0.0.1:")), None)
    if found is None and run.poll() is not None:
        raise AssertionError(f"zrl-launch exited with {run.returncode}: {_stderr(run)}")
    return found


def _stderr(run: subprocess.Popen) -> str:
    return Path(run.stderr.name).read_text()[-3000:]


def _frames_in_csv(browser, run_dir: Path) -> bool:
    shown = _frames(browser)
    return shown > 0 and shown in {int(r["env_frames"]) for r in csv_rows(run_dir / "metrics.csv")}


def _schedules_in_csv(browser, run_dir: Path) -> bool:
    """The page's learning rate and entropy weight (an agent's own figure, entropy_cost) are a row of
    metrics.csv's (shown to 3 figures)."""
    lines = _text(browser, "replay").splitlines()
    if any(key not in lines or "–" in lines[lines.index(key) + 1] for key in ("learning rate", "entropy_cost")):
        return False
    lr, entropy = (float(lines[lines.index(key) + 1]) for key in ("learning rate", "entropy_cost"))
    rows = [(float(r["learning_rate"] or 0), float(r["entropy_cost"] or 0)) for r in csv_rows(run_dir / "metrics.csv")]
    return any(abs(lr / a - 1) <= 0.005 and abs(entropy / b - 1) <= 0.005 for a, b in rows if a > 0 and b > 0)


def _evaluation_in_csv(browser, run_dir: Path) -> bool:
    """The page's last evaluation is a row of eval.csv: its frames and mean (shown to 2 decimals)."""
    match = re.search(
        r"Last evaluation \(deepmind, 1 episode\) at ([\d,]+) frames: (-?[\d.]+)", _text(browser, "eval-note")
    )
    if not match:
        return False
    frames, mean = int(match.group(1).replace(",", "")), float(match.group(2))
    rows = csv_rows(run_dir / "eval.csv") if (run_dir / "eval.csv").is_file() else []
    return any(int(r["env_frames"]) == frames and abs(float(r["mean"]) - mean) <= 0.005 + 1e-9 for r in rows)


def _return_in_csv(browser, run_dir: Path) -> bool:
    shown = _text(browser, "return-100")
    if shown in ("", "–"):
        return False
    returns = [float(r["raw_return"]) for r in csv_rows(run_dir / "episodes.csv")]
    means = [sum(returns[max(0, n - 100) : n]) / min(n, 100) for n in range(1, len(returns) + 1)]
    return any(abs(float(shown) - m) <= 0.005 + 1e-9 for m in means)  # shown to 2 decimals
