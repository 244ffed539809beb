#!/usr/bin/env python3
"""Run by the workload (bypass_fenced in topology.sh): try every address
given on the command line, TCP PORT and UDP PORT+1 (an echo), and print one
line per attempt: "tcp|udp ADDR RESULT MS", RESULT one of open, answered,
refused (a reset or an ICMP error), noroute (the kernel had no way there),
timeout (nothing came back within the wait)."""
import errno, ipaddress, itertools, json, os, socket, subprocess, sys, time
from urllib.parse import urlsplit


def every_nameable():
    """The proxy's host, every address of ours and each veth peer (the
    other host of a /30, ::1 of our /64), loopback: what a workload can
    name without knowing anything."""
    out = ["127.0.0.1", "::1"]
    host = urlsplit(os.environ.get("HTTP_PROXY", "")).hostname
    if host:
        out.append(host)
    for link in json.loads(subprocess.run(["ip", "-j", "addr"], capture_output=True, text=True).stdout or "[]"):
        for a in link.get("addr_info", []):
            if a.get("scope") != "global":
                continue
            net = ipaddress.ip_interface(f"{a['local']}/{a['prefixlen']}").network
            out.append(a["local"])
            for h in itertools.islice(net.hosts(), 2):
                out.append(str(h))
    seen = []
    for a in out:
        if a not in seen:
            seen.append(a)
    return seen


port = int(sys.argv[1])
addrs = sys.argv[2:]
protos = ("tcp", "udp")
if addrs[:1] == ["--tcp-only"]:
    protos, addrs = ("tcp",), addrs[1:]
if addrs[:1] == ["--auto"]:
    addrs = every_nameable() + addrs[1:]
for addr in addrs:
    fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
    for proto in protos:
        s = socket.socket(fam, socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM)
        s.settimeout(3)
        t = time.monotonic()
        try:
            if proto == "tcp":
                s.connect((addr, port))
                res = "open"
            else:
                s.connect((addr, port + 1))
                s.send(b"bypass")
                s.recv(64)
                res = "answered"
        except socket.timeout:
            res = "timeout"
        except OSError as e:
            res = "noroute" if e.errno in (errno.ENETUNREACH,) else "refused"
        finally:
            s.close()
        print(f"{proto} {addr} {res} {int((time.monotonic() - t) * 1000)}", flush=True)
