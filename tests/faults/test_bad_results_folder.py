"""A results folder that cannot be written is a clear error before anything starts."""

from __future__ import annotations

from conftest import REPO, run_command, zrl_segments

SMOKE = REPO / "config" / "smoke.toml"


def test_an_unwritable_results_folder_is_refused_at_start(tmp_path, no_leaks):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the results folder should be\n")
    before = zrl_segments()
    done = run_command("zrl-launch", "--config", SMOKE, "--set", f'run.results_dir="{blocker}/results"', cwd=tmp_path,
                       timeout=120)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert f"run.results_dir: cannot create {blocker}/results (Not a directory)" in done.stderr
    assert "--set run.results_dir=PATH" in done.stderr and "Traceback" not in done.stderr
    assert zrl_segments() == before and blocker.read_text().startswith("a file")
