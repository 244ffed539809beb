// An HTTP/2 client for the inspection tests (Node's http2 module): through
// the proxy's CONNECT (HTTPS_PROXY or https_proxy: http://HOST:PORT), TLS
// with ALPN h2 only (the system CAs plus NODE_EXTRA_CA_CERTS, or the file
// H2_CA), then every PATH as its own stream on one session, all at once.
// Prints one line per stream: "PATH STATUS X-TETHER-REASON TRAILERS
// BODY-LENGTH" ('-' for none), or "PATH error CODE rst=RST_STREAM-CODE"
// for a stream that was reset; then "alpn PROTOCOL". Exit status 0 when the session came up.
//
//   node h2_client.js HOST:PORT [-H 'name: value']... [--expect-continue BODY] PATH...
//
// --expect-continue BODY: each stream asks `expect: 100-continue` and
// sends BODY only once the 100 Continue has come (no timer of its own:
// without it the stream waits for the 30 s timeout).
'use strict';
const fs = require('fs');
const http = require('http');
const http2 = require('http2');
const net = require('net');
const tls = require('tls');

const args = process.argv.slice(2);
const target = args.shift();
const headers = {};
const paths = [];
let body = null;
while (args.length) {
	const a = args.shift();
	if (a === '--expect-continue') {
		body = args.shift();
		headers.expect = '100-continue';
		headers[':method'] = 'POST';
	} else if (a === '-H') {
		const h = args.shift();
		const i = h.indexOf(':');
		headers[h.slice(0, i).trim().toLowerCase()] = h.slice(i + 1).trim();
	} else {
		paths.push(a);
	}
}
const [host, port] = target.split(':');
const proxy = new URL(process.env.HTTPS_PROXY || process.env.https_proxy);
const ca = process.env.H2_CA ? [...tls.rootCertificates, fs.readFileSync(process.env.H2_CA)] : undefined;
const timer = setTimeout(() => {
	console.log('timeout');
	process.exit(2);
}, 30000);

const req = http.request({ host: proxy.hostname, port: proxy.port, method: 'CONNECT', path: target });
req.on('error', (e) => {
	console.log(`proxy error ${e.code}`);
	process.exit(1);
});
req.on('connect', (res, socket) => {
	if (res.statusCode !== 200) {
		console.log(`connect ${res.statusCode}`);
		process.exit(1);
	}
	const session = http2.connect(`https://${target}`, {
		createConnection: () => tls.connect({ socket, host, servername: net.isIP(host) ? undefined : host, ca, ALPNProtocols: ['h2'] }),
	});
	session.on('error', (e) => {
		console.log(`session error ${e.code}`);
		process.exit(1);
	});
	let left = paths.length;
	for (const path of paths) {
		const s = session.request({ ':path': path, ...headers });
		let status = '-', reason = '-', trailers = '-', len = 0, failed = null;
		s.on('response', (h) => {
			status = h[':status'];
			reason = h['x-tether-reason'] || '-';
		});
		s.on('trailers', (t) => {
			trailers = Object.entries(t).map(([k, v]) => `${k}=${v}`).join(',');
		});
		s.on('data', (d) => (len += d.length));
		s.on('error', (e) => (failed = e.code));
		s.on('close', () => {
			if (failed || (status === '-' && s.rstCode))
				console.log(`${path} error ${failed || '-'} rst=${s.rstCode}`);
			else
				console.log(`${path} ${status} ${reason} ${trailers} ${len}`);
			if (--left === 0) {
				console.log(`alpn ${session.alpnProtocol}`);
				clearTimeout(timer);
				session.close();
			}
		});
		if (body === null)
			s.end();
		else
			s.on('continue', () => s.end(body));
	}
});
req.end();
