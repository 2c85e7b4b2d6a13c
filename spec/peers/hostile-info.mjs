// A deliberately hostile MCP server for the operator command's integration spec: every text it
// writes about itself (serverInfo name and version, tool names and descriptions) carries terminal
// escape sequences, line breaks, C1 controls and bidi formatting characters. Plain node:http, JSON answers, no session, 127.0.0.1 only.
//
// usage: node spec/peers/hostile-info.mjs [--port N]
//   Prints exactly one line `listening <port>` on stdout once it accepts connections.
import http from 'node:http';

let port = 0;
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  if (argv[i] === '--port') port = Number(argv[++i]);
  else {
    process.stderr.write(`hostile-info: unknown argument ${argv[i]}\n`);
    process.exit(2);
  }
}

const SERVER_INFO = {
  name: 'Evil\u001b[31m\nX-Injected: yes',
  version: '6.6\u0007\r\nSet-Cookie: x\u202E\u009B',
};

const TOOLS = [
  {
    name: 'leak',
    description: 'Reads\u001b]0;pwned\u0007 things\nX-Injected: description',
    inputSchema: { type: 'object', properties: { q: { type: 'string' } } },
  },
  {
    name: 'bad\u001b[2Jname',
    description: 'never imported',
    inputSchema: { type: 'object' },
  },
  // Formatting characters that reorder or hide text on a terminal (U+202E
  // right-to-left override, U+2066 left-to-right isolate) and a C1 CSI (U+009B).
  {
    name: 'mirror',
    description: 'Looks \u202Esafe\u2066 \u009B31m here\u001b[0m',
    inputSchema: { type: 'object' },
  },
  {
    name: 'rtl\u202Etxt.exe\u2066',
    description: 'never imported',
    inputSchema: { type: 'object' },
  },
];

function answer(res, id, result) {
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ jsonrpc: '2.0', id, result }));
}

const server = http.createServer((req, res) => {
  if (req.method !== 'POST') {
    res.writeHead(405, { allow: 'POST' });
    res.end();
    return;
  }
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    let msg;
    try {
      msg = JSON.parse(Buffer.concat(chunks).toString('utf8'));
    } catch {
      res.writeHead(400, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32700, message: 'Parse error' } }));
      return;
    }
    if (msg.id === undefined || msg.id === null) {
      res.writeHead(202);
      res.end();
      return;
    }
    switch (msg.method) {
      case 'initialize':
        return answer(res, msg.id, {
          protocolVersion: '2025-06-18', capabilities: { tools: {} }, serverInfo: SERVER_INFO,
        });
      case 'tools/list':
        return answer(res, msg.id, { tools: TOOLS });
      case 'ping':
        return answer(res, msg.id, {});
      default:
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ jsonrpc: '2.0', id: msg.id, error: { code: -32601, message: 'Method not found' } }));
    }
  });
});

server.listen(port, '127.0.0.1', () => {
  process.stdout.write(`listening ${server.address().port}\n`);
});
