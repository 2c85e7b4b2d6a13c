// The server of the resource-listing benchmark (bench/resources.lua starts it; it is not a test):
// plain node:http, no SDK, so the server costs the same for every client. It speaks the 2025 era
// statelessly with JSON answers: initialize, notifications (202), and resources/list over
// COUNT resources in pages of PAGE (cursor "p<k>" names page k), every page rendered up front.
//
//   node bench/resources_server.mjs [--port 0] [--count 10000] [--page 250]
//   Prints exactly one line `listening <port>` once it accepts connections (127.0.0.1 only).
import http from 'node:http';

const opts = { port: 0, count: 10000, page: 250 };
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i += 2) {
  const key = /^--(port|count|page)$/.exec(argv[i])?.[1];
  const value = Number(argv[i + 1]);
  if (!key || !Number.isInteger(value) || value < 0) {
    process.stderr.write(`resources_server: bad arguments near ${argv[i]}\n`);
    process.exit(2);
  }
  opts[key] = value;
}

const pages = [];
for (let first = 0, k = 0; first < opts.count; first += opts.page, k++) {
  const resources = [];
  for (let i = first; i < Math.min(first + opts.page, opts.count); i++) {
    resources.push({ uri: `file:///data/records/${String(i).padStart(6, '0')}.json`, name: `record-${i}`,
      title: `Record ${i}`, description: `One stored record, number ${i}, as JSON.`, mimeType: 'application/json',
      size: 1000 + i });
  }
  const last = first + opts.page >= opts.count;
  pages.push(JSON.stringify(last ? { resources } : { resources, nextCursor: `p${k + 1}` }));
}

const INIT = JSON.stringify({ protocolVersion: '2025-11-25', capabilities: { resources: {} },
  serverInfo: { name: 'bench-resources', version: '1.0' } });

function answer(res, id, resultText) {
  const body = `{"jsonrpc":"2.0","id":${JSON.stringify(id)},"result":${resultText}}`;
  res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

const server = http.createServer((req, res) => {
  if (req.method !== 'POST') { res.writeHead(405); res.end(); return; }
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    let msg;
    try { msg = JSON.parse(Buffer.concat(chunks).toString('utf8')); } catch { res.writeHead(400); res.end(); return; }
    if (msg.id === undefined) { res.writeHead(202); res.end(); return; }
    if (msg.method === 'initialize') return answer(res, msg.id, INIT);
    if (msg.method === 'resources/list') {
      const cursor = msg.params?.cursor;
      const k = cursor === undefined ? 0 : Number(/^p(\d+)$/.exec(cursor)?.[1] ?? -1);
      if (k < 0 || k >= pages.length) {
        const body = JSON.stringify({ jsonrpc: '2.0', id: msg.id, error: { code: -32602, message: 'bad cursor' } });
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(body);
        return;
      }
      return answer(res, msg.id, pages[k]);
    }
    const body = JSON.stringify({ jsonrpc: '2.0', id: msg.id, error: { code: -32601, message: 'Method not found' } });
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(body);
  });
});

server.listen(opts.port, '127.0.0.1', () => process.stdout.write(`listening ${server.address().port}\n`));
for (const sig of ['SIGTERM', 'SIGINT']) process.on(sig, () => { server.close(); process.exit(0); });
