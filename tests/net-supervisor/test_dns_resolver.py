#!/usr/bin/env python3
"""The net-supervisor's resolver (--dns-listen) on loopback, with the static
(test) identity strategy and tests/e2e/dns_responder.py as the upstream.

Asserts, each against the answer and the "dns" audit line:
  - A and AAAA forwarded; a blocked-range address (127.0.0.2) removed, the
    rest kept; records off the question's CNAME chain dropped;
  - an upstream answer with the wrong id is ignored (the right one wins);
  - a silent upstream: SERVFAIL after --dns-timeout-ms, dns_upstream_failed;
    a truncated upstream answer: asked again over TCP, answered whole;
  - a malformed query: FORMERR, header only, dns_malformed; a compression
    loop in the question: FORMERR; an answer-shaped datagram: no reply;
  - a name no rule of the binary names: NXDOMAIN, dns_no_rule, never
    asked upstream; TXT: REFUSED dns_type_refused; HTTPS: NOERROR empty;
  - over UDP an answer larger than 512 bytes has TC and no records; over
    TCP (two pipelined queries on one connection) it comes whole;
  - --dns-max-outstanding 3: of 8 queries at once to a silent name, 3 are
    taken (audited), the rest dropped and a warning logged once;
  - not ready (no policy): REFUSED not_ready; audit mode: a name no rule
    names is forwarded, audited allow with mode audit and dns_no_rule.
"""
import json
import os
import signal
import random
import socket
import struct
import subprocess
import sys
import tempfile
import time

BIN = os.environ["TETHER_BIN"]
SRC = os.environ["TETHER_SRC"]
NETSUP = os.path.join(BIN, "net-supervisor-testing")  # --identity static
work = tempfile.mkdtemp(prefix="tether-dns-")
procs = []


def free_port(kind=socket.SOCK_DGRAM):
    """A port free for both UDP and TCP on 127.0.0.1, picked below the
    ephemeral range (32768+) so that no outgoing connect of a busy machine
    takes it between this check and the daemon's bind."""
    for _ in range(200):
        p = random.randint(20000, 32000)
        held = []
        try:
            for k in (socket.SOCK_DGRAM, socket.SOCK_STREAM):
                s = socket.socket(socket.AF_INET, k)
                held.append(s)
                s.bind(("127.0.0.1", p))
            return p
        except OSError:
            continue
        finally:
            for s in held:
                s.close()
    fail("no free port")


def wait_for(pred, secs=10):
    end = time.monotonic() + secs
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.05)
    return False


def fail(msg):
    print("FAIL:", msg)
    for f in ("netsup.err", "audit.jsonl"):
        p = os.path.join(work, f)
        if os.path.exists(p):
            print("---", f)
            print(open(p).read()[-3000:])
    sys.exit(1)


def name_wire(n):
    return b"".join(bytes([len(p)]) + p.encode() for p in n.split(".") if p) + b"\0"


def query(n, qtype=1, qid=0x1234, edns=False):
    q = struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 1 if edns else 0) + name_wire(n) + struct.pack("!HH", qtype, 1)
    if edns:
        q += b"\0" + struct.pack("!HHIH", 41, 4096, 0, 0)
    return q


def parse(d):
    qid, flags, qd, an, ns, ar = struct.unpack("!HHHHHH", d[:12])
    off = 12
    for _ in range(qd):
        while d[off]:
            off += 1 + d[off]
        off += 5
    addrs = []
    for _ in range(an):
        if d[off] & 0xC0:
            off += 2
        else:
            while d[off]:
                off += 1 + d[off]
            off += 1
        typ, _cls, _ttl, rdlen = struct.unpack("!HHIH", d[off:off + 10])
        off += 10
        if typ == 1:
            addrs.append(socket.inet_ntop(socket.AF_INET, d[off:off + 4]))
        elif typ == 28:
            addrs.append(socket.inet_ntop(socket.AF_INET6, d[off:off + 16]))
        off += rdlen
    return {"id": qid, "rcode": flags & 15, "tc": bool(flags & 0x200), "an": an, "addrs": addrs, "len": len(d)}


def ask(port, payload, timeout=3):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(timeout)
    s.connect(("127.0.0.1", port))
    s.send(payload)
    try:
        return parse(s.recv(65535))
    except socket.timeout:
        return None
    finally:
        s.close()


def audit():
    out = []
    p = os.path.join(work, "audit.jsonl")
    if os.path.exists(p):
        for line in open(p):
            e = json.loads(line)
            if e.get("event") == "dns":
                out.append(e)
    return out


def dns_line(name, qtype):
    for e in audit():
        q = e.get("query") or {}
        if q.get("name") == name and q.get("type") == qtype:
            return e
    return None


def start_upstream():
    port = free_port()
    log = os.path.join(work, "up.log")
    specs = ["name.test=A:203.0.113.7", "name.test=AAAA:2001:db8::7",
             "mixed.test=A:127.0.0.2", "mixed.test=A:203.0.113.8",
             "chain.test=CNAME:name.test", "chain.test=EXTRA:evil.test/203.0.113.66",
             "wrongid.test=WRONGID:", "wrongid.test=A:203.0.113.9",
             "silent.test=SILENT:", "tc.test=TC:", "tc.test=A:203.0.113.10",
             "open.test=A:203.0.113.11"]
    specs += ["big.test=A:198.51.100.%d" % i for i in range(1, 41)]
    p = subprocess.Popen([sys.executable, os.path.join(SRC, "tests/e2e/dns_responder.py"), "127.0.0.1", str(port), log] + specs)
    procs.append(p)
    if not wait_for(lambda: os.path.exists(log + ".ready")):
        fail("upstream responder did not start")
    return port, log


def start_netsup(upport, policy, extra=()):
    errpath = os.path.join(work, "netsup.err")
    for _attempt in range(5):
        port = free_port()
        tport = free_port(socket.SOCK_STREAM)
        base = os.path.getsize(errpath) if os.path.exists(errpath) else 0
        err = open(errpath, "a")
        args = [NETSUP, "--listen", "127.0.0.1:%d" % tport, "--dns-listen", "127.0.0.1:%d" % port,
                "--dns-upstream", "127.0.0.1:%d" % upport, "--dns-timeout-ms", "400",
                "--identity", "static", "--identity-static", "/usr/bin/curl",
                "--audit", os.path.join(work, "audit.jsonl")] + list(extra)
        if policy:
            args += ["--policy", policy]
        p = subprocess.Popen(args, stderr=err)
        procs.append(p)

        def started_or_gone():
            return "dns resolver listening" in open(errpath).read()[base:] or p.poll() is not None
        if not wait_for(started_or_gone, 30):
            fail("net-supervisor did not start its resolver")
        text = open(errpath).read()[base:]
        if "dns resolver listening" in text:
            return p, port
        if "address already in use" not in text:
            fail("net-supervisor exited before its resolver listened")
        # another process took the port between the check and the bind: pick again
    fail("net-supervisor did not start its resolver: every port was taken")


def stop(p):
    p.send_signal(signal.SIGTERM)
    p.wait(10)


def write_policy(mode="enforce"):
    path = os.path.join(work, "p-%s.yaml" % mode)
    with open(path, "w") as f:
        f.write("version: 1\nnetwork:\n  mode: %s\n  policies:\n    - name: t\n      binaries:\n"
                "        - path: /usr/bin/curl\n      endpoints:\n" % mode)
        for h in ("name.test", "mixed.test", "chain.test", "wrongid.test", "silent.test", "tc.test", "big.test"):
            f.write("        - host: %s\n          ports: [443]\n" % h)
    return path


def main():
    upport, uplog = start_upstream()
    ns, port = start_netsup(upport, write_policy())

    r = ask(port, query("name.test", 1))
    if not r or r["rcode"] != 0 or r["addrs"] != ["203.0.113.7"] or r["id"] != 0x1234:
        fail("name.test A: %r" % r)
    r = ask(port, query("name.test", 28))
    if not r or r["addrs"] != ["2001:db8::7"]:
        fail("name.test AAAA: %r" % r)
    r = ask(port, query("mixed.test", 1))
    if not r or r["addrs"] != ["203.0.113.8"]:
        fail("mixed.test: blocked address not removed: %r" % r)
    e = dns_line("mixed.test", "A")
    if not e or e.get("removed_blocked") != ["127.0.0.2"] or e["decision"] != "allow":
        fail("mixed.test audit: %r" % e)
    r = ask(port, query("chain.test", 1))
    if not r or r["addrs"] != ["203.0.113.7"] or r["an"] != 2:
        fail("chain.test: off-chain record not dropped: %r" % r)
    r = ask(port, query("wrongid.test", 1))
    if not r or r["addrs"] != ["203.0.113.9"]:
        fail("wrongid.test: %r" % r)
    t0 = time.monotonic()
    r = ask(port, query("silent.test", 1))
    if not r or r["rcode"] != 2 or time.monotonic() - t0 > 2:
        fail("silent.test: want SERVFAIL after the timeout: %r" % r)
    if (dns_line("silent.test", "A") or {}).get("reason") != "dns_upstream_failed":
        fail("silent.test not audited dns_upstream_failed")
    r = ask(port, query("tc.test", 1))
    if not r or r["rcode"] != 0 or r["addrs"] != ["203.0.113.10"]:
        fail("tc.test: a truncated upstream answer was not asked again over TCP: %r" % r)
    if " tc.test 1 tcp" not in open(uplog).read():
        fail("tc.test: the upstream saw no TCP query")
    r = ask(port, query("other.test", 1))
    if not r or r["rcode"] != 3:
        fail("other.test: want NXDOMAIN: %r" % r)
    e = dns_line("other.test", "A")
    if not e or e["reason"] != "dns_no_rule" or e["decision"] != "deny" or (e.get("binary") or {}).get("path") != "/usr/bin/curl":
        fail("other.test audit: %r" % e)
    if " other.test " in open(uplog).read():
        fail("a name no rule allows was asked upstream")
    r = ask(port, query("name.test", 16))
    if not r or r["rcode"] != 5 or (dns_line("name.test", "TXT") or {}).get("reason") != "dns_type_refused":
        fail("TXT: want REFUSED dns_type_refused: %r" % r)
    r = ask(port, query("name.test", 65))
    if not r or r["rcode"] != 0 or r["an"] != 0:
        fail("HTTPS: want NOERROR empty: %r" % r)
    # malformed: trailing garbage, and a compression loop in the question
    r = ask(port, query("name.test", 1, qid=0x4444) + b"xx")
    if not r or r["rcode"] != 1 or r["len"] != 12 or r["id"] != 0x4444:
        fail("malformed: want FORMERR, header only: %r" % r)
    if not any(e["reason"] == "dns_malformed" for e in audit()):
        fail("malformed query not audited dns_malformed")
    r = ask(port, struct.pack("!HHHHHH", 0x4545, 0x100, 1, 0, 0, 0) + b"\xc0\x0c" + struct.pack("!HH", 1, 1))
    if not r or r["rcode"] != 1:
        fail("compression loop: want FORMERR: %r" % r)
    if ask(port, struct.pack("!HHHHHH", 1, 0x8180, 1, 0, 0, 0) + name_wire("x.test") + struct.pack("!HH", 1, 1), timeout=0.5) is not None:
        fail("an answer-shaped datagram was answered")
    # big answers: TC over UDP (512), whole over TCP, two pipelined queries
    r = ask(port, query("big.test", 1))
    if not r or not r["tc"] or r["an"] != 0 or r["len"] > 512:
        fail("big.test over UDP: want TC and no records: %r" % r)
    r = ask(port, query("big.test", 1, edns=True))
    if not r or r["tc"] or r["an"] != 40:
        fail("big.test over UDP with EDNS 4096 (we give 1232): %r" % r)
    s = socket.create_connection(("127.0.0.1", port), timeout=3)
    q1, q2 = query("big.test", 1, qid=1), query("name.test", 1, qid=2)
    s.sendall(struct.pack("!H", len(q1)) + q1 + struct.pack("!H", len(q2)) + q2)
    got = []
    buf = b""
    while len(got) < 2:
        d = s.recv(65535)
        if not d:
            break
        buf += d
        while len(buf) >= 2 and len(buf) >= 2 + struct.unpack("!H", buf[:2])[0]:
            n = struct.unpack("!H", buf[:2])[0]
            got.append(parse(buf[2:2 + n]))
            buf = buf[2 + n:]
    s.close()
    if len(got) != 2 or got[0]["an"] != 40 or got[0]["tc"] or got[1]["addrs"] != ["203.0.113.7"]:
        fail("TCP pipelined answers: %r" % got)
    if not any((e.get("client") or {}).get("transport") == "tcp" for e in audit()):
        fail("no tcp transport in the audit")
    stop(ns)

    # bounded: 3 in flight
    before = len([e for e in audit() if (e.get("query") or {}).get("name") == "silent.test"])
    ns, port = start_netsup(upport, write_policy(), ["--dns-max-outstanding", "3", "--dns-timeout-ms", "1000"])
    socks = []
    for i in range(8):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(3)
        s.connect(("127.0.0.1", port))
        s.send(query("silent.test", 1, qid=100 + i))
        socks.append(s)
    answered = 0
    deadline = time.monotonic() + 2.5  # the 3 taken are answered SERVFAIL after 1 s
    for s in socks:
        s.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            s.recv(512)
            answered += 1
        except socket.timeout:
            pass
        s.close()
    after = len([e for e in audit() if (e.get("query") or {}).get("name") == "silent.test"])
    if answered != 3 or after - before != 3:
        fail("max-outstanding 3: %d answered, %d audited" % (answered, after - before))
    if open(os.path.join(work, "netsup.err")).read().count("queries in flight, dropping") != 1:
        fail("the busy warning was not logged exactly once")
    stop(ns)

    # not ready: no policy
    ns, port = start_netsup(upport, None)
    r = ask(port, query("name.test", 1, qid=0x7777))
    if not r or r["rcode"] != 5 or r["id"] != 0x7777:
        fail("not ready: want REFUSED: %r" % r)
    if audit()[-1]["reason"] != "not_ready":
        fail("not ready: audit says %r" % audit()[-1])
    stop(ns)

    # audit mode: forwarded, logged as a would-be dns_no_rule
    ns, port = start_netsup(upport, write_policy("audit"))
    r = ask(port, query("open.test", 1))
    if not r or r["addrs"] != ["203.0.113.11"]:
        fail("audit mode: open.test not forwarded: %r" % r)
    e = dns_line("open.test", "A")
    if not e or e["decision"] != "allow" or e.get("mode") != "audit" or e["reason"] != "dns_no_rule":
        fail("audit mode line: %r" % e)
    stop(ns)
    print("PASS")


try:
    main()
finally:
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    subprocess.run(["rm", "-rf", work])
