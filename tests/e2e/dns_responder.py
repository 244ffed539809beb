#!/usr/bin/env python3
"""A tiny authoritative DNS responder for the tests (UDP only).

usage: dns_responder.py ADDR PORT LOGFILE [NAME=TYPE:VALUE ...]

Answers the records given (TYPE A, AAAA or CNAME; a CNAME is followed
within the table, as a recursive resolver would), NXDOMAIN for other
names, and logs one line per query: "<client> <name> <type>". Writes
"ready" to LOGFILE's sibling LOGFILE.ready once bound. TCP on the same
port answers the same (never with TC). Misbehaviour for
the resolver's tests, per name: TYPE SILENT (never answers), TC (answers
with TC set), WRONGID (first an answer with another id, then the right
one), EXTRA:OTHER/IPV4 (adds an A record for another name, off the
question's chain)."""
import socket
import struct
import sys
import threading

TYPES = {"A": 1, "AAAA": 28, "CNAME": 5}


def read_name(msg, off):
    labels = []
    while True:
        ln = msg[off]
        if ln == 0:
            return ".".join(labels), off + 1
        if ln & 0xC0:
            raise ValueError("compressed question")
        labels.append(msg[off + 1:off + 1 + ln].decode("ascii"))
        off += 1 + ln


def wire(name):
    out = b""
    for part in name.strip(".").split("."):
        if part:
            out += bytes([len(part)]) + part.encode()
    return out + b"\0"


def main():
    addr, port, log = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    table = {}
    for spec in sys.argv[4:]:
        name, rest = spec.split("=", 1)
        typ, value = rest.split(":", 1)
        table.setdefault(name.lower(), []).append((typ, value))
    fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_DGRAM)
    s.bind((addr, port))

    def answer(msg, peer, tcp):
        try:
            qid, flags, qd = struct.unpack("!HHH", msg[:6])
            qname, off = read_name(msg, 12)
            qtype, qclass = struct.unpack("!HH", msg[off:off + 4])
        except (ValueError, struct.error, UnicodeDecodeError, IndexError):
            return []
        question = msg[12:off + 4]
        with open(log, "a") as f:
            f.write("%s %s %d%s\n" % (peer[0], qname.lower(), qtype, " tcp" if tcp else ""))
        answers = []
        specials = {t: v for t, v in table.get(qname.lower(), []) if t in ("SILENT", "TC", "WRONGID", "EXTRA")}
        if "SILENT" in specials:
            return []
        name, hops = qname.lower(), 0
        found = name in table
        while name in table and hops < 8:
            nxt = None
            for typ, value in table[name]:
                if typ == "CNAME":
                    answers.append((name, 5, wire(value)))
                    nxt = value.lower()
                elif typ not in TYPES:
                    if typ == "EXTRA":
                        other, ip = value.split("/")
                        answers.append((other, 1, socket.inet_pton(socket.AF_INET, ip)))
                elif TYPES[typ] == qtype:
                    fam2 = socket.AF_INET if typ == "A" else socket.AF_INET6
                    answers.append((name, qtype, socket.inet_pton(fam2, value)))
            if not nxt:
                break
            name, hops = nxt, hops + 1
        rcode = 0 if found else 3
        tc = 0x0200 if "TC" in specials and not tcp else 0
        if tc:
            answers = answers[:1]
        out = struct.pack("!HHHHHH", qid, 0x8400 | tc | (flags & 0x0100) | 0x0080 | rcode, 1,
                          len(answers), 0, 0) + question
        for owner, typ, rdata in answers:
            out += wire(owner) + struct.pack("!HHIH", typ, 1, 60, len(rdata)) + rdata
        if "WRONGID" in specials and not tcp:
            return [struct.pack("!H", qid ^ 0x5a5a) + out[2:], out]
        return [out]

    def serve_tcp(lsock):
        while True:
            c, peer = lsock.accept()
            try:
                c.settimeout(5)
                buf = b""
                while True:
                    d = c.recv(65535)
                    if not d:
                        break
                    buf += d
                    while len(buf) >= 2 and len(buf) >= 2 + struct.unpack("!H", buf[:2])[0]:
                        n = struct.unpack("!H", buf[:2])[0]
                        for out in answer(buf[2:2 + n], peer, True):
                            c.sendall(struct.pack("!H", len(out)) + out)
                        buf = buf[2 + n:]
            except OSError:
                pass
            finally:
                c.close()

    t = socket.socket(fam, socket.SOCK_STREAM)
    t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    t.bind((addr, port))
    t.listen(16)
    threading.Thread(target=serve_tcp, args=(t,), daemon=True).start()
    with open(log + ".ready", "w") as f:
        f.write("ready\n")
    while True:
        msg, peer = s.recvfrom(4096)
        for out in answer(msg, peer, False):
            s.sendto(out, peer)


if __name__ == "__main__":
    main()
