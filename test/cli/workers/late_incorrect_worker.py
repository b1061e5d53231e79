#!/usr/bin/env python3
"""A worker whose device output check passes for the first $OK_REQUESTS requests (default 8) and
fails ("incorrect") for every later one: a device that starts computing wrong mid-run. The
count lives in the file $COUNT_FILE, so restarted workers keep counting. docs/PROTOCOL.md;
standard library only."""
import hashlib
import json
import os
import sys

count_file = os.environ["COUNT_FILE"]
ok_requests = int(os.environ.get("OK_REQUESTS", "8"))
for line in sys.stdin:
    req = json.loads(line)
    n = (int(open(count_file).read()) if os.path.exists(count_file) else 0) + 1
    with open(count_file, "w") as f:
        f.write(str(n))
    if n <= ok_requests:
        h = int(hashlib.sha256(req.get("schedule", "").encode()).hexdigest()[:8], 16)
        r = {"v": 1, "id": req["id"], "status": "ok", "latency_ns": [1000.0 + h % 500] * 3}
    else:
        r = {"v": 1, "id": req["id"], "status": "incorrect", "message": "device output check: C[3,5] = 7.1, reference 0.2"}
    sys.stdout.write(json.dumps(r) + "\n")
    sys.stdout.flush()
