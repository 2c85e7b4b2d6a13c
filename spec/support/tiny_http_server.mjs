// A tiny HTTP server for spec/unit/http_leg_spec.lua, on 127.0.0.1 only.
// Prints "<port> <closed port> <tls port>" on its first line: the port it
// listens on, a port that was bound and released again (nothing listens
// there) for the connection-refused case, and, when started with
// "<cert.pem> <key.pem>", an HTTPS port serving the same routes with that
// certificate (0 otherwise). The HTTPS side asks for a client certificate and
// /whoami names it. Runs until it is killed.
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';

const SECRET = 'X-Api-Key: s3cret-value';
let connections = 0;
const hanging = new Set();

function routes(req, res, body) {
  const url = new URL(req.url, 'http://127.0.0.1');
  const conn = String(req.socket.connectionId);
  res.setHeader('X-Conn-Id', conn);
  switch (url.pathname) {
    case '/whoami': {
      const peer = req.socket.getPeerCertificate ? req.socket.getPeerCertificate() : null;
      res.writeHead(200, { 'Content-Type': 'text/plain' });
      return res.end(peer && peer.subject ? `cn=${peer.subject.CN}` : 'anonymous');
    }
    case '/json':
      res.writeHead(200, { 'Content-Type': 'application/json', 'X-Custom-Header': 'Value' });
      return res.end(JSON.stringify({ ok: true, method: req.method }));
    case '/inspect': {
      // What arrived, as "key=value" lines (header names are lower-case in node).
      const lines = [`method=${req.method}`, `bodylen=${body.length}`];
      for (let i = 0; i < req.rawHeaders.length; i += 2)
        lines.push(`h:${req.rawHeaders[i].toLowerCase()}=${req.rawHeaders[i + 1]}`);
      res.writeHead(200, { 'Content-Type': 'text/plain' });
      return res.end(lines.join('\n') + '\n');
    }
    case '/echo':
      res.writeHead(200, { 'Content-Type': 'application/octet-stream' });
      return res.end(body);
    case '/secret': {
      // The check happens here; the credential is never sent back.
      const [name, value] = SECRET.split(': ');
      const ok = req.headers[name.toLowerCase()] === value;
      res.writeHead(ok ? 200 : 401, { 'Content-Type': 'text/plain' });
      return res.end(ok ? 'authorised' : 'refused');
    }
    case '/redirect':
      res.writeHead(302, { Location: '/json', 'Content-Type': 'text/plain' });
      return res.end('moved');
    case '/big': {
      const n = Number(url.searchParams.get('n') || 3 * 1024 * 1024);
      const buf = Buffer.alloc(n, 'x');
      const headers = { 'Content-Type': 'application/json' };
      if (url.searchParams.get('chunked') !== '1') headers['Content-Length'] = String(n);
      res.writeHead(200, headers);
      return res.end(buf);
    }
    case '/dup':
      res.setHeader('X-Dup', ['first', 'second']);
      res.setHeader('MCP-Session-ID', ['old', '  sid-2  ']);
      res.writeHead(200, { 'Content-Type': 'text/plain', 'X-Padded': '  padded value  ' });
      return res.end('ok');
    case '/early':
      res.writeEarlyHints({ link: '</style.css>; rel=preload' });
      res.writeHead(200, { 'Content-Type': 'text/plain', 'X-Final': 'yes' });
      return res.end('final');
    case '/slow':
      return setTimeout(() => {
        res.writeHead(200, { 'Content-Type': 'text/plain' });
        res.end('slow');
      }, Number(url.searchParams.get('ms') || 80));
    case '/sse': {
      // Never ends: an event every 10 ms until the client goes away.
      res.writeHead(200, { 'Content-Type': ' Text/Event-Stream ; charset=utf-8', 'Cache-Control': 'no-cache' });
      let n = 0;
      const timer = setInterval(() => res.write(`id: ${++n}\ndata: {"n":${n}}\n\n`), 10);
      res.on('close', () => clearInterval(timer));
      return;
    }
    case '/sse-once':
      // One 11-byte event, then silence on an open stream.
      res.writeHead(200, { 'Content-Type': 'text/event-stream' });
      res.write('data: one\n\n');
      hanging.add(res);
      res.on('close', () => hanging.delete(res));
      return;
    case '/sse-finite': {
      res.writeHead(200, { 'Content-Type': 'text/event-stream' });
      let n = 0;
      const timer = setInterval(() => {
        res.write(`data: {"n":${++n}}\n\n`);
        if (n === 3) {
          clearInterval(timer);
          res.end('data: last\n\n');
        }
      }, 15);
      return;
    }
    case '/close-idle':
      // Answered on a kept-alive connection, which the server closes 100 ms later.
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.end('{}');
      return setTimeout(() => req.socket.destroy(), 100);
    case '/reset':
      res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Length': '1000' });
      res.write('{"partial":');
      return setTimeout(() => req.socket.destroy(), 20);
    case '/hang':
      // Never answers; the socket is closed only when the client leaves.
      hanging.add(res);
      res.on('close', () => hanging.delete(res));
      return;
    default:
      res.writeHead(404, { 'Content-Type': 'text/plain' });
      return res.end('not found');
  }
}

function handler(req, res) {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => routes(req, res, Buffer.concat(chunks)));
}

function counted(srv) {
  srv.keepAliveTimeout = 30000;
  srv.on('connection', (socket) => {
    socket.connectionId = ++connections;
  });
  srv.on('secureConnection', (socket) => {
    socket.connectionId = ++connections;
  });
  return srv;
}

function listen(srv) {
  return new Promise((resolve) => srv.listen(0, '127.0.0.1', () => resolve(srv.address().port)));
}

const server = counted(http.createServer(handler));
const [certFile, keyFile] = process.argv.slice(2);
const tls = certFile
  ? counted(https.createServer({
    cert: fs.readFileSync(certFile), key: fs.readFileSync(keyFile),
    ca: fs.readFileSync(certFile), requestCert: true, rejectUnauthorized: false,
  }, handler))
  : null;

const spare = http.createServer();
const closed = await listen(spare);
await new Promise((resolve) => spare.close(resolve));
const port = await listen(server);
const tlsPort = tls ? await listen(tls) : 0;
process.stdout.write(`${port} ${closed} ${tlsPort}\n`);
