"""The Python examples run as-is (small budgets): examples/python/*.py."""
import os
import pathlib
import runpy
import sys

import pytest

ROOT = pathlib.Path(os.environ.get("KEVO_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
EXAMPLES = ROOT / "examples" / "python"


def load(name):
    return runpy.run_path(str(EXAMPLES / name), run_name="example")


def test_custom_runner(capsys):
    assert load("custom_runner.py")["main"](["--budget", "40", "--workload", "matmul:M=256,N=256,K=256,dtype=bf16"]) == 0
    out = capsys.readouterr().out
    assert "best under the Python runner" in out and "simulated trn2" in out


def test_compare_strategies(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "curves.png"
    rc = load("compare_strategies.py")["main"](
        ["--budget", "24", "--seeds", "2", "--out", str(out), "--kernels", "matmul:M=256,N=256,K=256,dtype=bf16"])
    assert rc == 0
    assert out.stat().st_size > 10_000  # a real PNG with curves
    assert "median final best" in capsys.readouterr().out


def test_notebook(capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["notebook.py"])
    load("notebook.py")
    out = capsys.readouterr().out
    assert "verified by" in out and "instructions" in out


def test_custom_strategy(capsys):
    rc = load("custom_strategy.py")["main"](
        ["--budget", "40", "--seeds", "1", "--workload", "matmul:M=256,N=256,K=256,dtype=bf16"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "one_plus_lambda: median" in out and "ga: median" in out
