"""A TLS test server for the inspection tests: every request is answered
200 with a JSON body {"method", "path", "headers": {name: value}} of what
arrived (so a test sees what the proxy passed on), and every request line is
appended to LOG with every header as "HDR PATH NAME: VALUE". Several listeners, one per CERT:KEY, in one process.

    https_echo.py LOG ADDR PORT:CERT:KEY [PORT:CERT:KEY ...]

Writes "ready" to LOG when every listener is bound."""
import http.server, json, socketserver, ssl, sys, threading

log_path, addr = sys.argv[1], sys.argv[2]
lock = threading.Lock()


def note(line):
    with lock, open(log_path, "a") as f:
        f.write(line + "\n")


class Echo(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        body_in = self.rfile.read(n) if n else b""
        note("%s %s %d" % (self.command, self.path, self.server.server_address[1]))
        for k, v in self.headers.items():
            note("HDR %s %s: %s" % (self.path, k, v))
        out = json.dumps({"method": self.command, "path": self.path, "body": body_in.decode("latin-1"),
                          "headers": {k: v for k, v in self.headers.items()}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    do_GET = do_POST = do_PUT = do_DELETE = answer

    def log_message(self, *a):
        pass


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


for spec in sys.argv[3:]:
    port, cert, key = spec.split(":")
    srv = Server((addr, int(port)), Echo)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    ctx.set_alpn_protocols(["http/1.1"])
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
note("ready")
threading.Event().wait()
