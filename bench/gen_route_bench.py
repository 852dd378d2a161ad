#!/usr/bin/env python3
"""Fixture for the /route and /query benchmarks: a /dump (JSON lines) giving
64 workers cached prefixes of 16 prompt families (2,000 tokens each), and the
request bodies (for wrk and for http_client.py). The workers' endpoints come
from fixture_peer.py. Local hashes come from `kvrouter hash`, so they are the
router's own (SPEC §4).

usage: gen_route_bench.py KVROUTER OUTDIR [--workers 64] [--block-size 16]
"""
import json
import os
import subprocess
import sys

def main():
    kvr, out = sys.argv[1], sys.argv[2]
    args = sys.argv[3:]
    workers = int(args[args.index("--workers") + 1]) if "--workers" in args else 64
    bs = int(args[args.index("--block-size") + 1]) if "--block-size" in args else 16
    families, n_tokens = 16, 2000
    os.makedirs(out, exist_ok=True)
    # Family f: tokens 1000*f + i for a shared 1,000-token system prompt, then
    # a per-family tail; all below the legacy pad range.
    fam_tokens = [[(f * 7919 + i * 31) % 150000 + 10 for i in range(n_tokens)] for f in range(families)]
    fam_hashes = []
    for toks in fam_tokens:
        res = subprocess.run([kvr, "hash", "--block-size", str(bs)] + [str(t) for t in toks],
                             check=True, capture_output=True, text=True)
        fam_hashes.append(res.stdout.split())
    with open(os.path.join(out, "dump"), "w") as f:
        for w in range(1, workers + 1):
            # each worker: its own family whole, the next family's first 40%
            for fam, frac in ((w % families, 1.0), ((w + 1) % families, 0.4)):
                hs = fam_hashes[fam][: int(len(fam_hashes[fam]) * frac)]
                blocks = [[str(w * 10**7 + fam * 10**5 + i), h] for i, h in enumerate(hs)]
                f.write(json.dumps({"model": "m", "group": "default", "worker": str(w), "rank": 0,
                                    "tier": "gpu", "parent": None, "blocks": blocks}) + "\n")
    # The same bodies for wrk (Lua, request_id as a %s to format) and for
    # bench/http_client.py (one JSON template a line).
    bodies = ['{"model_name":"m","request_id":"%s","token_ids":[' + ",".join(map(str, toks)) + "]}"
              for toks in fam_tokens]
    with open(os.path.join(out, "bodies.lua"), "w") as f:
        f.write("bodies = {\n")
        for b in bodies:
            f.write("  [[" + b + "]],\n")
        f.write("}\n")
    with open(os.path.join(out, "bodies.txt"), "w") as f:
        f.write("\n".join(bodies) + "\n")

if __name__ == "__main__":
    main()
