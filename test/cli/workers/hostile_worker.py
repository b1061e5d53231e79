#!/usr/bin/env python3
"""A hostile kevo worker (docs/PROTOCOL.md): per request it answers properly or misbehaves.

What it does to request `id` is drawn from random.Random("<seed>:<id>") -- seed from the
environment variable HOSTILE_SEED (default 1) -- so a run is reproducible: it hangs (sleeps an
hour without reading), exits 139, prints garbage, prints an 8 MiB line, prints half a line and
hangs, answers `latency_ns: [-5, "NaN", 1e400]`, or answers ok with a latency that depends only
on the schedule text. HOSTILE_MODES=hang,ok,... restricts the draw to those modes (tests).
Only the Python standard library is used.
"""
import hashlib
import json
import os
import random
import sys
import time

MODES = ["ok", "ok", "ok", "hang", "exit139", "garbage", "flood", "half", "bad_latency"]


def reply(text):
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def main():
    seed = os.environ.get("HOSTILE_SEED", "1")
    modes = os.environ.get("HOSTILE_MODES", "").split(",") if os.environ.get("HOSTILE_MODES") else MODES
    for line in sys.stdin:
        req = json.loads(line)
        rid = req["id"]
        mode = random.Random("%s:%d" % (seed, rid)).choice(modes)
        if mode == "ok":
            h = int(hashlib.sha256(req.get("schedule", "").encode()).hexdigest()[:8], 16)
            lat = 100000.0 + (h % 1000) * 100.0
            reply(json.dumps({"v": 1, "id": rid, "status": "ok", "latency_ns": [lat] * 3}))
        elif mode == "hang":
            time.sleep(3600)
        elif mode == "exit139":
            sys.stderr.write("hostile worker: Segmentation fault\n")
            sys.stderr.flush()
            os._exit(139)
        elif mode == "garbage":
            reply("\x1b[31mWARNING\x1b[0m compiler said: \x00\xff nonsense")
        elif mode == "flood":
            reply("x" * (8 << 20))
        elif mode == "half":
            sys.stdout.write('{"v": 1, "id": %d, "status": "o' % rid)
            sys.stdout.flush()
            time.sleep(3600)
        elif mode == "bad_latency":
            reply('{"v": 1, "id": %d, "status": "ok", "latency_ns": [-5, "NaN", 1e400]}' % rid)


if __name__ == "__main__":
    main()
