"""Edge cases of the Python module: objects made without __init__, what Python runners, problems,
strategies and progress callbacks may return, Ctrl-C inside Python code kevo calls, argument
checks. Each is a failed evaluation, a typed one-line error or an interrupted result; never a
crash or an unlocated RuntimeError."""
import os
import signal
import threading
import time

import numpy as np
import pytest

import kevo

MM = "matmul:M=256,N=256,K=256,dtype=bf16"


# ---------------------------------------------------------------- objects made without __init__


@pytest.mark.parametrize(
    "make, use",
    [
        (lambda: kevo.Kernel.__new__(kevo.Kernel), lambda k: kevo.Space(k)),
        (lambda: kevo.Kernel.__new__(kevo.Kernel), lambda k: kevo.eval(k)),
        (lambda: kevo.Kernel.__new__(kevo.Kernel), lambda k: kevo.search(k, budget=4)),
        (lambda: kevo.Kernel.__new__(kevo.Kernel), lambda k: k.reference()),
        (lambda: kevo.Kernel.__new__(kevo.Kernel), lambda k: k.name),
        (lambda: kevo.Target.__new__(kevo.Target), lambda t: kevo.eval(MM, target=t)),
        (lambda: kevo.Target.__new__(kevo.Target), lambda t: t.name),
        (lambda: kevo.Space.__new__(kevo.Space), lambda s: s.default()),
        (lambda: kevo.Space.__new__(kevo.Space), lambda s: s.print([0])),
        (lambda: kevo.Candidate.__new__(kevo.Candidate), lambda c: c.nki()),
        (lambda: kevo.AskContext.__new__(kevo.AskContext), lambda c: c.size),
    ],
)
def test_objects_made_without_init_are_type_errors(make, use):
    with pytest.raises(TypeError, match="made by __new__ without __init__"):
        use(make())
