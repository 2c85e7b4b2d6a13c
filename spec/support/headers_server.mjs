// A minimal 2025-era MCP server over HTTP on 127.0.0.1 for spec/integration/headers_spec.lua:
// it prints its port on the first line of stdout, then one line per HTTP request it gets:
//   <HTTP method> <JSON-RPC method or -> x-tenant=<value or -> x-trace=<value or -> auth=<yes|no>
// It opens a session on initialize (Mcp-Session-Id: s1), declares logging, answers tools/list
// with one tool and logging/setLevel with {}, holds a GET stream open (one comment, then quiet)
// until the client closes it, and answers DELETE with 200. server/discover is refused as a
// 2025 SDK refuses it (400, a JSON-RPC error). The tool `later` answers at once and, 300 ms later,
// writes notifications/tools/list_changed and a notifications/message (level "error") to the GET
// stream open then (none open: they are lost, as a server without an event store loses them); the
// tool `during` writes notifications/vendor/during to the open GET stream 150 ms into the call
// and answers at 400 ms.
// Runs until it is killed.
import http from 'node:http';

const streams = new Set();

function line(req, method) {
  const h = (name) => (req.headers[name] === undefined ? '-' : String(req.headers[name]));
  process.stdout.write(`${req.method} ${method} x-tenant=${h('x-tenant')} x-trace=${h('x-trace')} `
    + `auth=${req.headers.authorization ? 'yes' : 'no'}\n`);
}

function json(res, status, body, extra) {
  res.writeHead(status, { 'content-type': 'application/json', ...(extra || {}) });
  res.end(JSON.stringify(body));
}

const srv = http.createServer((req, res) => {
  if (req.method === 'GET') {
    line(req, '-');
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write(': open\n\n');
    streams.add(res);
    res.on('close', () => streams.delete(res));
    return;
  }
  if (req.method === 'DELETE') {
    line(req, '-');
    res.writeHead(200);
    res.end();
    return;
  }
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    let m;
    try { m = JSON.parse(Buffer.concat(chunks).toString('utf8')); } catch { m = {}; }
    line(req, m.method || 'response');
    if (m.method === 'server/discover') {
      return json(res, 400, { jsonrpc: '2.0', id: null, error: { code: -32000, message: 'Bad Request: Server not initialized' } });
    }
    if (m.id === undefined) { res.writeHead(202); return res.end(); }
    if (m.method === 'initialize') {
      return json(res, 200, { jsonrpc: '2.0', id: m.id, result: { protocolVersion: '2025-11-25',
        capabilities: { tools: {}, logging: {} }, serverInfo: { name: 'headers', version: '1' } } },
      { 'mcp-session-id': 's1' });
    }
    if (m.method === 'tools/list') {
      // a moment, so the GET stream of the same operation opens meanwhile
      return setTimeout(() => json(res, 200, { jsonrpc: '2.0', id: m.id, result: { tools: [{ name: 't',
        inputSchema: { type: 'object' } }] } }), 150);
    }
    if (m.method === 'logging/setLevel') return json(res, 200, { jsonrpc: '2.0', id: m.id, result: {} });
    if (m.method === 'tools/call' && m.params && m.params.name === 'during') {
      setTimeout(() => {
        for (const stream of streams) {
          stream.write(`event: message\ndata: ${JSON.stringify({ jsonrpc: '2.0', method: 'notifications/vendor/during' })}\n\n`);
        }
      }, 150);
      return setTimeout(() => json(res, 200, { jsonrpc: '2.0', id: m.id,
        result: { content: [{ type: 'text', text: 'during' }] } }), 400);
    }
    if (m.method === 'tools/call' && m.params && m.params.name === 'later') {
      setTimeout(() => {
        for (const stream of streams) {
          for (const n of [{ method: 'notifications/tools/list_changed' },
            { method: 'notifications/message', params: { level: 'error', data: 'late' } }]) {
            stream.write(`event: message\ndata: ${JSON.stringify({ jsonrpc: '2.0', ...n })}\n\n`);
          }
        }
      }, 300);
      return json(res, 200, { jsonrpc: '2.0', id: m.id, result: { content: [{ type: 'text', text: 'later' }] } });
    }
    return json(res, 200, { jsonrpc: '2.0', id: m.id, error: { code: -32601, message: 'Method not found' } });
  });
});
srv.listen(0, '127.0.0.1', () => process.stdout.write(`${srv.address().port}\n`));
