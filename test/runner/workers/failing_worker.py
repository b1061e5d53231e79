#!/usr/bin/env python3
"""A ProcessRunner worker that misbehaves on request, to exercise every failure path.

Each request's "schedule" text carries `mode=<name>` (and optional `pidfile=`/`marker=` paths);
the worker then answers properly or hangs, dies, floods, prints garbage, answers the wrong id...
Protocol: docs/PROTOCOL.md. Only the Python standard library is used.
"""
import json
import os
import signal
import sys
import time


def reply(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def options(schedule):
    opts = {}
    for tok in schedule.split():
        if "=" in tok:
            k, v = tok.split("=", 1)
            opts[k] = v
    return opts


def main():
    # $START_STDERR_BYTES: logged to stderr before the first request is read (a chatty start-up)
    # $START_SLEEP: seconds of start-up before the first request is read (a device runtime)
    time.sleep(float(os.environ.get("START_SLEEP", "0")))
    n = int(os.environ.get("START_STDERR_BYTES", "0"))
    if n:
        sys.stderr.write("l" * n)
        sys.stderr.flush()
    for line in sys.stdin:
        req = json.loads(line)
        rid = req["id"]
        opts = options(req.get("schedule", ""))
        mode = opts.get("mode", "ok")
        ok = {"v": 1, "id": rid, "status": "ok", "latency_ns": [1000.0 + i for i in range(req.get("repeats", 3))],
              "message": "", "profile": "fake worker"}
        if mode == "ok":
            reply(ok)
        elif mode == "echo":
            ok["profile"] = "target=%s nki=%s" % (req.get("target"), req.get("nki", ""))
            reply(ok)
        elif mode == "hang":
            time.sleep(3600)
        elif mode == "hang_group":
            child = os.fork()
            if child == 0:
                time.sleep(3600)
                os._exit(0)
            with open(opts["pidfile"], "w") as f:
                f.write(str(child))
            time.sleep(3600)
        elif mode == "die":
            sys.stderr.write("worker: fatal: out of device memory\n")
            sys.stderr.flush()
            os._exit(3)
        elif mode == "segv":
            os.kill(os.getpid(), signal.SIGSEGV)
        elif mode == "flood":
            chunk = "x" * 65536
            while True:
                sys.stdout.write(chunk)
        elif mode == "stderr_flood":
            sys.stderr.write("e" * (8 << 20))
            sys.stderr.flush()
            reply(ok)
        elif mode == "blank_then_ok":
            sys.stdout.write("\n  \n")
            sys.stdout.flush()
            reply(ok)
        elif mode == "big_profile":
            reply(dict(ok, profile="p" * 900000))
        elif mode == "die_with_logger":
            # a child that keeps writing stderr, then the worker dies without answering
            if os.fork() == 0:
                while True:
                    sys.stderr.write("child log\n")
                    sys.stderr.flush()
                    time.sleep(0.03)
            time.sleep(0.1)
            sys.stderr.write("worker: fatal\n")
            sys.stderr.flush()
            os._exit(3)
        elif mode == "garbage":
            sys.stdout.write("compiling kernel... done\n")
            sys.stdout.flush()
        elif mode == "unasked":
            # answers, then answers the next request before it is asked, at 1 ns
            reply(ok)
            reply(dict(ok, id=rid + 1, latency_ns=[1.0] * 5))
        elif mode == "wrong_id":
            ok["id"] = rid + 1000
            reply(ok)
        elif mode == "bad_status":
            ok["status"] = "fantastic"
            reply(ok)
        elif mode == "worker_error":
            reply({"v": 1, "id": rid, "status": "error", "latency_ns": [], "message": "neuronx-cc: compilation failed"})
        elif mode == "close_stdout":
            os.close(1)
            time.sleep(3600)
        elif mode == "slow_garbage":
            time.sleep(float(opts.get("delay", "1")))
            sys.stdout.write("still compiling...\n")
            sys.stdout.flush()
        elif mode == "crash_once":
            marker = opts["marker"]
            if not os.path.exists(marker):
                open(marker, "w").close()
                os._exit(1)
            reply(ok)
        else:
            reply({"v": 1, "id": rid, "status": "error", "message": "unknown mode " + mode})


if __name__ == "__main__":
    main()
