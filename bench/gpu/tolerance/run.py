"""On the GPU machine: replay kevo's captured requests through the old and the new worker, and
measure what each tolerance accepts of perturbed outputs."""
import glob, json, os, subprocess, sys, time
import torch
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import new_worker as W

def old_accepts(out, ref, p):
    dt = p["dtype"]
    if p["family"] == "row" and p.get("op") == "softmax":
        atol, rtol = (1e-5, 3e-2) if dt != "fp32" else (1e-6, 1e-4)
    elif dt == "fp32":
        atol, rtol = 1e-4, 1e-4
    else:
        atol, rtol = (3e-2, 3e-2) if dt == "bf16" else (1e-2, 1e-2)
    err = (out - ref).abs()
    bad = (err > atol + rtol * ref.abs()) | ~torch.isfinite(out)
    return int(bad.sum().item())

res = {}
for f in sorted(glob.glob(os.path.join(here, "req_*.jsonl"))):
    name = os.path.basename(f)[4:-6]
    reqs = [json.loads(l) for l in open(f) if l.strip()]
    row = {"requests": len(reqs)}
    for which in ("old_worker.py", "new_worker.py"):
        t0 = time.time()
        pr = subprocess.run([sys.executable, os.path.join(here, which)], input="".join(json.dumps(r) + "\n" for r in reqs),
                            capture_output=True, text=True, timeout=400)
        st = {}
        msgs = []
        for l in pr.stdout.splitlines():
            try:
                a = json.loads(l)
            except Exception:
                continue
            st[a["status"]] = st.get(a["status"], 0) + 1
            if a["status"] != "ok" and len(msgs) < 2:
                msgs.append(a.get("message", "")[:300])
        row[which] = {"statuses": st, "messages": msgs, "seconds": round(time.time() - t0, 1)}
    p = reqs[0]["problem"]
    prob = W.Problem(p)
    ref = prob.ref.float()
    fin = torch.isfinite(ref)
    row["ref_rms"] = float(ref[fin].double().pow(2).mean().sqrt().item())
    row["ref_absmax"] = float(ref[fin].abs().max().item())
    dt = W.DT[p["dtype"]]
    pert = {}
    for label, out in (("x1.00", ref), ("x1.05", ref * 1.05), ("x1.10", ref * 1.10), ("x0.90", ref * 0.90),
                       ("zeros", torch.zeros_like(ref)), ("+0.5rms noise", ref + 0.5 * row["ref_rms"] * torch.randn_like(ref))):
        o = out.to(dt).float()
        pert[label] = {"old_bad": old_accepts(o, ref, p), "new_bad": W.check(o, ref, p)[0], "n": o.numel()}
    row["perturbed"] = pert
    res[name] = row
    print(name, json.dumps(row), flush=True)
out = os.environ.get("OUT", here)
json.dump(res, open(os.path.join(out, "tolcheck.json"), "w"), indent=1)
