// The official TypeScript SDK v2 (@modelcontextprotocol/server 2.4.0 + @modelcontextprotocol/node),
// bound to 127.0.0.1, endpoint /mcp. A peer nobody here wrote, for the 2026-07-28 era.
//
// usage: node spec/peers/sdk2-server.mjs --mode default|modern-only|session-2025 [--port N] [--log FILE]
//   --port 0 (the default) picks an ephemeral port. Prints exactly one line `listening <port>`
//   on stdout once it accepts connections.
//   default:      createMcpHandler(factory): the 2026-07-28 era, and 2025-era traffic served
//                 statelessly (the SDK's own default).
//   modern-only:  createMcpHandler(factory, { legacy: 'reject' }): 2026-07-28 only; a 2025
//                 initialize is refused with 400 -32022 naming the supported revisions.
//   session-2025: the SDK's sessionful 2025 transport (NodeStreamableHTTPServerTransport with a
//                 session id generator); nothing of the modern era.
//   --log FILE:   appends one line per POST, before the SDK sees it:
//                   POST <jsonrpc method> <mcp-protocol-version|-> <mcp-method|-> <mcp-name|-> <envelope version|->
//                 and `aborted <tool>` when a running `slow` call sees its abort signal, and
//                 `deploy state <requestState>` when a confirmed `deploy` completes.
//   The tools `deploy` and `signin` ask for input (2026-07-28: input_required): a form confirmation
//   with requestState, and a URL to open. The tool `workspace` asks for the client's roots and a
//   sampled message in one round (roots/list and sampling/createMessage input requests) and answers
//   `roots <uris, comma-separated>; model <model>; said <text>`.
//   Beside its tools it offers resources (doc://readme, text; doc://logo, a blob; the template
//   doc://pages/{page}), a prompt `greet` (argument `who`, completable) and a tool `links`
//   returning a resource_link and an embedded resource. In the modern modes the tool `touch`
//   publishes resources/list_changed and resources/updated for doc://readme to every open
//   subscriptions/listen stream.
import http from 'node:http';
import fs from 'node:fs';
import { randomUUID } from 'node:crypto';
import { McpServer, ResourceTemplate, completable, createMcpHandler, inputRequired, acceptedContent, inputResponse }
  from '@modelcontextprotocol/server';
import { toNodeHandler, NodeStreamableHTTPServerTransport } from '@modelcontextprotocol/node';
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
  if (!['default', 'modern-only', 'session-2025'].includes(opts.mode)) {
    throw new Error('--mode must be default, modern-only or session-2025');
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
  process.stderr.write(`sdk2-server: ${err.message}\n`);
  process.exit(2);
}

const log = (line) => { if (opts.log) fs.appendFileSync(opts.log, `${line}\n`); };
const text = (t) => ({ type: 'text', text: t });

function newServer() {
  // resources.subscribe: a subscriptions/listen may name resources to hear about
  const server = new McpServer({ name: 'mcpclient-sdk2-peer', version: '2.0.0' },
    { capabilities: { resources: { subscribe: true, listChanged: true } } });
  server.registerTool('echo', {
    description: 'Returns "Echo: <message>".',
    inputSchema: z.object({ message: z.string() }),
  }, async ({ message }) => ({ content: [text(`Echo: ${message}`)] }));
  server.registerTool('add', {
    description: 'Adds two numbers.',
    inputSchema: z.object({ a: z.number(), b: z.number() }),
  }, async ({ a, b }) => ({ content: [text(String(a + b))] }));
  server.registerTool('slow', {
    description: 'Waits the given seconds (stops early when the request is aborted).',
    inputSchema: z.object({ seconds: z.number() }),
  }, async ({ seconds }, ctx) => {
    const signal = ctx.mcpReq.signal;
    await new Promise((resolve) => {
      const done = () => { clearTimeout(timer); signal.removeEventListener('abort', aborted); resolve(); };
      const aborted = () => { log('aborted slow'); done(); };
      const timer = setTimeout(done, seconds * 1000);
      if (signal.aborted) aborted(); else signal.addEventListener('abort', aborted);
    });
    return { content: [text(`slept ${seconds}`)] };
  });
  server.registerTool('fail', {
    description: 'Always a tool error.',
    inputSchema: z.object({}),
  }, async () => ({ isError: true, content: [text('failed on purpose')] }));
  server.registerTool('grüße', {
    description: 'A name outside plain ASCII (Mcp-Name travels base64-encoded).',
    inputSchema: z.object({}),
  }, async () => ({ content: [text('hallo')] }));
  server.registerTool('route', {
    description: 'Mirrors region and shard into Mcp-Param-Region / Mcp-Param-Shard (x-mcp-header).',
    inputSchema: z.object({
      region: z.string().meta({ 'x-mcp-header': 'Region' }),
      shard: z.number().int().optional().meta({ 'x-mcp-header': 'Shard' }),
    }),
  }, async ({ region, shard }) => ({ content: [text(`routed ${region}/${shard ?? '-'}`)] }));
  server.registerTool('passthrough', {
    description: 'Any object; its schema carries "additionalProperties": {}.',
    inputSchema: z.object({ tag: z.string().optional() }).passthrough(),
  }, async (args) => ({ content: [text(JSON.stringify(args))] }));
  server.registerTool('deploy', {
    description: 'Asks the user to confirm first (input_required with requestState), then deploys.',
    inputSchema: z.object({ env: z.string() }),
  }, async ({ env }, ctx) => {
    const confirmed = acceptedContent(ctx.mcpReq.inputResponses, 'confirm');
    if (confirmed?.confirm !== true) {
      return inputRequired({
        inputRequests: {
          confirm: inputRequired.elicit({
            message: `Deploy to ${env}?`,
            requestedSchema: { type: 'object', properties: { confirm: { type: 'boolean' } }, required: ['confirm'] },
          }),
        },
        requestState: JSON.stringify({ env, asked: 1 }),
      });
    }
    log(`deploy state ${ctx.mcpReq.requestState() ?? '-'}`);
    return { content: [text(`deployed ${env}`)] };
  });
  server.registerTool('signin', {
    description: 'Asks the user to open a URL (URL-mode elicitation through input_required).',
    inputSchema: z.object({}),
  }, async (_args, ctx) => {
    const answer = ctx.mcpReq.inputResponses?.link;
    if (answer?.action !== 'accept') {
      return inputRequired({
        inputRequests: { link: inputRequired.elicitUrl({ message: 'Sign in', url: 'https://auth.example.com/start?x=1' }) },
      });
    }
    return { content: [text('signed in')] };
  });
  server.registerTool('workspace', {
    description: 'Asks for the roots and a sampled summary (input_required), then names both.',
    inputSchema: z.object({}),
  }, async (_args, ctx) => {
    const roots = inputResponse(ctx.mcpReq.inputResponses, 'roots');
    const sampled = inputResponse(ctx.mcpReq.inputResponses, 'summary');
    if (roots.kind !== 'roots' || sampled.kind !== 'sampling') {
      return inputRequired({
        inputRequests: {
          roots: inputRequired.listRoots(),
          summary: inputRequired.createMessage({
            messages: [{ role: 'user', content: { type: 'text', text: 'Summarise the workspace.' } }],
            maxTokens: 64,
          }),
        },
      });
    }
    const result = sampled.result;
    const said = result.content && result.content.type === 'text' ? result.content.text : '?';
    return { content: [text(`roots ${roots.roots.map((r) => r.uri).join(',')}; model ${result.model}; said ${said}`)] };
  });
  server.registerResource('readme', 'doc://readme', { title: 'Read me', mimeType: 'text/markdown',
    description: 'What this peer is.' }, async (uri) => ({
    contents: [{ uri: uri.href, mimeType: 'text/markdown', text: '# Peer\nA test server.' }],
  }));
  server.registerResource('logo', 'doc://logo', { mimeType: 'image/png' }, async (uri) => ({
    contents: [{ uri: uri.href, mimeType: 'image/png', blob: 'iVBORw0KGgo=' }],
  }));
  server.registerResource('page', new ResourceTemplate('doc://pages/{page}', { list: undefined }),
    { description: 'One page.' }, async (uri, { page }) => ({
      contents: [{ uri: uri.href, text: `page ${page}` }],
    }));
  server.registerPrompt('greet', {
    description: 'Greets someone.',
    argsSchema: z.object({
      who: completable(z.string(), (value) => ['Ada', 'Alan', 'Grace'].filter((n) => n.startsWith(value))),
    }),
  }, async ({ who }) => ({ messages: [{ role: 'user', content: text(`Hello ${who}`) }] }));
  server.registerTool('links', {
    description: 'Returns a resource link and an embedded resource.',
    inputSchema: z.object({}),
  }, async () => ({ content: [text('see the links'),
    { type: 'resource_link', uri: 'doc://readme', name: 'readme' },
    { type: 'resource', resource: { uri: 'doc://pages/1', text: 'page 1' } }] }));
  server.registerTool('touch', {
    description: 'Publishes resources/list_changed and resources/updated for doc://readme.',
    inputSchema: z.object({}),
  }, async () => {
    if (notifier) { notifier.resourcesChanged(); notifier.resourceUpdated('doc://readme'); }
    return { content: [text('touched')] };
  });
  return server;
}

let notifier = null;

function logPost(req, raw) {
  if (!opts.log) return;
  const h = (name) => (req.headers[name] === undefined || req.headers[name] === '' ? '-' : String(req.headers[name]));
  let method = 'unparsable';
  let envelope = '-';
  try {
    const body = JSON.parse(raw);
    method = typeof body.method === 'string' ? body.method : 'response';
    envelope = body.params?._meta?.['io.modelcontextprotocol/protocolVersion'] ?? '-';
  } catch { /* logged as unparsable */ }
  log(`POST ${method} ${h('mcp-protocol-version')} ${h('mcp-method')} ${h('mcp-name')} ${envelope}`);
}

// The request body, read once: logged, then handed on as the SDK's pre-parsed body.
function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

function parsed(raw) {
  try { return JSON.parse(raw); } catch { return undefined; }
}

const sessions = new Map();

async function handleSession(req, res, body) {
  const sid = req.headers['mcp-session-id'];
  if (sid !== undefined) {
    const transport = sessions.get(sid);
    if (!transport) {
      res.writeHead(404, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32001, message: 'Session not found' }, id: null }));
      return;
    }
    await transport.handleRequest(req, res, body);
    return;
  }
  if (req.method === 'POST' && body && body.method === 'initialize') {
    const server = newServer();
    const transport = new NodeStreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (id) => { sessions.set(id, transport); },
    });
    transport.onclose = () => { if (transport.sessionId) sessions.delete(transport.sessionId); };
    await server.connect(transport);
    await transport.handleRequest(req, res, body);
    return;
  }
  res.writeHead(400, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32000, message: 'Bad Request: Mcp-Session-Id header is required' }, id: null }));
}

let handler;
if (opts.mode !== 'session-2025') {
  const mcp = createMcpHandler(() => newServer(), opts.mode === 'modern-only' ? { legacy: 'reject' } : {});
  notifier = mcp.notify;
  handler = toNodeHandler(mcp);
}

const httpServer = http.createServer(async (req, res) => {
  const path = (req.url || '').split('?')[0];
  if (path !== '/mcp') {
    res.writeHead(404, { 'content-type': 'text/plain' });
    res.end('not found\n');
    return;
  }
  try {
    let body;
    if (req.method === 'POST') {
      const raw = await readBody(req);
      logPost(req, raw);
      body = parsed(raw);
    }
    if (handler) await handler(req, res, body);
    else await handleSession(req, res, body);
  } catch (err) {
    process.stderr.write(`sdk2-server: ${err && err.stack ? err.stack : err}\n`);
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
    for (const t of sessions.values()) t.close();
    httpServer.close();
    process.exit(0);
  });
}
