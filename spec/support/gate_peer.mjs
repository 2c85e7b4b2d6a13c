// A minimal MCP server for spec/integration/gate_names_spec.lua: it listens on
// every loopback address given on the command line (one port for all of them),
// prints "listening <port>", and answers initialize and ping. It records which
// local address each request reached and whether it carried a credential;
// GET /_hits returns that record (and is not recorded itself). Runs until killed.
import http from 'node:http';

const addresses = process.argv.slice(2);
const hits = [];

function answer(req, res, body) {
  if (req.url === '/_hits') {
    res.writeHead(200, { 'Content-Type': 'application/json' });
    return res.end(JSON.stringify(hits));
  }
  let message = {};
  try { message = JSON.parse(body || '{}'); } catch { message = {}; }
  hits.push({ address: req.socket.localAddress, host: req.headers.host || '',
              authorization: req.headers.authorization || '', method: message.method || req.method });
  if (message.id === undefined) { res.writeHead(202); return res.end(); }
  let reply;
  if (message.method === 'initialize') {
    reply = { protocolVersion: '2025-11-25', capabilities: {}, serverInfo: { name: 'gate-peer', version: '1' } };
  } else if (message.method === 'ping') {
    reply = {};
  }
  res.writeHead(200, { 'Content-Type': 'application/json' });
  res.end(JSON.stringify(reply === undefined
    ? { jsonrpc: '2.0', id: message.id, error: { code: -32601, message: 'Method not found' } }
    : { jsonrpc: '2.0', id: message.id, result: reply }));
}

function serve(address, port) {
  return new Promise((resolve, reject) => {
    const server = http.createServer((req, res) => {
      const chunks = [];
      req.on('data', (c) => chunks.push(c));
      req.on('end', () => answer(req, res, Buffer.concat(chunks).toString('utf8')));
    });
    server.once('error', reject);
    server.listen(port, address, () => resolve(server.address().port));
  });
}

const port = await serve(addresses[0], 0);
for (const address of addresses.slice(1)) await serve(address, port);
console.log(`listening ${port}`);
