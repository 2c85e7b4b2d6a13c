// The official TypeScript SDK's reference server (McpServer + StreamableHTTPServerTransport on
// node:http), bound to 127.0.0.1, endpoint /mcp. A peer nobody here wrote, for integration specs.
//
// usage: node spec/peers/sdk-server.mjs --mode stateless-json|session-sse|session-changing [--port N] [--log FILE]
//   --port 0 (the default) picks an ephemeral port. Prints exactly one line `listening <port>`
//   on stdout once it accepts connections.
//   stateless-json: a new server+transport per POST, no session, application/json answers;
//                   GET and DELETE get 405.
//   session-sse:    session ids (randomUUID), text/event-stream answers; unknown session → 404
//                   -32001 "Session not found"; no session on a non-initialize POST → 400;
//                   DELETE ends the session.
//   session-changing: session-sse, and a catalogue that changes while the server runs: the tool
//                   `grow` makes every session (open or later) offer the tool `grown` instead of
//                   `add`, and sends notifications/tools/list_changed twice (a burst) on its own
//                   call's event stream before it answers.
//   --log FILE:     appends one line per received JSON-RPC message, written before the SDK sees it:
//                     <http method> <jsonrpc method|response> <id|-> <mcp-session-id|-> <mcp-protocol-version|->
//                   a notifications/cancelled line ends with its params.requestId; a GET or DELETE
//                   (no body) logs `<GET|DELETE> - - <session|-> <version|->`; a body that is not
//                   JSON logs `POST unparsable - <session|-> <version|->` (answered 400 -32700).
import http from 'node:http';
import fs from 'node:fs';
import { randomUUID } from 'node:crypto';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';

function parseArgs(argv) {
  const opts = { mode: null, port: 0, log: null };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--mode') opts.mode = argv[++i];
    else if (a === '--port') opts.port = Number(argv[++i]);
    else if (a === '--log') opts.log = argv[++i];
    else throw new Error(`unknown argument ${a}`);
  }
  if (!['stateless-json', 'session-sse', 'session-changing'].includes(opts.mode)) {
    throw new Error('--mode must be stateless-json, session-sse or session-changing');
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
  process.stderr.write(`sdk-server: ${err.message}\n` +
    'usage: node sdk-server.mjs --mode stateless-json|session-sse|session-changing [--port N] [--log FILE]\n');
  process.exit(2);
}

// 1x1 transparent PNG.
const TINY_PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==';

const text = (t) => ({ type: 'text', text: t });

// session-changing: whether `grow` ran, and the servers of the sessions it changes.
let grown = false;
const live = new Set();

function newServer() {
  const server = new McpServer({ name: 'mcpclient-sdk-peer', version: '1.0.0' });
  server.registerTool('echo', {
    description: 'Returns "Echo: <message>".',
    inputSchema: { message: z.string() },
  }, async ({ message }) => ({ content: [text(`Echo: ${message}`)] }));
  const add = () => server.registerTool('add', {
    description: 'Adds two numbers.',
    inputSchema: { a: z.number(), b: z.number() },
  }, async ({ a, b }) => ({ content: [text(String(a + b))] }));
  if (opts.mode !== 'session-changing') {
    add();
  } else {
    server.grow = () => {
      if (server.added) server.added.remove();
      server.added = null;
      server.registerTool('grown', {
        description: 'Appears once `grow` ran.',
        inputSchema: { word: z.string() },
      }, async ({ word }) => ({ content: [text(`grown ${word}`)] }));
    };
    server.registerTool('grow', {
      description: 'Changes the catalogue of every session: `grown` instead of `add`.',
      inputSchema: {},
    }, async (_args, extra) => {
      if (!grown) {
        grown = true;
        for (const s of live) s.grow();
      }
      await extra.sendNotification({ method: 'notifications/tools/list_changed' });
      await extra.sendNotification({ method: 'notifications/tools/list_changed' });
      return { content: [text('grown')] };
    });
    if (grown) server.grow(); else server.added = add();
    live.add(server);
  }
  server.registerTool('slow', {
    description: 'Waits the given seconds (stops early when cancelled).',
    inputSchema: { seconds: z.number() },
  }, async ({ seconds }, extra) => {
    await new Promise((resolve) => {
      const signal = extra.signal;
      const done = () => { clearTimeout(timer); signal.removeEventListener('abort', done); resolve(); };
      const timer = setTimeout(done, seconds * 1000);
      if (signal.aborted) done(); else signal.addEventListener('abort', done);
    });
    return { content: [text(`slept ${seconds}`)] };
  });
  server.registerTool('fail', {
    description: 'Always a tool error.',
    inputSchema: {},
  }, async () => ({ isError: true, content: [text('failed on purpose')] }));
  server.registerTool('big', {
    description: 'One text block of `bytes` x characters.',
    inputSchema: { bytes: z.number().int().nonnegative() },
  }, async ({ bytes }) => ({ content: [text('x'.repeat(bytes))] }));
  server.registerTool('image', {
    description: 'Text, a tiny PNG, text.',
    inputSchema: {},
  }, async () => ({
    content: [text('before'), { type: 'image', data: TINY_PNG, mimeType: 'image/png' }, text('after')],
  }));
  server.registerTool('count_args', {
    description: 'Returns the JSON of the arguments it received (any object).',
    inputSchema: z.object({}).passthrough(),
  }, async (args) => ({ content: [text(JSON.stringify(args))] }));
  return server;
}

function header(req, name) {
  const v = req.headers[name];
  return v === undefined || v === '' ? '-' : String(v);
}

const UNPARSABLE = Symbol('unparsable');

function logMessages(req, body) {
  if (!opts.log) return;
  const sid = header(req, 'mcp-session-id');
  const ver = header(req, 'mcp-protocol-version');
  let lines = '';
  if (body === undefined) {
    lines = `${req.method} - - ${sid} ${ver}\n`;
  } else if (body === UNPARSABLE) {
    lines = `${req.method} unparsable - ${sid} ${ver}\n`;
  } else {
    for (const m of Array.isArray(body) ? body : [body]) {
      const ok = m !== null && typeof m === 'object';
      const method = ok && typeof m.method === 'string' ? m.method : 'response';
      const id = ok && m.id !== undefined && m.id !== null ? String(m.id) : '-';
      let line = `${req.method} ${method} ${id} ${sid} ${ver}`;
      if (method === 'notifications/cancelled') line += ` ${m.params?.requestId ?? '-'}`;
      lines += `${line}\n`;
    }
  }
  fs.appendFileSync(opts.log, lines);
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

function sendJson(res, status, error) {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ jsonrpc: '2.0', error, id: null }));
}

// Reads and logs the POST body, then hands it to the SDK already parsed (the SDK validates it
// and answers -32700 itself when it is not JSON: we then pass the raw text through as-is).
async function postBody(req) {
  const raw = await readBody(req);
  try {
    const body = JSON.parse(raw);
    logMessages(req, body);
    return { body, parsed: true };
  } catch {
    logMessages(req, UNPARSABLE);
    return { body: undefined, parsed: false };
  }
}

async function handleStateless(req, res) {
  if (req.method !== 'POST') {
    logMessages(req, undefined);
    res.writeHead(405, { allow: 'POST', 'content-type': 'application/json' });
    res.end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32000, message: 'Method not allowed.' }, id: null }));
    return;
  }
  const { body, parsed } = await postBody(req);
  if (!parsed) {
    sendJson(res, 400, { code: -32700, message: 'Parse error' });
    return;
  }
  const server = newServer();
  const transport = new StreamableHTTPServerTransport({
    sessionIdGenerator: undefined,
    enableJsonResponse: true,
  });
  // When the client goes away, close both so an in-flight handler's AbortSignal fires.
  res.on('close', () => {
    transport.close();
    server.close();
  });
  await server.connect(transport);
  await transport.handleRequest(req, res, body);
}

const sessions = new Map();

async function handleSession(req, res) {
  const sid = req.headers['mcp-session-id'];
  let body;
  if (req.method === 'POST') {
    const got = await postBody(req);
    if (!got.parsed) {
      sendJson(res, 400, { code: -32700, message: 'Parse error' });
      return;
    }
    body = got.body;
  } else {
    logMessages(req, undefined);
  }
  if (sid !== undefined) {
    const transport = sessions.get(sid);
    if (!transport) {
      sendJson(res, 404, { code: -32001, message: 'Session not found' });
      return;
    }
    await transport.handleRequest(req, res, body);
    return;
  }
  if (req.method === 'POST' && isInitializeRequest(body)) {
    const server = newServer();
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (id) => { sessions.set(id, transport); },
    });
    transport.onclose = () => {
      if (transport.sessionId) sessions.delete(transport.sessionId);
    };
    await server.connect(transport);
    await transport.handleRequest(req, res, body);
    return;
  }
  sendJson(res, 400, { code: -32000, message: 'Bad Request: Mcp-Session-Id header is required' });
}

const handle = opts.mode === 'stateless-json' ? handleStateless : handleSession;

const httpServer = http.createServer((req, res) => {
  const path = (req.url || '').split('?')[0];
  if (path !== '/mcp') {
    res.writeHead(404, { 'content-type': 'text/plain' });
    res.end('not found\n');
    return;
  }
  handle(req, res).catch((err) => {
    process.stderr.write(`sdk-server: ${err && err.stack ? err.stack : err}\n`);
    if (!res.headersSent) sendJson(res, 500, { code: -32603, message: 'Internal server error' });
    else res.end();
  });
});

httpServer.listen(opts.port, '127.0.0.1', () => {
  process.stdout.write(`listening ${httpServer.address().port}\n`);
});

for (const sig of ['SIGTERM', 'SIGINT']) {
  process.on(sig, () => {
    for (const t of sessions.values()) t.close();
    httpServer.close();
    process.exit(0);
  });
}
