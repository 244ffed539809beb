// A TLS test server that speaks HTTP/2 and HTTP/1.1 (ALPN, Node's http2
// module with allowHTTP1) for the inspection tests: every request is
// answered 200 with a JSON body {"proto", "method", "path", "body",
// "headers": {name: value}} of what arrived, and every request line is
// appended to LOG ("PROTO METHOD PATH PORT") with every header as
// "HDR PATH NAME: VALUE". Special paths (HTTP/2 only):
//   /rst/...       the stream is reset with REFUSED_STREAM, no answer
//   /trailers/...  the answer ends with the trailer "x-checksum: ok"
//
//   node h2_echo.js LOG ADDR PORT:CERT:KEY [PORT:CERT:KEY ...]
//
// Writes "ready" to LOG when every listener is bound.
'use strict';
const fs = require('fs');
const http2 = require('http2');

const [logPath, addr, ...specs] = process.argv.slice(2);
const note = (line) => fs.appendFileSync(logPath, line + '\n');

function handler(port) {
	return (req, res) => {
		const chunks = [];
		req.on('data', (c) => chunks.push(c));
		req.on('end', () => {
			note(`${req.httpVersion} ${req.method} ${req.url} ${port}`);
			for (const [k, v] of Object.entries(req.headers))
				if (!k.startsWith(':'))
					note(`HDR ${req.url} ${k}: ${v}`);
			if (req.httpVersion === '2.0' && req.url.startsWith('/rst/')) {
				req.stream.close(http2.constants.NGHTTP2_REFUSED_STREAM);
				return;
			}
			const headers = {};
			for (const [k, v] of Object.entries(req.headers))
				if (!k.startsWith(':'))
					headers[k] = v;
			const out = JSON.stringify({
				proto: req.httpVersion,
				method: req.method,
				path: req.url,
				body: Buffer.concat(chunks).toString('latin1'),
				headers,
			});
			const trailers = req.httpVersion === '2.0' && req.url.startsWith('/trailers/');
			const h = { 'content-type': 'application/json' };
			if (trailers)
				h.trailer = 'x-checksum';
			else
				h['content-length'] = Buffer.byteLength(out);
			res.writeHead(200, h);
			if (trailers)
				res.addTrailers({ 'x-checksum': 'ok' });
			res.end(out);
		});
	};
}

let pending = specs.length;
for (const spec of specs) {
	const [port, cert, key] = spec.split(':');
	const srv = http2.createSecureServer(
		{ cert: fs.readFileSync(cert), key: fs.readFileSync(key), allowHTTP1: true },
		handler(port),
	);
	srv.listen(Number(port), addr, () => {
		if (--pending === 0)
			note('ready');
	});
}
