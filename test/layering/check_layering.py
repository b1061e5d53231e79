#!/usr/bin/env python3
"""Checks docs/ARCHITECTURE.md's module rules against the sources (ctest: `layering`).

1. A module's DEPS (lib/<m>/CMakeLists.txt, `kevo_module(<m> DEPS ...)`) name only modules listed
   before it in the top-level KEVO_MODULES order.
2. Every `#include "kevo/<x>..."` in a module's files (include/kevo/<m>.hpp, include/kevo/<m>/,
   lib/<m>/, and the nest kinds' parts in lib/nests/<kind>/: derive, plan and text belong to
   schedule, lower to lower) names the module itself or one it depends on, directly or not.
3. A module includes another module's private headers (lib/<x>/..., included as "<x>/...") never;
   the front ends (cli, capi, python) include public headers only.
4. The boundaries the architecture states by name: evo and llm include nothing of ir, schedule or
   lower; runner nothing of evo or schedule.
5. No public header includes Eigen, Boost, TBB, cereal, nlohmann_json, curl or MPI.

Usage: check_layering.py SOURCE_DIR. Prints one line per violation and exits 1 if there is any.
"""
import pathlib
import re
import sys

FRONT_ENDS = {"cli", "capi", "python"}
FORBIDDEN = {"evo": {"ir", "schedule", "lower"}, "llm": {"ir", "schedule", "lower"}, "runner": {"evo", "schedule"}}
THIRD_PARTY = re.compile(r'#\s*include\s*[<"](Eigen/|eigen3/|boost/|tbb/|oneapi/tbb|cereal/|nlohmann/|curl/|mpi\.h)')
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def module_order(root):
    text = (root / "CMakeLists.txt").read_text()
    m = re.search(r"set\(KEVO_MODULES ([^)]*)\)", text)
    if not m:
        raise SystemExit("layering: CMakeLists.txt: no set(KEVO_MODULES ...)")
    order = m.group(1).split()
    order += re.findall(r"list\(APPEND KEVO_MODULES (\w+)\)", text)
    return order


def direct_deps(root, order):
    deps = {}
    for m in order:
        cm = root / "lib" / m / "CMakeLists.txt"
        if not cm.exists():
            continue
        call = re.search(r"kevo_module\(\s*" + m + r"\b([^)]*)\)", cm.read_text(), re.S)
        if not call:
            raise SystemExit(f"layering: {cm.relative_to(root)}: no kevo_module({m} ...) call")
        words = call.group(1).split()
        names, on = [], False
        for w in words:
            if w == "DEPS":
                on = True
            elif w in ("PRIVATE_LIBS", "PUBLIC_LIBS"):
                on = False
            elif on:
                names.append(w)
        deps[m] = names
    return deps


def closure(deps, m, seen=None):
    seen = set() if seen is None else seen
    for d in deps.get(m, []):
        if d not in seen:
            seen.add(d)
            closure(deps, d, seen)
    return seen


def files_of(root, m):
    out = []
    face = root / "include" / "kevo" / f"{m}.hpp"
    if face.exists():
        out.append(face)
    for base in (root / "include" / "kevo" / m, root / "lib" / m):
        if base.is_dir():
            out += [p for p in base.rglob("*") if p.suffix in (".hpp", ".cpp", ".h")]
    nests = root / "lib" / "nests"
    if m == "schedule" and nests.is_dir():
        out += [p for p in nests.rglob("*") if p.suffix in (".hpp", ".cpp") and p.stem != "lower"]
    if m == "lower" and nests.is_dir():
        out += list(nests.rglob("lower.cpp"))
    return out


def main():
    if len(sys.argv) != 2:
        raise SystemExit("usage: check_layering.py SOURCE_DIR")
    root = pathlib.Path(sys.argv[1]).resolve()
    order = module_order(root)
    deps = direct_deps(root, order)
    lib_folders = {p.name for p in (root / "lib").iterdir() if p.is_dir()}
    problems = []
    for i, m in enumerate(order):
        for d in deps.get(m, []):
            if d not in order[:i]:
                problems.append(f"lib/{m}/CMakeLists.txt: DEPS names '{d}', which is not listed before '{m}' in KEVO_MODULES")
    checked = 0
    for m in order + sorted(FRONT_ENDS):
        allowed = None if m in FRONT_ENDS else closure(deps, m) | {m}
        for f in files_of(root, m):
            checked += 1
            rel = f.relative_to(root)
            text = f.read_text(errors="replace")
            for inc in INCLUDE.findall(text):
                parts = inc.split("/")
                if parts[0] == "kevo" and len(parts) >= 2:
                    x = parts[1][:-4] if parts[1].endswith(".hpp") else parts[1]
                    if x not in order:
                        continue  # kevo/kevo.h and other non-module headers
                    if allowed is not None and x not in allowed:
                        problems.append(f"{rel}: includes \"{inc}\": module '{m}' does not depend on '{x}'")
                    if x in FORBIDDEN.get(m, ()):
                        problems.append(f"{rel}: includes \"{inc}\": '{m}' must not see '{x}' (docs/ARCHITECTURE.md)")
                elif len(parts) >= 2 and parts[0] in lib_folders and parts[0] != m:
                    own = parts[0] == "nests" and m in ("schedule", "lower")
                    if not own:
                        problems.append(f"{rel}: includes \"{inc}\": a private header of '{parts[0]}'")
            if rel.parts[0] == "include" and THIRD_PARTY.search(text):
                problems.append(f"{rel}: a public header includes a third-party library: {THIRD_PARTY.search(text).group(0)}")
    for p in problems:
        print(f"layering: {p}")
    if checked == 0:
        print("layering: no module files found")
        return 1
    print(f"layering: {checked} files of {len(order)} modules and {len(FRONT_ENDS)} front ends checked, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
