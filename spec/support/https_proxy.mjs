// An HTTPS proxy for spec/integration/proxy_spec.lua, on 127.0.0.1 only: TLS with the given
// certificate, then HTTP CONNECT tunnels to 127.0.0.1 (any other host is refused with 403).
//   node spec/support/https_proxy.mjs CERT KEY
// Prints `listening <port>` once it accepts connections, and one line `CONNECT host:port` on
// stderr per tunnel it opens (its log). Ends once its parent is gone.
import https from 'node:https';
import net from 'node:net';
import fs from 'node:fs';

const [cert, key] = process.argv.slice(2);
const server = https.createServer({ cert: fs.readFileSync(cert), key: fs.readFileSync(key) });

server.on('connect', (req, client, head) => {
  const at = req.url.lastIndexOf(':');
  const host = req.url.slice(0, at);
  const port = Number(req.url.slice(at + 1));
  if (host !== '127.0.0.1' || !(port > 0 && port < 65536)) {
    client.end('HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n');
    return;
  }
  process.stderr.write(`CONNECT ${req.url}\n`);
  const upstream = net.connect(port, host, () => {
    client.write('HTTP/1.1 200 Connection established\r\n\r\n');
    if (head.length > 0) upstream.write(head);
    upstream.pipe(client);
    client.pipe(upstream);
  });
  upstream.on('error', () => client.destroy());
  client.on('error', () => upstream.destroy());
});

server.listen(0, '127.0.0.1', () => console.log(`listening ${server.address().port}`));

const parent = process.ppid;
setInterval(() => {
  if (process.ppid !== parent) process.exit(0);
}, 500).unref();
