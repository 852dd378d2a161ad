#!/usr/bin/env python3
"""Sends exactly N requests (bodies from gen_route_bench.py's bodies.txt, in
turn, each with a unique request_id) over C keep-alive connections used
round-robin, and fails on any status but 200. A fixed count, where wrk runs
for a time, so that bench/http_callgrind.sh can divide instructions by it.

usage: http_client.py PORT PATH BODIES N [connections] [method]
(method GET sends no body: /metrics, /workers)
"""
import http.client
import sys


def main():
    port, path, bodies_file, n = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
    conns = int(sys.argv[5]) if len(sys.argv) > 5 else 2
    method = sys.argv[6] if len(sys.argv) > 6 else "POST"
    bodies = [line.rstrip("\n") for line in open(bodies_file) if line.strip()]
    cs = [http.client.HTTPConnection("127.0.0.1", port, timeout=600) for _ in range(conns)]
    for i in range(n):
        c = cs[i % conns]
        if method == "GET":
            c.request("GET", path)
        else:
            body = bodies[i % len(bodies)].replace("%s", "c%d" % i)
            c.request(method, path, body, {"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        if r.status != 200:
            sys.exit("request %d: status %d: %s" % (i, r.status, data[:200]))
    for c in cs:
        c.close()


if __name__ == "__main__":
    main()
