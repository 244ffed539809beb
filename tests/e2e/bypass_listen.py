#!/usr/bin/env python3
"""Listeners a workload must not reach (bypass_fenced in topology.sh):
TCP PORT and a UDP echo on PORT+1, each on 0.0.0.0 and :: (v6-only), for at
most 60 s. Every accepted connection and datagram is logged to LOG as
"tcp|udp PEER"; READY is created once all are bound."""
import select, socket, sys, time

port, log, ready = int(sys.argv[1]), sys.argv[2], sys.argv[3]
socks = []
for fam, any_ in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
        try:
            s = socket.socket(fam, kind)
        except OSError:
            continue
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if fam == socket.AF_INET6:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        try:
            s.bind((any_, port if kind == socket.SOCK_STREAM else port + 1))
        except OSError:
            continue  # no IPv6 here
        if kind == socket.SOCK_STREAM:
            s.listen(16)
        socks.append(s)
open(ready, "w").close()
end = time.monotonic() + 60
while time.monotonic() < end:
    r, _, _ = select.select(socks, [], [], 1)
    for s in r:
        if s.type == socket.SOCK_STREAM:
            c, peer = s.accept()
            c.close()
            open(log, "a").write(f"tcp {peer[0]}\n")
        else:
            d, peer = s.recvfrom(100)
            s.sendto(d, peer)
            open(log, "a").write(f"udp {peer[0]}\n")
