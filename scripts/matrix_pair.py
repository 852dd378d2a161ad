#!/usr/bin/env python3
"""Pairs two scripts/matrix.sh outputs run by run (same shape, same seed).

A 4-engine shape's hit difference from approx_tree moves by about half a
point from one 1,000-request slice of the trace to the next (which few turns
survive the eviction edge), so a rule judged on 3 seeds is judged inside
that noise. Each run of a rule is compared with the same slice under the
other settings (the defaults): the approx_tree row of a slice does not depend
on the router's options, so the pairing takes out the slice's own luck.

  MATRIX_SEEDS="$(seq 1 12)" scripts/matrix.sh > base.md
  MATRIX_SEEDS="$(seq 1 12)" MATRIX_POLICIES=kvrouter,approx_tree \
      scripts/matrix.sh --router-opt lru_edge=cost > cost.md
  scripts/matrix_pair.py base.md cost.md

Both sides are measured against the base run's approx_tree hit and best
baseline TTFT p50 of the slice (the rule's run may have run fewer
baselines), so its runs passing are left out.

Prints one markdown row per shape: the runs paired, the mean change of
kvrouter's hit rate (points) with the runs it raised and lowered, the mean
hit - approx_tree's of each side with its runs at or above approx_tree's,
the base's runs passing every target, and the mean TTFT p50 over the best
baseline's on each side.
"""
import re
import sys

ROW = re.compile(r"^\| (\w+) \| (\d+) \| ([\d.]+) \(([\d.]+)\) \|[^|]*\|[^|]*\|[^|]*\|"
                 r" ([\d.]+) \(([\d.]+) \w+\) \|[^|]*\| (pass|FAIL[^|]*) \|")


def runs(path):
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = ROW.match(line)
            if m:
                hit, approx, p50, best_p50 = (float(x) for x in m.group(3, 4, 5, 6))
                out[(m.group(1), int(m.group(2)))] = {
                    "hit": hit, "approx": approx, "p50": p50, "best_p50": best_p50,
                    "pass": m.group(7) == "pass"}
    return out


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: matrix_pair.py BASE.md RULE.md")
    base, rule = runs(sys.argv[1]), runs(sys.argv[2])
    shapes = []  # in the base run's order
    for shape, _ in base:
        if shape not in shapes:
            shapes.append(shape)
    print("| shape | runs | hit change, mean points (raised / lowered) "
          "| hit - approx_tree: base, rule (runs at or above) | base runs passing "
          "| TTFT p50 / best baseline: base, rule |")
    print("| --- | --- | --- | --- | --- | --- |")
    for shape in shapes:
        keys = sorted(k for k in rule if k[0] == shape and k in base)
        if not keys:
            continue
        n = len(keys)
        d = [rule[k]["hit"] - base[k]["hit"] for k in keys]
        up = sum(1 for x in d if x > 0.005)
        down = sum(1 for x in d if x < -0.005)

        def side(t):
            dh = sum(t[k]["hit"] - base[k]["approx"] for k in keys) / n
            ge = sum(1 for k in keys if t[k]["hit"] >= base[k]["approx"])
            r50 = sum(t[k]["p50"] / base[k]["best_p50"] for k in keys) / n
            return dh, ge, r50

        b, r = side(base), side(rule)
        ok = sum(1 for k in keys if base[k]["pass"])
        print(f"| {shape} | {n} | {sum(d) / n:+.2f} ({up} / {down}) "
              f"| {b[0]:+.2f} ({b[1]}/{n}), {r[0]:+.2f} ({r[1]}/{n}) | {ok}/{n} "
              f"| {b[2]:.3f}, {r[2]:.3f} |")


if __name__ == "__main__":
    main()
