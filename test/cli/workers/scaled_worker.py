#!/usr/bin/env python3
"""A worker whose latency is a fixed function of the schedule text, times $KEVO_TEST_SLOWDOWN
(default 1): the same schedule always measures the same, and a slowdown is a regression that
`kevo check` must catch. Protocol: docs/PROTOCOL.md; standard library only."""
import hashlib
import json
import os
import sys

factor = float(os.environ.get("KEVO_TEST_SLOWDOWN", "1"))
for line in sys.stdin:
    req = json.loads(line)
    h = int(hashlib.sha256(req.get("schedule", "").encode()).hexdigest()[:8], 16)
    base = 10000.0 + h % 5000
    n = max(1, int(req.get("repeats", 3)))
    sys.stdout.write(json.dumps({"v": 1, "id": req["id"], "status": "ok", "latency_ns": [base * factor] * n,
                                 "message": "", "profile": "scaled worker"}) + "\n")
    sys.stdout.flush()
