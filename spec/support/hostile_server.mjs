// A hostile MCP server for spec/integration/hostile_spec.lua and tls_spec.lua, on 127.0.0.1 only.
//
// One server serves every misbehaviour: the first segment of the request path picks the mode
// (http://127.0.0.1:P/reset-mid-body, .../never-answers, ...). Anything after it is free, so a
// spec can give each case its own path (/redirect/a, /redirect/b) and its own recorded state.
// In every mode the server is a plain MCP server (initialize, notifications, ping, tools/list,
// tools/call of "echo") except for the exchange the mode names — usually a tools/call of the
// tool "hostile" — so a connection can show it is still usable after the misbehaviour by calling
// "echo" on the same path. What each mode does is written next to it in MODES below.
//
// usage: node spec/support/hostile_server.mjs [--port N]
//          [--tls-cert cert.pem --tls-key key.pem [--tls-ca ca.pem] [--require-client-cert]]
//   Prints exactly one line `listening <port>` once it accepts connections. With --tls-cert the
//   server speaks HTTPS (same routes); --require-client-cert makes the TLS handshake demand a
//   client certificate signed by --tls-ca. The redirect target (below) is always plain HTTP.
//
// Control (never part of a case):
//   GET /_state?path=/some/path  JSON { initializes, requests: [...], sessions, other: {port,
//                                contacts: [...]} } — what arrived on that path, and every
//                                contact the redirect target ever had (method, url,
//                                authorization). Request records carry the HTTP method, the
//                                JSON-RPC method and id, and the headers a case checks. `tool`:
//                                the cancel-watch record (times in ns on CLOCK_MONOTONIC, as
//                                text), and `now`, the server's clock when it answered.
//                                `gets`: how many standalone GET streams were opened;
//                                `progress_sent`: the notices a get-progress mode wrote;
//                                `forged_sent`: whether …/smuggle?late=1 has written its
//                                forgeries (so a spec waits for them, not for time).
//
// The process ends once its parent is gone (its parent PID changes), so a spec run that dies
// without stopping the server leaves nothing listening.
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import zlib from 'node:zlib';

const PROTOCOL = '2025-11-25';
const MiB = 1024 * 1024;

const options = { port: 0 };
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  const arg = argv[i];
  if (arg === '--port') options.port = Number(argv[++i]);
  else if (arg === '--tls-cert') options.cert = argv[++i];
  else if (arg === '--tls-key') options.key = argv[++i];
  else if (arg === '--tls-ca') options.ca = argv[++i];
  else if (arg === '--require-client-cert') options.requireClientCert = true;
  else {
    process.stderr.write(`hostile_server: unknown argument ${arg}\n`);
    process.exit(2);
  }
}

const parent = process.ppid;
setInterval(() => {
  if (process.ppid !== parent) process.exit(0);
}, 500).unref();

// ---------------------------------------------------------------------------
// State, per request path
// ---------------------------------------------------------------------------

const states = new Map();
const other = { port: 0, contacts: [] };

function stateOf(path) {
  let s = states.get(path);
  if (!s) {
    s = { initializes: 0, requests: [], sessions: new Set(), pending: null, nextSession: 1 };
    states.set(path, s);
  }
  return s;
}

function record(state, req, msg) {
  state.requests.push({
    http: req.method,
    method: msg && typeof msg === 'object' ? msg.method ?? null : null,
    id: msg && typeof msg === 'object' ? msg.id ?? null : null,
    name: msg && typeof msg === 'object' && msg.params ? msg.params.name ?? null : null,
    result: msg && typeof msg === 'object' ? msg.result ?? null : null,
    error: msg && typeof msg === 'object' ? msg.error ?? null : null,
    arguments: msg && typeof msg === 'object' && msg.params ? msg.params.arguments ?? null : null,
    session: req.headers['mcp-session-id'] ?? null,
    authorization: req.headers.authorization ?? null,
    accept_encoding: req.headers['accept-encoding'] ?? null,
    last_event_id: req.headers['last-event-id'] ?? null,
    protocol: req.headers['mcp-protocol-version'] ?? null,
    mcp_name: req.headers['mcp-name'] ?? null,
    task_id: msg && typeof msg === 'object' && msg.params ? msg.params.taskId ?? null : null,
    declared: tasksDeclared(msg),
  });
}

// ---------------------------------------------------------------------------
// Well-behaved pieces
// ---------------------------------------------------------------------------

function json(res, status, value, headers = {}) {
  const body = typeof value === 'string' ? value : JSON.stringify(value);
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body), ...headers });
  res.end(body);
}

function result(id, value) {
  return { jsonrpc: '2.0', id, result: value };
}

function text(t) {
  return { content: [{ type: 'text', text: t }] };
}

const TOOLS = [
  { name: 'echo', description: 'Echoes text', inputSchema: { type: 'object', properties: { text: { type: 'string' } } } },
  { name: 'hostile', description: 'Misbehaves', inputSchema: { type: 'object' } },
  { name: 'forget', description: 'Forgets the session after answering', inputSchema: { type: 'object' } },
];

const ESCAPES = {
  name: 'Evil\u001b[31m\u001b]0;pwned\u0007\nX-Injected: yes\r\u009b2J',
  version: '6.6\u0007\r\nSet-Cookie: x=1\u001b[2J\u0000',
};

// The modes whose sessions the server keeps (and checks).
const SESSION_MODES = new Set(['session-vanish', 'session-vanish-400', 'session-amnesia', 'priming-only',
  'server-requests', 'stall-cancel', 'bad-session', 'cancel-watch', 'get-progress', 'get-progress-flood']);
// The modes that speak the 2026-07-28 era: server/discover answers, initialize is refused.
const MODERN_MODES = new Set(['cancel-watch-modern', 'ping-flood-modern', 'tasks-modern']);
const MODERN = '2026-07-28';

// Now on CLOCK_MONOTONIC in nanoseconds, as text: the client's core.monotonic_ns() reads the same
// clock, so a spec compares the moment it cancelled with the moment the server saw it.
function now() {
  return process.hrtime.bigint().toString();
}

function initialize(req, res, mode, state, msg) {
  state.initializes++;
  const headers = {};
  if (SESSION_MODES.has(mode)) {
    const id = `s-${state.initializes}-${Math.random().toString(36).slice(2)}`;
    if (mode !== 'session-amnesia') state.sessions.add(id);
    headers['Mcp-Session-Id'] = id;
  }
  if (mode === 'bad-session') return badSession(req, msg);
  const serverInfo = mode === 'terminal-escapes' ? ESCAPES : { name: 'hostile', version: '1.0' };
  const value = { protocolVersion: PROTOCOL, capabilities: { tools: {} }, serverInfo };
  if (mode === 'terminal-escapes') value.instructions = 'Use me\u001b[8m hidden \u001b[0m\r\nnow';
  return json(res, 200, result(msg.id, value), headers);
}

// An initialize answer whose session id holds a byte a header value may not carry
// (…/bad-session/cr: a bare CR; …/bad-session/ctl: a control character; …/bad-session/del: DEL).
function badSession(req, msg) {
  const kind = new URL(req.url, 'http://127.0.0.1').pathname.split('/')[2];
  const bad = { cr: 'abc\rX-Injected: 1', ctl: 'abc\u0001def', del: 'abc\u007fdef' }[kind] || 'abc\rdef';
  const body = JSON.stringify(result(msg.id, { protocolVersion: PROTOCOL, capabilities: { tools: {} }, serverInfo: { name: 'hostile', version: '1.0' } }));
  raw(req, `HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nMcp-Session-Id: ${bad}\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
  req.socket.end(); // node's response object is never finished: the socket must not serve another request
}

// The session check of the session modes: an unknown or missing id is answered as the SDK does.
function sessionRefused(req, res, mode, state, msg) {
  if (!SESSION_MODES.has(mode) || msg.method === 'initialize') return false;
  const id = req.headers['mcp-session-id'];
  if (mode === 'session-amnesia' && msg.method === 'notifications/initialized') return false;
  if (id && state.sessions.has(id)) return false;
  if (mode === 'session-vanish-400') {
    json(res, 400, { jsonrpc: '2.0', id: null, error: { code: -32000, message: 'Bad Request: No valid session ID provided' } });
  } else {
    json(res, 404, { jsonrpc: '2.0', id: null, error: { code: -32001, message: 'Session not found' } });
  }
  return true;
}

// ---------------------------------------------------------------------------
// Misbehaviours
// ---------------------------------------------------------------------------

// Raw bytes on the socket: node's response object is never touched again for this request.
function raw(req, bytes) {
  req.socket.write(bytes);
}

// A timer that stops when the client goes away.
function every(req, ms, fn) {
  const timer = setInterval(() => {
    if (req.socket.destroyed) clearInterval(timer);
    else fn(timer);
  }, ms);
  req.socket.on('close', () => clearInterval(timer));
}

let bombs = null;
// 512 MiB of 'a' inside a JSON string, gzip- and zlib-compressed once (about 0.5 MiB each).
function bomb() {
  if (bombs) return bombs;
  const head = Buffer.from('{"jsonrpc":"2.0","id":0,"result":{"content":[{"type":"text","text":"');
  const tail = Buffer.from('"}]}}');
  const block = Buffer.alloc(MiB, 'a');
  const make = (Kind) => {
    const z = new Kind({ level: 9 });
    const out = [];
    z.on('data', (c) => out.push(c));
    z.write(head);
    for (let i = 0; i < 512; i++) z.write(block);
    z.end(tail);
    return new Promise((resolve) => z.on('end', () => resolve(Buffer.concat(out))));
  };
  bombs = Promise.all([make(zlib.Gzip), make(zlib.Deflate)]).then(([gzip, deflate]) => ({ gzip, deflate }));
  return bombs;
}

function sse(res, headers = {}) {
  res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache', ...headers });
}

function event(data, id) {
  return `event: message\n${id !== undefined ? `id: ${id}\n` : ''}data: ${data}\n\n`;
}

/*
 * Each mode: (req, res, msg, state, url) for a tools/call of "hostile" (or, where said, for
 * another exchange). Outcomes the client must show are in hostile_spec.lua.
 */
const MODES = {
  // Headers and part of a declared body, then the socket is destroyed (TCP RST/FIN mid-body).
  'reset-mid-body'(req, res) {
    res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Length': '4096' });
    res.write('{"jsonrpc":"2.0","id":');
    setTimeout(() => req.socket.resetAndDestroy ? req.socket.resetAndDestroy() : req.socket.destroy(), 50);
  },

  // An event stream with an event id, then the socket is reset before the answer. A GET that
  // resumes it (Last-Event-ID r1) gets the answer.
  'reset-mid-stream'(req, res, msg, state) {
    state.pending = msg.id;
    sse(res);
    res.write(`id: r1\nretry: 50\ndata:\n\n`);
    res.write(event(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/progress', params: { progressToken: msg.id, progress: 1 } })));
    setTimeout(() => req.socket.resetAndDestroy ? req.socket.resetAndDestroy() : req.socket.destroy(), 50);
  },

  // Headers at once, then one body byte per second, forever.
  'one-byte-per-second'(req, res) {
    res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Length': String(MiB) });
    res.write(' ');
    every(req, 1000, () => res.write(' '));
  },

  // An event stream that sends one comment byte per second and never the answer.
  'sse-trickle'(req, res) {
    sse(res);
    res.write(':');
    every(req, 1000, () => res.write(':'));
  },

  // The request is read; nothing is ever written.
  'never-answers'() {},

  // 3 MiB of JSON-ish bytes, chunked, no Content-Length.
  'chunked-3mib'(req, res) {
    res.writeHead(200, { 'Content-Type': 'application/json' });
    const chunk = Buffer.alloc(64 * 1024, ' ');
    res.write('{"jsonrpc":"2.0","id":1,"result":{"padding":"');
    for (let i = 0; i < 48; i++) res.write(chunk);
    res.end('"}}');
  },

  // 3 MiB of notifications on an event stream, no answer.
  'sse-3mib'(req, res, msg) {
    sse(res);
    const note = event(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/message', params: { level: 'info', data: 'x'.repeat(4000) } }));
    const n = Math.ceil((3 * MiB) / note.length);
    let i = 0;
    const pump = () => {
      while (i < n) {
        i++;
        if (!res.write(note)) return res.once('drain', pump);
      }
      res.end(event(JSON.stringify(result(msg.id, text('too late')))));
    };
    req.socket.on('close', () => { i = n + 1; });
    pump();
  },

  // A status line and some headers, then silence: the blank line never comes.
  'headers-without-end'(req) {
    raw(req, 'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Waiting: yes\r\n');
    every(req, 500, () => {});
  },

  // Header lines without end, as fast as the socket takes them.
  'header-flood'(req) {
    raw(req, 'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n');
    let n = 0;
    const line = `X-Flood: ${'f'.repeat(1000)}\r\n`;
    const pump = () => {
      while (!req.socket.destroyed && n < 100000) {
        n++;
        if (!req.socket.write(line)) return req.socket.once('drain', pump);
      }
      return undefined;
    };
    pump();
  },

  // A status line that is not HTTP at all.
  'garbage-status'(req) {
    raw(req, 'SSH-2.0-OpenSSH_9.6\r\n\r\n\u0000\u0001\u0002');
    setTimeout(() => req.socket.end(), 50);
  },

  // Chunked encoding with a chunk size that is not hexadecimal.
  'bad-chunk'(req) {
    raw(req, 'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n'
      + '5\r\n{"jso\r\nzz\r\nnope\r\n0\r\n\r\n');
  },

  // A correct answer with a short Content-Length, the extra bytes forming forged responses to
  // the next ids: a client that read them as the answer to its next request would see
  // "SMUGGLED" instead of its echo. …?late=1 sends the forgeries 100 ms later, so they wait
  // in the socket of an idle kept-alive connection rather than arrive with the answer; once
  // they are handed to the kernel, state.forged_sent says so.
  'smuggle'(req, res, msg, state, url) {
    const body = JSON.stringify(result(msg.id, text('first')));
    let extra = '';
    for (let id = msg.id + 1; id < msg.id + 6; id++) {
      const b = JSON.stringify(result(id, text('SMUGGLED')));
      extra += `HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: ${b.length}\r\n\r\n${b}`;
    }
    const head = `HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`;
    if (url.searchParams.get('late') === '1') {
      raw(req, head);
      setTimeout(() => {
        if (!req.socket.destroyed) req.socket.write(extra, () => { state.forged_sent = true; });
      }, 100);
    } else {
      raw(req, head + extra);
    }
  },

  // 302/307/308 (…/redirect?status=307) to the other server, which records who came.
  'redirect'(req, res, msg, state, url) {
    const status = Number(url.searchParams.get('status') || 302);
    res.writeHead(status, { Location: `http://127.0.0.1:${other.port}/mcp`, 'Content-Type': 'text/plain' });
    res.end('moved');
  },

  // A small, correct answer compressed with gzip (or deflate), never asked for: a client that
  // decompressed would succeed, one that reads raw bytes fails to parse them.
  'gzip-answer'(req, res, msg) {
    const body = zlib.gzipSync(JSON.stringify(result(msg.id, text('decompressed'))));
    res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Encoding': 'gzip', 'Content-Length': body.length });
    res.end(body);
  },
  'deflate-answer'(req, res, msg) {
    const body = zlib.deflateSync(JSON.stringify(result(msg.id, text('decompressed'))));
    res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Encoding': 'deflate', 'Content-Length': body.length });
    res.end(body);
  },

  // About 0.5 MiB that expand to 512 MiB (gzip, or deflate with …?encoding=deflate).
  'bomb'(req, res, msg, state, url) {
    const encoding = url.searchParams.get('encoding') || 'gzip';
    const type = url.searchParams.get('type') || 'application/json';
    bomb().then((b) => {
      const body = b[encoding];
      res.writeHead(200, { 'Content-Type': type, 'Content-Encoding': encoding, 'Content-Length': body.length });
      res.end(body);
    });
  },

  // An answer whose id is not the request's (plain JSON).
  'wrong-id'(req, res, msg) {
    json(res, 200, result(msg.id + 1000, text('for someone else')));
  },

  // On an event stream: answers to other ids (number, string, null), then the stream ends.
  'wrong-id-sse'(req, res, msg) {
    sse(res);
    res.write(event(JSON.stringify(result(msg.id + 1, text('next')))));
    res.write(event(JSON.stringify(result(String(msg.id), text('string id')))));
    res.end(event(JSON.stringify(result(null, text('null id')))));
  },

  // Before the answer: a priming event, comments, notifications, a server request, an answer to
  // another id, non-JSON data and an unknown event type. Then the answer, then more junk.
  'notifications-first'(req, res, msg) {
    sse(res);
    res.write('id: p0\ndata:\n\n');
    res.write(': keep-alive comment\n\n');
    res.write(event(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/progress', params: { progressToken: 1, progress: 0.5 } }), 'e1'));
    res.write(event(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/message', params: { level: 'info', data: 'hello' } })));
    res.write(event(JSON.stringify({ jsonrpc: '2.0', id: 'srv-1', method: 'ping' })));
    res.write(event(JSON.stringify(result(msg.id + 7, text('not yours')))));
    res.write('data: this is not json\n\n');
    res.write('event: weird\ndata: {"jsonrpc":"2.0"}\n\n');
    setTimeout(() => {
      res.write(event(JSON.stringify(result(msg.id, text('the answer'))), 'e2'));
      res.end(event(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/message', params: { level: 'info', data: 'after' } })));
    }, 30);
  },

  // Duplicate keys: "result" twice at the top (…?where=nested: "text" twice in a block).
  'duplicate-keys'(req, res, msg, state, url) {
    const nested = url.searchParams.get('where') === 'nested';
    const body = nested
      ? `{"jsonrpc":"2.0","id":${msg.id},"result":{"content":[{"type":"text","text":"a","text":"b"}]}}`
      : `{"jsonrpc":"2.0","id":${msg.id},"result":{"content":[{"type":"text","text":"a"}]},"result":{"content":[]}}`;
    json(res, 200, body);
  },

  // Invalid UTF-8 inside the text of the answer (an overlong encoding and a lone continuation byte).
  'invalid-utf8'(req, res, msg) {
    const head = Buffer.from(`{"jsonrpc":"2.0","id":${msg.id},"result":{"content":[{"type":"text","text":"bad `);
    const body = Buffer.concat([head, Buffer.from([0xc0, 0xaf, 0x80, 0xff]), Buffer.from('"}]}}')]);
    res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Length': body.length });
    res.end(body);
  },

  // A priming event (an id, empty data, retry 100 ms or …&retry=N) and the stream closes. The
  // GET that resumes it (…?resume=405|404|stream|priming) gets 405, 404 "session not found"
  // (the session is forgotten), a stream carrying the answer, or another priming-only stream.
  'priming-only'(req, res, msg, state, url) {
    state.pending = msg.id;
    sse(res);
    res.end(`id: prime-1\nretry: ${Number(url.searchParams.get('retry') || 100)}\ndata:\n\n`);
  },

  // The request is read, then the connection is closed without a byte of answer.
  'drop-after-request'(req) {
    req.socket.destroy();
  },

  // An event stream that carries server requests before the answer: a ping (id srv-ping) and a
  // sampling request (id 7). The answer comes only once both were answered on a POST.
  'server-requests'(req, res, msg, state) {
    sse(res);
    res.write(event(JSON.stringify({ jsonrpc: '2.0', id: 'srv-ping', method: 'ping' })));
    res.write(event(JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'sampling/createMessage', params: {} })));
    res.write(event(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/message', params: { level: 'info', data: 'x' } })));
    state.waiting = () => {
      const answered = state.requests.filter((r) => r.http === 'POST' && r.method === null && r.id !== null);
      if (answered.length < 2) return;
      state.waiting = null;
      res.end(event(JSON.stringify(result(msg.id, text('after the answers')))));
    };
  },

  // A tool that runs until it is stopped: an event stream opens with a progress notification and
  // stays open. The server records (in state.tool, ns on CLOCK_MONOTONIC) when the call arrived,
  // when notifications/cancelled for it arrived, when the client closed the stream, and whether
  // and how the tool was stopped (by the notice, or by the closed stream in the modern era). A
  // stopped tool never answers.
  'cancel-watch'(req, res, msg, state) {
    const token = msg.params && msg.params._meta && msg.params._meta.progressToken;
    const tool = { id: msg.id, started_ns: now(), cancel_ns: null, closed_ns: null, stopped_ns: null, stopped_by: null };
    state.tool = tool;
    tool.stop = (by) => {
      if (tool.stopped_ns) return;
      tool.stopped_ns = now();
      tool.stopped_by = by;
      if (!res.writableEnded) res.end();
    };
    res.on('close', () => {
      tool.closed_ns = tool.closed_ns || now();
      if (state.modern) tool.stop('closed stream');
    });
    sse(res);
    res.write(event(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/progress',
      params: { progressToken: token ?? msg.id, progress: 1, total: 100, message: 'working' } })));
  },

  // 3 000 pings (server requests with ids) on the call's stream, then the stream ends without an
  // answer: the call's budget runs out while the client reads and answers them.
  'ping-flood'(req, res) {
    sse(res);
    let n = 0;
    const burst = () => {
      if (res.writableEnded || req.socket.destroyed) return;
      for (let i = 0; i < 100 && n < 3000; i++) {
        n += 1;
        res.write(event(JSON.stringify({ jsonrpc: '2.0', id: `flood-${n}`, method: 'ping' })));
      }
      if (n < 3000) setImmediate(burst);
      else res.end();
    };
    burst();
  },

  // Never answers the call; the notifications/cancelled POST is read and never answered either.
  'stall-cancel'() {},

  // The answer, then the server forgets the session: the next request gets 404 (or 400).
  'session-vanish'(req, res, msg, state) {
    json(res, 200, result(msg.id, text('hostile answered')));
    state.sessions.clear();
  },

  // serverInfo full of escapes (at initialize), and here a JSON-RPC error whose message is too.
  'terminal-escapes'(req, res, msg) {
    json(res, 200, { jsonrpc: '2.0', id: msg.id, error: { code: -32000, message: `boom\u001b[31m\r\nX-Injected: 1\u0007${'\u001b[0m'.repeat(2000)}` } });
  },
};
// The standalone GET stream of a session (modes in GET_MODES): kept in state.get while it is open.
const GET_MODES = new Set(['get-progress', 'get-progress-flood']);

function standaloneGet(req, res, state) {
  state.gets = (state.gets || 0) + 1;
  sse(res);
  res.write(': standalone\n\n');
  state.get = res;
  res.on('close', () => { if (state.get === res) state.get = null; });
}

// Calls fn(stream) once the session's GET stream is open, or fn(null) after `ms` without one.
function whenGet(state, ms, fn) {
  const until = Date.now() + ms;
  const look = () => {
    if (state.get) return fn(state.get);
    if (Date.now() > until) return fn(null);
    return setTimeout(look, 10);
  };
  look();
}

function progress(token, value, total, message) {
  return event(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/progress',
    params: { progressToken: token, progress: value, total, message } }));
}

// Progress that is not tied to its request: the call's own stream carries only the answer, and
// every notice travels on the standalone GET stream (as servers that send progress without the
// request do): five for the call's token (messages full of escapes), one for a token no request
// of the client holds, and a log notice. Without a GET stream they are lost. The answer comes
// 100 ms later; state.progress_sent counts what was written to the GET stream.
MODES['get-progress'] = (req, res, msg, state) => {
  const token = msg.params && msg.params._meta ? msg.params._meta.progressToken : undefined;
  sse(res);
  res.write(': working\n\n');
  whenGet(state, 2000, (get) => {
    state.progress_sent = 0;
    if (get && token !== undefined) {
      get.write(progress(9999, 1, 1, 'someone else'));
      for (let i = 1; i <= 5; i++) {
        get.write(progress(token, i, 5, `step ${i}\u001b[2J\u202e`));
        state.progress_sent++;
      }
      get.write(event(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/message',
        params: { level: 'warning', logger: 'hostile\u202e', data: { note: 'from the GET stream\u0007' } } })));
    }
    setTimeout(() => res.end(event(JSON.stringify(result(msg.id, text('done'))))), 100);
  });
};

// A flood of progress for the call on the standalone GET stream: 4 MiB of notices (as fast as
// the socket takes them), then the answer on the call's stream, once the flood is written or the
// client closed the GET stream. state.progress_sent counts the notices written.
MODES['get-progress-flood'] = (req, res, msg, state) => {
  const token = msg.params && msg.params._meta ? msg.params._meta.progressToken : undefined;
  sse(res);
  res.write(': working\n\n');
  whenGet(state, 2000, (get) => {
    state.progress_sent = 0;
    let answered = false;
    const answer = () => {
      if (answered) return;
      answered = true;
      res.end(event(JSON.stringify(result(msg.id, text('done after the flood')))));
    };
    if (!get) return answer();
    get.on('close', answer);
    const note = (i) => progress(token, i, null, 'x'.repeat(100));
    const total = Math.ceil((4 * MiB) / note(1).length);
    const pump = () => {
      while (state.progress_sent < total && !get.destroyed) {
        state.progress_sent++;
        if (!get.write(note(state.progress_sent))) return get.once('drain', pump);
      }
      return answer();
    };
    return pump();
  });
};

MODES['session-vanish-400'] = MODES['session-vanish'];
MODES['cancel-watch-modern'] = MODES['cancel-watch'];
MODES['ping-flood-modern'] = MODES['ping-flood'];
MODES['session-amnesia'] = (req, res, msg) => json(res, 200, result(msg.id, text('never reached')));

// A tools/list page of just under 2 MiB of empty tools ({},{},…), always with a next cursor.
function hugePage(id) {
  const head = `{"jsonrpc":"2.0","id":${id},"result":{"nextCursor":"more","tools":[`;
  const n = Math.floor((2 * MiB - head.length - 64) / 3);
  return `${head}${'{},'.repeat(n - 1)}{}]}}`;
}

// The GET that resumes a priming-only stream.
function resume(req, res, state, url) {
  const how = url.searchParams.get('resume') || '405';
  if (how === '404') {
    state.sessions.clear();
    return json(res, 404, { jsonrpc: '2.0', id: null, error: { code: -32001, message: 'Session not found' } });
  }
  if (how === 'stream' && state.pending !== null) {
    sse(res);
    return res.end(event(JSON.stringify(result(state.pending, text('resumed'))), 'prime-2'));
  }
  if (how === 'priming') {
    sse(res);
    return res.end(`id: prime-${state.requests.length}\nretry: 100\ndata:\n\n`);
  }
  res.writeHead(405, { Allow: 'POST, DELETE' });
  return res.end();
}

// ---------------------------------------------------------------------------
// tasks-modern: the 2026-07-28 tasks extension (io.modelcontextprotocol/tasks)
// ---------------------------------------------------------------------------
//
// server/discover offers the extension. Tools, each run as a task only when the request declared
// the extension (else -32021 with requiredCapabilities): `slow {text, ms, poll}` completes after
// `ms` (default 600) with "slow done: <text>", polled every `poll` ms (default 100; 0 allowed);
// `ask` waits (input_required, inputRequests { pick: elicitation/create }) until tasks/update
// answers `pick`, then completes with the answer; `fail` ends failed with error -32000 "boom";
// `backwards` answers completed once, then working; `badshape` completes with a result that is
// no tool result; `echo` answers at once even when the extension is declared. tasks/get answers
// the DetailedTask, tasks/update acknowledges, tasks/cancel cancels a task not ended yet;
// an unknown id is -32602, and any tasks/* without the extension declared is -32021. The tasks
// live in the path's state, so a second client process follows the task the first one started.

const TASKS_EXT = 'io.modelcontextprotocol/tasks';
const TASK_TOOLS = [
  { name: 'slow', description: 'Slow', inputSchema: { type: 'object' }, execution: { taskSupport: 'optional' } },
  { name: 'ask', description: 'Asks', inputSchema: { type: 'object' }, execution: { taskSupport: 'required' } },
  { name: 'fail', description: 'Fails', inputSchema: { type: 'object' }, execution: { taskSupport: 'optional' } },
  { name: 'backwards', description: 'Back', inputSchema: { type: 'object' }, execution: { taskSupport: 'optional' } },
  { name: 'badshape', description: 'Bad', inputSchema: { type: 'object' }, execution: { taskSupport: 'optional' } },
  { name: 'echo', description: 'Echoes text', inputSchema: { type: 'object' } },
];

function tasksDeclared(msg) {
  const meta = msg && typeof msg === 'object' && msg.params && msg.params._meta;
  const caps = meta && meta['io.modelcontextprotocol/clientCapabilities'];
  return Boolean(caps && caps.extensions && caps.extensions[TASKS_EXT]);
}

function rpcError(res, id, code, message, data) {
  return json(res, 200, { jsonrpc: '2.0', id, error: data ? { code, message, data } : { code, message } });
}

function missingCapability(res, id) {
  return rpcError(res, id, -32021, 'Missing required client capability',
    { requiredCapabilities: { extensions: { [TASKS_EXT]: {} } } });
}

function taskView(t) {
  const view = { taskId: t.taskId, status: t.status, createdAt: t.createdAt, lastUpdatedAt: t.lastUpdatedAt,
    ttlMs: 60000, pollIntervalMs: t.poll };
  if (t.status === 'completed') view.result = t.result;
  if (t.status === 'failed') view.error = t.error;
  if (t.status === 'input_required') view.inputRequests = t.inputRequests;
  return view;
}

function startTask(state, name, args) {
  state.tasks = state.tasks || new Map();
  const taskId = `task-${state.tasks.size + 1}-${Math.random().toString(36).slice(2, 8)}`;
  const stamp = new Date().toISOString();
  const t = { taskId, name, status: 'working', createdAt: stamp, lastUpdatedAt: stamp,
    poll: Number.isInteger(args.poll) ? args.poll : 100, gets: 0 };
  const finish = (status, field, value) => {
    if (t.status === 'cancelled') return;
    t.status = status;
    t.lastUpdatedAt = new Date().toISOString();
    if (field) t[field] = value;
  };
  t.finish = finish;
  if (name === 'slow') setTimeout(() => finish('completed', 'result', text(`slow done: ${args.text ?? ''}`)), args.ms ?? 600);
  if (name === 'ask') {
    t.status = 'input_required';
    t.inputRequests = { pick: { method: 'elicitation/create', params: { message: 'Pick a colour',
      requestedSchema: { type: 'object', properties: { colour: { type: 'string' } } } } } };
  }
  if (name === 'fail') setTimeout(() => finish('failed', 'error', { code: -32000, message: 'boom' }), 100);
  if (name === 'backwards') setTimeout(() => finish('completed', 'result', text('once')), 100);
  if (name === 'badshape') setTimeout(() => finish('completed', 'result', 'not an object'), 100);
  state.tasks.set(taskId, t);
  return t;
}

function tasksModern(req, res, msg, state) {
  const declared = tasksDeclared(msg);
  const params = msg.params || {};
  if (msg.method === 'tools/list') return json(res, 200, result(msg.id, { tools: TASK_TOOLS, resultType: 'complete' }));
  if (msg.method === 'tools/call') {
    if (params.name === 'echo') return json(res, 200, result(msg.id, { ...text(`echo: ${(params.arguments || {}).text ?? ''}`), resultType: 'complete' }));
    if (!declared) return missingCapability(res, msg.id);
    const t = startTask(state, params.name, params.arguments || {});
    const { result: _r, error: _e, inputRequests: _i, ...created } = taskView(t);
    return json(res, 200, result(msg.id, { resultType: 'task', ...created }));
  }
  if (!String(msg.method).startsWith('tasks/')) return undefined;
  if (!declared) return missingCapability(res, msg.id);
  const t = state.tasks && state.tasks.get(params.taskId);
  if (!t) return rpcError(res, msg.id, -32602, 'Unknown task');
  if (msg.method === 'tasks/get') {
    t.gets++;
    if (t.name === 'backwards' && t.status === 'completed') {
      if (t.toldCompleted) t.status = 'working';
      t.toldCompleted = true;
    }
    return json(res, 200, result(msg.id, { resultType: 'complete', ...taskView(t) }));
  }
  if (msg.method === 'tasks/update') {
    const answer = params.inputResponses && params.inputResponses.pick;
    if (t.status === 'input_required' && answer) {
      t.answers = (t.answers || 0) + 1;
      t.finish('completed', 'result', text(`picked: ${JSON.stringify(answer)}`));
    }
    return json(res, 200, result(msg.id, { resultType: 'complete' }));
  }
  if (msg.method === 'tasks/cancel') {
    if (!['completed', 'failed', 'cancelled'].includes(t.status)) t.finish('cancelled');
    return json(res, 200, result(msg.id, { resultType: 'complete' }));
  }
  return rpcError(res, msg.id, -32601, 'Method not found');
}

// ---------------------------------------------------------------------------
// The MCP side
// ---------------------------------------------------------------------------

function mcp(req, res, body, url) {
  const mode = url.pathname.split('/')[1];
  const state = stateOf(url.pathname);
  let msg = null;
  if (req.method === 'POST') {
    try {
      msg = JSON.parse(body.toString('utf8'));
    } catch {
      record(state, req, null);
      return json(res, 400, { jsonrpc: '2.0', id: null, error: { code: -32700, message: 'Parse error' } });
    }
  }
  record(state, req, msg);
  if (req.method === 'GET') {
    if (mode === 'priming-only') return resume(req, res, state, url);
    if (mode === 'reset-mid-stream') return resume(req, res, state, new URL('/?resume=stream', 'http://127.0.0.1'));
    if (GET_MODES.has(mode)) return standaloneGet(req, res, state);
    res.writeHead(405, { Allow: 'POST' });
    return res.end();
  }
  if (req.method === 'DELETE') {
    res.writeHead(SESSION_MODES.has(mode) ? 200 : 405);
    return res.end();
  }
  if (req.method !== 'POST' || !msg || typeof msg !== 'object') {
    res.writeHead(405);
    return res.end();
  }
  if (sessionRefused(req, res, mode, state, msg)) return undefined;
  if (mode === 'stall-cancel' && msg.method === 'notifications/cancelled') return undefined;
  if (msg.method === 'notifications/cancelled' && state.tool && msg.params && msg.params.requestId === state.tool.id) {
    state.tool.cancel_ns = state.tool.cancel_ns || now();
    state.tool.stop('notice');
  }
  if (MODERN_MODES.has(mode) && msg.method === 'server/discover') {
    state.modern = true;
    const capabilities = mode === 'tasks-modern' ? { tools: {}, extensions: { [TASKS_EXT]: {} } } : { tools: {} };
    return json(res, 200, result(msg.id, { supportedVersions: [MODERN], capabilities,
      resultType: 'complete', _meta: { 'io.modelcontextprotocol/serverInfo': { name: 'hostile', version: '1.0' } } }));
  }
  if (MODERN_MODES.has(mode) && msg.method === 'initialize') {
    return json(res, 400, { jsonrpc: '2.0', id: msg.id, error: { code: -32601, message: 'Method not found' } });
  }
  if (msg.method === undefined && msg.id !== undefined) {  // the client answers a server request
    res.writeHead(202);
    res.end();
    if (state.waiting) state.waiting();
    return undefined;
  }
  if (msg.id === undefined) {
    res.writeHead(202);
    return res.end();
  }
  if (mode === 'tasks-modern') {
    const answered = tasksModern(req, res, msg, state);
    if (answered !== undefined || res.headersSent) return answered;
  }
  switch (msg.method) {
    case 'initialize':
      return initialize(req, res, mode, state, msg);
    case 'ping':
      return json(res, 200, result(msg.id, {}));
    case 'tools/list':
      if (mode === 'huge-list') return json(res, 200, hugePage(msg.id));
      return json(res, 200, result(msg.id, { tools: TOOLS }));
    case 'tools/call': {
      const name = msg.params && msg.params.name;
      const args = (msg.params && msg.params.arguments) || {};
      if (name === 'hostile' && MODES[mode]) return MODES[mode](req, res, msg, state, url);
      if (name === 'forget') {
        json(res, 200, result(msg.id, text('forgotten')));
        state.sessions.clear();
        return undefined;
      }
      return json(res, 200, result(msg.id, text(`echo: ${args.text ?? ''}`)));
    }
    default:
      return json(res, 200, { jsonrpc: '2.0', id: msg.id, error: { code: -32601, message: 'Method not found' } });
  }
}

function control(res, url) {
  const s = stateOf(url.searchParams.get('path') || '/');
  const tool = s.tool ? { ...s.tool, stop: undefined } : null;
  const view = { initializes: s.initializes, requests: s.requests, sessions: s.sessions.size, other, tool, now: now(),
    gets: s.gets || 0, progress_sent: s.progress_sent ?? null, forged_sent: s.forged_sent ?? false };
  return json(res, 200, view);
}

function handler(req, res) {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    const url = new URL(req.url, 'http://127.0.0.1');
    if (url.pathname === '/_state') return control(res, url);
    return mcp(req, res, Buffer.concat(chunks), url);
  });
}

function tuned(srv) {
  srv.keepAliveTimeout = 60000;
  srv.headersTimeout = 0;
  srv.requestTimeout = 0;
  return srv;
}

// The redirect target: any contact at all is recorded, with its Authorization header.
const target = tuned(http.createServer((req, res) => {
  other.contacts.push({ method: req.method, url: req.url, authorization: req.headers.authorization ?? null });
  req.resume();
  req.on('end', () => json(res, 200, { jsonrpc: '2.0', id: 1, result: text('redirect target') }));
}));

function listen(srv, port) {
  return new Promise((resolve, reject) => {
    srv.once('error', reject);
    srv.listen(port, '127.0.0.1', () => resolve(srv.address().port));
  });
}

const server = tuned(options.cert
  ? https.createServer({
    cert: fs.readFileSync(options.cert),
    key: fs.readFileSync(options.key),
    ...(options.ca ? { ca: fs.readFileSync(options.ca) } : {}),
    requestCert: Boolean(options.requireClientCert),
    rejectUnauthorized: Boolean(options.requireClientCert),
  }, handler)
  : http.createServer(handler));

other.port = await listen(target, 0);
const port = await listen(server, options.port);
process.stdout.write(`listening ${port}\n`);
