#!/usr/bin/env python3
"""The other end of the HTTP benchmark's fixture (http_fixture.sh): serves
DIR (the /dump that gen_route_bench.py wrote) on PORT, and holds N listening
TCP ports on 127.0.0.1 standing in for the workers' engines: it accepts the
router's ZeroMQ connections and never answers (silent engines). The ports are
bound here, so no other process on a shared machine publishes into the
benchmark. Writes the serve config DIR/config.json once the ports are
bound: workers 1..N of model "m", block size 16, with kv_events "on" (their
caches are the dump's; "auto" would score a worker that never published as
approximate, from what was routed to it). PORT 0: a free port, written to
DIR/peer_port once bound.

usage: fixture_peer.py DIR PORT N
"""
import functools
import http.server
import json
import os
import selectors
import socket
import sys
import threading


def hold(listeners):
    sel = selectors.DefaultSelector()
    for s in listeners:
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
    held = []
    while True:
        for key, _ in sel.select():
            try:
                conn, _ = key.fileobj.accept()
                held.append(conn)  # open, silent
            except OSError:
                pass


def main():
    d, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    listeners = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        listeners.append(s)
    workers = [{"instance_id": i + 1, "endpoint": "tcp://127.0.0.1:%d" % s.getsockname()[1],
                "model_name": "m", "block_size": 16, "kv_events": "on"}
               for i, s in enumerate(listeners)]
    tmp = os.path.join(d, "config.tmp")
    with open(tmp, "w") as f:
        json.dump({"workers": workers}, f)
    os.rename(tmp, os.path.join(d, "config.json"))
    threading.Thread(target=hold, args=(listeners,), daemon=True).start()
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass
    handler = functools.partial(Quiet, directory=d)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    tmp = os.path.join(d, "peer_port.tmp")
    with open(tmp, "w") as f:
        f.write("%d\n" % server.server_address[1])
    os.rename(tmp, os.path.join(d, "peer_port"))
    server.serve_forever()


if __name__ == "__main__":
    main()
