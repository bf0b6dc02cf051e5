"""Issue 38, item 7, the other side of SIGHUP: a run started under nohup (SIGHUP ignored, so that it outlives its
terminal) keeps outliving it; only a run that takes SIGHUP stops on it."""

from __future__ import annotations

import signal

import pytest
from conftest import make_config

from zrl.launch.console import Console
from zrl.launch.supervise import Supervisor, stop_signals

pytestmark = pytest.mark.unit


@pytest.fixture
def sighup_as_nohup_left_it():
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGHUP, before)


def test_under_nohup_the_launcher_leaves_sighup_ignored(sighup_as_nohup_left_it):
    assert stop_signals() == (signal.SIGINT, signal.SIGTERM)
    sup = Supervisor(make_config(), Console(quiet=True), lambda i, start: None, lambda: None)
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        sup.catch_signals()
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) == sup._on_signal
    finally:
        sup.restore_signals()
    assert {s: signal.getsignal(s) for s in before} == before


def test_without_nohup_sighup_is_a_stop_signal():
    before = signal.signal(signal.SIGHUP, signal.SIG_DFL)
    try:
        assert stop_signals() == (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    finally:
        signal.signal(signal.SIGHUP, before)
