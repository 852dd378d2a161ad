#!/usr/bin/env python3
"""Why one routing policy reused more cache than another, request by request.

Issue 15's hit-rate misses at 4 engines are a handful of turns at the edge of
eviction; this replays the simulator's engine caches offline from
`kvrouter sim --requests-out FILE` (the slot each request ran on) and the
trace, and classifies every request where one policy reused more:

  (a)        the loser's fleet held a longer prefix than the worker it chose
  (b) new    no worker held it any more: it was evicted on the worker of the
             earlier turn that last held it, by that worker's new tokens alone
             (their sum since that turn, with the prefix, exceeds the cache)
  (b) hits   evicted only with other prompts' hits moving blocks ahead of it
  (c)        that earlier turn had itself reused less under the loser

The replay is the simulator's rule (src/mock/prefix_cache.c: LRU of leaves, a
hit refreshes its path; HiCache: GPU leaves evicted move to a host LRU) and
checks itself: its reused tokens must equal the simulator's on every request.
A development cross-check, not part of kvrouter: the replay is a second copy
of the simulator's cache rule, kept only because --requests-out records no
cache state; a change to src/mock's caches must be made here too, or the
check makes this script exit.
--sglang also replays each policy's placements under SGLang's radix cache rule
(a running request's blocks locked until it finishes, its path touched again
then; finish estimated as arrival + 1.5 s + output / 50 tokens/s), GPU only.

  build/kvrouter sim --trace data/conversation_trace.jsonl --limit 1000 --seed 1 \\
      --engines 4 --wire vllm --mm-share 0.2 --policies kvrouter,approx_tree \\
      --requests-out /tmp/v4s1.txt
  scripts/cache_diff.py --requests /tmp/v4s1.txt --slots 4 [--skip N] [--hicache 32768]
"""
import argparse
import collections
import heapq
import json
import sys

B, TRACE_BLOCK = 16, 512
SUB = TRACE_BLOCK // B


class Lru:
    """A prefix cache of chain keys: LRU of leaves, one tick per request."""

    def __init__(self, cap):
        self.cap, self.t = cap, 0
        self.tick, self.parent = {}, {}
        self.nch, self.lock = collections.Counter(), collections.Counter()
        self.heap = []

    def held(self, ks):
        i, prev = 0, None
        for k in ks:
            if k not in self.tick or self.parent[k] != prev:
                break
            prev, i = k, i + 1
        return i

    def match(self, ks):
        self.t += 1
        i, prev = 0, None
        for k in ks:
            if k not in self.tick or self.parent[k] != prev:
                break
            self.tick[k] = self.t
            if self.nch[k] == 0:
                heapq.heappush(self.heap, (self.t, -i, k))
            prev, i = k, i + 1
        return i

    def _evict_one(self, now):
        skipped, got = [], None
        while self.heap:
            t, depth, k = self.heap[0]
            if k not in self.tick or self.tick[k] != t or self.nch[k] != 0:
                heapq.heappop(self.heap)
                continue
            if t >= now:
                break
            heapq.heappop(self.heap)
            if self.lock[k] > 0:
                skipped.append((t, depth, k))
                continue
            p = self.parent.pop(k)
            del self.tick[k]
            if p is not None:
                self.nch[p] -= 1
                if self.nch[p] == 0:
                    heapq.heappush(self.heap, (self.tick[p], depth + 1, p))
            got = k
            break
        for x in skipped:
            heapq.heappush(self.heap, x)
        return got

    def insert(self, ks, touched=False):
        """Touch the cached prefix (unless just touched), evict, store the
        rest; returns (matched, stored, evicted keys)."""
        ks = ks[: self.cap]
        if touched:
            m = self.held(ks)
        else:
            m = self.match(ks)
        now, evicted = self.t, []
        while len(self.tick) + (len(ks) - m) > self.cap:
            k = self._evict_one(now)
            if k is None:
                break
            evicted.append(k)
        prev = ks[m - 1] if m else None
        stored = 0
        for k in ks[m:]:
            if len(self.tick) >= self.cap or k in self.tick:
                break
            self.tick[k], self.parent[k] = now, prev
            if prev is not None:
                self.nch[prev] += 1
            prev, stored = k, stored + 1
        if stored:
            heapq.heappush(self.heap, (now, -(m + stored - 1), prev))
        return m, stored, evicted


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", default="data/conversation_trace.jsonl")
    ap.add_argument("--requests", required=True, help="kvrouter sim --requests-out FILE")
    ap.add_argument("--skip", type=int, default=0, help="the sim's --skip")
    ap.add_argument("--slots", type=int, required=True, help="engines x dp ranks")
    ap.add_argument("--capacity", type=int, default=16384, help="GPU blocks per slot")
    ap.add_argument("--hicache", type=int, default=0, help="host blocks per slot")
    ap.add_argument("--winner", default="approx_tree")
    ap.add_argument("--loser", default="kvrouter")
    ap.add_argument("--sglang", action="store_true", help="also replay under SGLang's rule")
    a = ap.parse_args()

    rows = collections.defaultdict(dict)
    for line in open(a.requests):
        f = line.split()
        if f[0] != "policy":
            rows[f[0]][int(f[1])] = (int(f[2]), int(f[4]), float(f[6]))
    n = len(rows[a.loser])
    with open(a.trace) as t:
        lines = t.read().splitlines()[a.skip : a.skip + n]
    reqs = [json.loads(x) for x in lines]

    chain, parent = {}, {}

    def keys_of(r):
        tokens = min(len(r["hash_ids"]) * TRACE_BLOCK, r["input_length"])
        ks, cid = [], None
        for i in range(tokens // B):
            if i % SUB == 0:
                cid = chain.setdefault((cid, r["hash_ids"][i // SUB]), len(chain))
            ks.append((cid, i % SUB))
        for i, k in enumerate(ks):
            parent[k] = ks[i - 1] if i else None
        return ks

    K = [keys_of(r) for r in reqs]

    def path(k):
        p = []
        while k is not None:
            p.append(k)
            k = parent[k]
        return p[::-1]

    def serve(gpu, host, ks):
        if host is None:
            return gpu.insert(ks)
        g, h = gpu.match(ks), host.match(ks)
        m, stored, evicted = gpu.insert(ks, touched=True)
        run = None  # evicted GPU leaves move down, whole runs at once
        for k in reversed(evicted):
            if run and parent[k] == run[-1]:
                run.append(k)
                continue
            if run:
                host.insert(run)
            run = path(k)
        if run:
            host.insert(run)
        return max(g, h), stored, evicted

    def replay(pol):
        gpus = [Lru(a.capacity) for _ in range(a.slots)]
        hosts = [Lru(a.hicache) for _ in range(a.slots)] if a.hicache else None
        stored_by = [{} for _ in range(a.slots)]
        out = []
        for i in range(n):
            slot, reused, _ = rows[pol][i]
            held = [max(g.held(K[i]), hosts[s].held(K[i]) if hosts else 0) for s, g in enumerate(gpus)]
            m, stored, evicted = serve(gpus[slot], hosts[slot] if hosts else None, K[i])
            for k in evicted:
                stored_by[slot].pop(k, None)
            for k in K[i][m : m + stored]:
                stored_by[slot][k] = i
            out.append(dict(slot=slot, reused=reused, m=m, stored=stored, held=held))
        bad = sum(1 for x in out if x["m"] * B != x["reused"])
        if bad:
            sys.exit(f"{pol}: the replay differs from the simulator on {bad} requests")
        return out

    IL, IW = replay(a.loser), replay(a.winner)

    def common(x, y):
        c = 0
        for p, q in zip(K[x], K[y]):
            if p != q:
                break
            c += 1
        return c

    def classify(lo, wi, r):
        got, want, best = lo[r]["m"], wi[r]["m"], max(lo[r]["held"])
        out = {}
        if best > got:
            out["(a)"] = (min(best, want) - got) * B
        if want > max(best, got):
            j = [j for j in range(r) if common(j, r) >= want][-1]
            x = lo[j]["slot"]
            new = sum(lo[k]["stored"] for k in range(j + 1, r) if lo[k]["slot"] == x)
            c = "(b) new" if new + want > a.capacity + a.hicache else "(b) hits"
            if lo[j]["m"] < wi[j]["m"]:
                c = "(c)"
            out[c] = (want - max(best, got)) * B
        return out

    for name, lo, wi in ((f"{a.winner} > {a.loser}", IL, IW), (f"{a.loser} > {a.winner}", IW, IL)):
        cnt, tok, nreq, total = collections.Counter(), collections.Counter(), 0, 0
        for r in range(n):
            if wi[r]["m"] <= lo[r]["m"]:
                continue
            nreq, total = nreq + 1, total + (wi[r]["m"] - lo[r]["m"]) * B
            for c, v in classify(lo, wi, r).items():
                cnt[c], tok[c] = cnt[c] + 1, tok[c] + v
        parts = ", ".join(f"{c} {cnt[c]} ({tok[c]})" for c in sorted(cnt))
        print(f"{name}: {nreq} requests ({total} tokens): {parts or '-'}")

    if a.sglang:
        for pol in (a.loser, a.winner):
            print(pol, "hit % (simulator, locked, locked + touched at finish):",
                  " ".join(f"{sglang_replay(a, reqs, K, rows[pol], lock, touch):.2f}"
                           for lock, touch in ((0, 0), (1, 0), (1, 1))))


def sglang_replay(a, reqs, K, placed, lock, touch):
    gpus = [Lru(a.capacity) for _ in range(a.slots)]
    running, held, reused, prompt = [], {}, 0, 0
    for i, r in enumerate(reqs):
        slot, _, t = placed[i]
        while running and running[0][0] <= t:
            _, j = heapq.heappop(running)
            g = gpus[placed[j][0]]
            for k in K[j][: held[j]]:
                g.lock[k] -= 1
            if touch:
                g.match(K[j])
        g = gpus[slot]
        m, stored, _ = g.insert(K[i])
        reused += m * B
        prompt += min(len(r["hash_ids"]) * TRACE_BLOCK, r["input_length"])
        held[i] = m + stored if lock else 0
        for k in K[i][: held[i]]:
            g.lock[k] += 1
        heapq.heappush(running, (t + 1.5 + r["output_length"] / 50.0, i))
    return 100.0 * reused / prompt


if __name__ == "__main__":
    main()
