from setuptools import find_packages, setup

with open("requirements.txt") as fh:
    requirements = [line.strip() for line in fh if line.strip() and not line.startswith("#")]

setup(
    name="zrl",
    version="0.1.0",
    description="Distributed reinforcement learning for Atari and Gymnasium on ZeroMQ and shared memory",
    python_requires=">=3.11",
    packages=find_packages(include=["zrl", "zrl.*", "shm", "shm.*"]),
    package_data={
        "zrl.bench": ["reference/*.json"],
        "zrl.config": ["games/*/*.toml"],
        "zrl.dashboard": ["page.html"],
    },
    install_requires=requirements,
    extras_require={
        # matplotlib draws zrl-bench learning's curves (tests check the PNG)
        # and ruff lints and formats (pyproject.toml; .ci/run enforces both): one fast tool for what flake8,
        # isort, pyupgrade and black did apart
        # msgpack: tests/test_protocol.py reads and forges the wire form with an implementation other than zrl's
        # selenium: drives Debian's Chromium (through its chromedriver) for the dashboard's browser test; 4.51, as
        # 4.52 needs a certifi newer than the package index here holds
        # hypothesis: tests/test_properties.py generates the untrusted inputs of every decoder (messages, weights,
        # checkpoints, configs, the reference's replay JSON)
        # import-linter: the import contracts of pyproject.toml (tests/test_layering.py runs its lint-imports), the
        # maintained tool for them rather than an import graph of our own
        # mypy: pyproject.toml's [tool.mypy] checker (tests/test_types.py runs it); pinned, as each release finds more
        "test": [
            "pytest==9.2.0",
            "pytest-timeout==2.4.0",
            "matplotlib==3.11.2",
            "ruff==0.17.6",
            "msgpack==1.2.4",
            "selenium==4.51.0",
            "hypothesis==6.170.17",
            "import-linter==2.17",
            "mypy==2.4.1",
        ],
        # zrl-bench env: the peers measured beside zrl where they install (EnvPool; Gymnasium's Atari wrappers
        # need OpenCV), and matplotlib for perf/plot.py
        "peers": ["envpool==1.2.5", "opencv-python-headless==5.0.0.93", "matplotlib==3.11.2"],
        # beyond one machine: Ray places and restarts remote workers (zrl-launch --ray): the engine RLlib users already
        # run, rather than a cluster manager of zrl's own; 2.60.0 installs beside torch 2.13 without touching it (a
        # 79 MB wheel). lz4 only for perf/frame_compression.py's comparison (zstandard, which won it, is a
        # requirement: the ingest and zrl-worker use it)
        "cluster": ["ray==2.60.0", "lz4==4.4.5"],
    },
    entry_points={
        "console_scripts": [
            "zrl-launch=zrl.cli.launch:launch_main",
            "zrl-bench=zrl.cli.bench:bench_main",
            "zrl-eval=zrl.cli.eval:eval_main",
            "zrl-keys=zrl.cli.keys:keys_main",
            "zrl-worker=zrl.cli.worker:worker_main",
            "zrl-sweep=zrl.cli.sweep:sweep_main",
            "zrl-report=zrl.cli.report:report_main",
            "zrl-plot=zrl.cli.plot:plot_main",
            "zrl-dashboard=zrl.cli.dashboard:dashboard_main",
            "zrl-translate=zrl.cli.translate:translate_main",
        ]
    },
)
