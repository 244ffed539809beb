#!/usr/bin/env python3
"""The fake internet's HTTPS services for tests/e2e/clients.sh.

    fakenet.py ROOT CERT KEY ADDR PORT [PORT...]

Serves, over TLS with CERT/KEY (signed by the test's own CA), on every PORT:
  /index.html                 ROOT/www/index.html ("hello")
  /git/NAME.git/...           git smart HTTP: `git http-backend` as a CGI over
                              ROOT/git (GIT_HTTP_EXPORT_ALL)
  /simple/NAME/, /packages/F  a pip "simple" index of ROOT/pypi/*.whl
  /npm/NAME                   an npm packument for ROOT/npm/NAME-VERSION.tgz
  /npm/NAME/-/FILE.tgz        its tarball
With FAKENET_GIT_AUTH=USER:PASSWORD in its environment, repositories under
/git/private/ answer 401 (Basic) unless the request carries exactly those
credentials (tests/e2e/tls.sh: a credential swapped in by the proxy).
Every request is logged to stdout as "PORT METHOD PATH STATUS". Standard
library only; threads, so a slow client holds nobody else up.
"""
import hashlib
import base64
import http.server
import json
import os
import socketserver
import ssl
import subprocess
import sys
import threading

ROOT, CERT, KEY, ADDR = sys.argv[1:5]
PORTS = [int(p) for p in sys.argv[5:]]


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # our own line per request instead
        pass

    def send(self, status, body, ctype="application/octet-stream", extra=None):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.note(status)

    def note(self, status):
        print(f"{self.server.server_address[1]} {self.command} {self.path} {status}", flush=True)

    def base(self):  # as the client named us: links must match the certificate it checked
        return "https://" + (self.headers.get("Host") or f"{ADDR}:{self.server.server_address[1]}")

    def do_HEAD(self):
        self.do_GET()

    def do_POST(self):
        if self.path.startswith("/git/"):
            return self.git()
        self.send(404, b"not found\n", "text/plain")

    def do_GET(self):
        p = self.path.split("?", 1)[0]
        if p in ("/", "/index.html"):
            with open(os.path.join(ROOT, "www", "index.html"), "rb") as f:
                return self.send(200, f.read(), "text/html")
        if p.startswith("/git/"):
            return self.git()
        if p.startswith("/simple/"):
            return self.simple(p[len("/simple/"):].strip("/"))
        if p.startswith("/packages/"):
            return self.file(os.path.join(ROOT, "pypi"), p[len("/packages/"):])
        if p.startswith("/npm/"):
            rest = p[len("/npm/"):]
            if "/-/" in rest:
                return self.file(os.path.join(ROOT, "npm"), rest.split("/-/", 1)[1])
            return self.packument(rest.strip("/"))
        self.send(404, b"not found\n", "text/plain")

    def file(self, d, name):
        path = os.path.join(d, os.path.basename(name))
        if not os.path.isfile(path):
            return self.send(404, b"not found\n", "text/plain")
        with open(path, "rb") as f:
            self.send(200, f.read())

    def simple(self, project):
        d = os.path.join(ROOT, "pypi")
        links = []
        for w in sorted(os.listdir(d)):
            if w.split("-", 1)[0].lower().replace("_", "-") == project.lower():
                with open(os.path.join(d, w), "rb") as f:
                    h = hashlib.sha256(f.read()).hexdigest()
                links.append(f'<a href="{self.base()}/packages/{w}#sha256={h}">{w}</a><br/>')
        if not links:
            return self.send(404, b"not found\n", "text/plain")
        body = "<!DOCTYPE html><html><body>\n" + "\n".join(links) + "\n</body></html>\n"
        self.send(200, body.encode(), "text/html")

    def packument(self, name):
        d = os.path.join(ROOT, "npm")
        versions = {}
        for t in sorted(os.listdir(d)):
            if t.startswith(name + "-") and t.endswith(".tgz"):
                v = t[len(name) + 1:-4]
                with open(os.path.join(d, t), "rb") as f:
                    data = f.read()
                versions[v] = {
                    "name": name, "version": v,
                    "dist": {
                        "tarball": f"{self.base()}/npm/{name}/-/{t}",
                        "shasum": hashlib.sha1(data).hexdigest(),
                        "integrity": "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode(),
                    },
                }
        if not versions:
            return self.send(404, b'{"error":"not found"}', "application/json")
        latest = sorted(versions)[-1]
        doc = {"name": name, "dist-tags": {"latest": latest}, "versions": versions}
        self.send(200, json.dumps(doc).encode(), "application/json")

    def git(self):
        """git http-backend as a CGI (RFC 3875): env in, headers + body out."""
        path, _, query = self.path.partition("?")
        need = os.environ.get("FAKENET_GIT_AUTH")
        if need and path.startswith("/git/private/"):
            want = "Basic " + base64.b64encode(need.encode()).decode()
            if self.headers.get("Authorization") != want:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                return self.send(401, b"auth\n", "text/plain", {"WWW-Authenticate": 'Basic realm="git"'})
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        env = {
            "PATH": "/usr/bin:/bin", "GIT_PROJECT_ROOT": os.path.join(ROOT, "git"),
            "GIT_HTTP_EXPORT_ALL": "1", "REQUEST_METHOD": self.command,
            "PATH_INFO": path[len("/git"):], "QUERY_STRING": query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)), "REMOTE_ADDR": self.client_address[0],
            "SERVER_PROTOCOL": "HTTP/1.1", "GATEWAY_INTERFACE": "CGI/1.1",
        }
        if self.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
        if self.headers.get("Git-Protocol"):
            env["GIT_PROTOCOL"] = self.headers["Git-Protocol"]
        out = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True,
                             timeout=60).stdout
        head, _, payload = out.partition(b"\r\n\r\n")
        if not _:
            head, _, payload = out.partition(b"\n\n")
        status, headers = 200, {}
        for line in head.decode("latin-1").splitlines():
            k, _, v = line.partition(":")
            if k.lower() == "status":
                status = int(v.strip().split()[0])
            elif k:
                headers[k.strip()] = v.strip()
        ctype = headers.pop("Content-Type", "application/octet-stream")
        headers.pop("Content-Length", None)
        self.send(status, payload, ctype, headers)


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(CERT, KEY)
servers = []
for port in PORTS:
    s = Server((ADDR, port), Handler)
    s.socket = ctx.wrap_socket(s.socket, server_side=True)
    servers.append(s)
    threading.Thread(target=s.serve_forever, daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
