#!/usr/bin/env python3
"""A device stand-in for the MPI scaling measurement: every measurement sleeps $KEVO_SLEEP_S
seconds (default 1) and returns a latency that is a fixed function of the schedule text (so the
search is the same at any rank count). Protocol: docs/PROTOCOL.md; standard library only.
It reports the rank it serves (KEVO_MPI_LOCAL_RANK, set by kevo under MPI) in its profile, the way a
real worker would pick its local NeuronCore or GPU."""
import hashlib
import json
import os
import sys
import time

sleep_s = float(os.environ.get("KEVO_SLEEP_S", "1"))
device = os.environ.get("KEVO_MPI_LOCAL_RANK", "0")
for line in sys.stdin:
    req = json.loads(line)
    time.sleep(sleep_s)
    h = int(hashlib.sha256(req.get("schedule", "").encode()).hexdigest()[:8], 16)
    n = max(1, int(req.get("repeats", 3)))
    sys.stdout.write(json.dumps({"v": 1, "id": req["id"], "status": "ok", "latency_ns": [10000.0 + h % 5000] * n,
                                 "message": "", "profile": f"sleep worker on device {device}"}) + "\n")
    sys.stdout.flush()
