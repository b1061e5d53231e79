#!/usr/bin/env python3
"""A GPU worker without a GPU, for tests: answers kevo's worker protocol (docs/PROTOCOL.md) for
GPU requests. It checks what the real worker (examples/runners/triton_worker.py) relies on --
the "triton" module parses as Python, defines INPUTS, OUTPUTS, launch() whose parameters are the
problem's tensor names, and one @triton.jit kernel at least -- and answers a deterministic
latency from a toy model of the schedule (not a measurement). FAKE_MODE=crash_on_persistent
makes it exit without answering when the schedule has program=persistent (kevo must restart it);
FAKE_MODE=incorrect_on_retime answers "incorrect" (its output check failed) to the leaders'
re-timing, the requests of 30 repeats or more (kevo must not name any of them best).
"""
import ast
import json
import os
import sys


def fake_latency(p, sched):
    g = dict(kv.split("=", 1) for kv in sched.split())
    if p["family"] == "matmul":
        bm, bn, bk = int(g["block_m"]), int(g["block_n"]), int(g["block_k"])
        eff = 0.5 + 0.1 * (bm >= 128) + 0.1 * (bn >= 128) + 0.05 * (bk == 64) + 0.05 * (g.get("stages") in ("3", "4"))
        eff += 0.05 * (g.get("program") == "persistent") - 0.1 * (g.get("split_k", "1") != "1")
        return p["flops"] / (989e12 * eff) * 1e9
    if p["family"] == "row":
        eff = 0.5 + 0.05 * (int(g["warps"]) in (8, 16)) + 0.1 * (int(g["block_c"]) >= p["C"])
        return p["min_bytes"] / (4.8e12 * eff) * 1e9
    eff = 0.4 + 0.1 * (g["block_m"] == "128") + 0.05 * (g["warps"] == "8")
    return p["flops"] / (989e12 * eff) * 1e9


def main():
    mode = os.environ.get("FAKE_MODE", "")
    for line in sys.stdin:
        req = json.loads(line)
        rid = req["id"]
        src, p = req.get("triton", ""), req.get("problem")

        def reply(status, **kw):
            sys.stdout.write(json.dumps({"v": 1, "id": rid, "status": status, **kw}) + "\n")
            sys.stdout.flush()

        if not src or not isinstance(p, dict):
            reply("error", message="no triton source or problem in the request")
            continue
        if mode == "crash_on_persistent" and "program=persistent" in req["schedule"]:
            sys.exit(7)
        if mode == "incorrect_on_retime" and int(req.get("repeats", 0)) >= 30:
            reply("incorrect", message="max |diff| 3.5 at [0, 7]")
            continue
        try:
            tree = ast.parse(src)
        except SyntaxError as e:
            reply("error", message=f"emitted source does not parse: {e}")
            continue
        names = {n.targets[0].id for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name)}
        funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        jitted = [f for f in funcs.values() if any(ast.unparse(d) == "triton.jit" for d in f.decorator_list)]
        want = [t["name"] for t in p["tensors"]]
        if "INPUTS" not in names or "OUTPUTS" not in names or "launch" not in funcs or not jitted:
            reply("error", message="module lacks INPUTS, OUTPUTS, launch() or a @triton.jit kernel")
            continue
        got = [a.arg for a in funcs["launch"].args.args]
        if got != want:
            reply("error", message=f"launch({', '.join(got)}) but the problem's tensors are {want}")
            continue
        ns = fake_latency(p, req["schedule"])
        reply("ok", latency_ns=[ns, ns * 1.01, ns * 0.99], profile={"fake": True})
    return 0


if __name__ == "__main__":
    sys.exit(main())
