// The official TypeScript SDK v2 client under benchmark (bench/run.lua and bench/modern.lua start
// it; not a test): Client + StreamableHTTPClientTransport from @modelcontextprotocol/client 2.4.0.
// With --negotiation auto (the default) it probes with server/discover first, so against a
// 2026-07-28 server it speaks the modern era and against a 2025 one it falls back to initialize,
// as mcpclient does with its default protocol = "auto".
//
//   node bench/sdk2_client.mjs --url URL [--mode warm|cold|list] [--calls N] [--warmup W]
//        [--message TEXT] [--negotiation auto|legacy] [--walk aggregate|pages]
//
//   warm    one connection; W untimed calls, then N timed sequential callTool echo {message}.
//   cold    N times: new Client + transport, connect, callTool, then terminateSession when there
//           is a session (as mcpclient's close DELETEs) and close.
//   list    one connection; W untimed, then N timed listings of the whole catalogue. --walk
//           aggregate (the default): listTools() with no cursor, the SDK's own walk of every page
//           (what a user calls; it validates each page and keeps the aggregate in its response
//           cache, which cacheMode 'refresh' makes it fetch anew every time). --walk pages:
//           listTools({ cursor }) page after page, as bench/sdk_client.mjs walks the v1 client.
//
// Prints one JSON line with the fields bench/mcpclient_client.lua prints: client, mode, n,
// wall_s, ops_per_s, p50_ms, p99_ms, max_ms, cpu_s, cpu_per_op_us (process.cpuUsage over the
// timed part: user + system, every thread), peak_rss_kb (process.resourceUsage().maxRSS),
// startup_cpu_ms, errors, era (what the client negotiated, on the last connection), and for list:
// tools, walk, rss_before_kb (process.memoryUsage().rss right before the first listing).
import { performance } from 'node:perf_hooks';

const pkg = new URL('../spec/peers/node_modules/@modelcontextprotocol/client/dist/index.mjs', import.meta.url);
const { Client, StreamableHTTPClientTransport } = await import(pkg);
const startupCpu = process.cpuUsage();

function usage(why) {
  process.stderr.write(`sdk2_client: ${why}\n`);
  process.exit(2);
}

const opts = {
  url: null, mode: 'warm', calls: 1000, warmup: 50, message: 'hello', negotiation: 'auto', walk: 'aggregate',
};
const numeric = new Set(['calls', 'warmup']);
const choices = { mode: ['warm', 'cold', 'list'], negotiation: ['auto', 'legacy'], walk: ['aggregate', 'pages'] };
{
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i += 2) {
    const m = /^--([\w-]+)$/.exec(argv[i]);
    if (!m || argv[i + 1] === undefined || !(m[1] in opts)) usage(`bad arguments near ${argv[i]}`);
    let value = argv[i + 1];
    if (numeric.has(m[1])) {
      value = Number(value);
      if (!Number.isInteger(value) || value < 0) usage(`${argv[i]} needs a non-negative integer`);
    }
    if (choices[m[1]] && !choices[m[1]].includes(value)) usage(`${argv[i]} must be ${choices[m[1]].join(' or ')}`);
    opts[m[1]] = value;
  }
  if (!opts.url) usage('--url is required');
}

let errors = 0;
let firstError;
function noteError(e) {
  errors++;
  firstError = firstError ?? (e instanceof Error ? e.message : String(e));
}

let era = 'unknown';

async function connect() {
  // No cap on the pages of one listing: the catalogue's size is the benchmark's to choose.
  const client = new Client({ name: 'bench', version: '1.0.0' },
    { versionNegotiation: { mode: opts.negotiation }, listMaxPages: 0 });
  const transport = new StreamableHTTPClientTransport(new URL(opts.url));
  await client.connect(transport);
  era = String(client.getProtocolEra?.() ?? client.getNegotiatedProtocolVersion?.() ?? 'unknown');
  return { client, transport };
}

async function disconnect({ client, transport }) {
  if (transport.sessionId) {
    try { await transport.terminateSession(); } catch (e) { noteError(e); }
  }
  await client.close();
}

async function echoOnce(client) {
  try {
    const result = await client.callTool({ name: 'echo', arguments: { message: opts.message } });
    const text = result.content?.[0]?.text ?? '';
    if (result.isError || !text.includes(opts.message)) throw new Error(`unexpected answer: ${text}`);
  } catch (err) {
    noteError(err);
  }
}

// One listing of the whole catalogue; returns how many tools it held.
async function listing(client) {
  if (opts.walk === 'aggregate') {
    const result = await client.listTools(undefined, { cacheMode: 'refresh' });
    return result.tools.length;
  }
  let cursor;
  let count = 0;
  for (let page = 0; page < 100000; page++) {
    const result = await client.listTools(cursor === undefined ? undefined : { cursor });
    count += result.tools.length;
    cursor = result.nextCursor;
    if (!cursor) break;
  }
  return count;
}

const latencies = [];
const extra = {};
const n = opts.calls;
let cpu0;
let t0;

// Runs `once` W untimed then N timed times, recording each timed run's latency.
async function timed(once) {
  for (let i = 0; i < opts.warmup; i++) await once();
  cpu0 = process.cpuUsage();
  t0 = performance.now();
  for (let i = 0; i < n; i++) {
    const s = performance.now();
    await once();
    latencies.push(performance.now() - s);
  }
}

if (opts.mode === 'warm') {
  const conn = await connect();
  await timed(() => echoOnce(conn.client));
  await disconnect(conn);
} else if (opts.mode === 'cold') {
  opts.warmup = 0;
  await timed(async () => {
    const conn = await connect();
    await echoOnce(conn.client);
    await disconnect(conn);
  });
} else {
  const conn = await connect();
  extra.rss_before_kb = Math.round(process.memoryUsage().rss / 1024);
  try {
    await timed(async () => { extra.tools = await listing(conn.client); });
  } catch (e) {
    noteError(e);
    cpu0 = cpu0 ?? process.cpuUsage();
    t0 = t0 ?? performance.now();
  }
  extra.walk = opts.walk;
  await disconnect(conn);
}

const wall = (performance.now() - t0) / 1000;
const cpu = process.cpuUsage(cpu0);
const cpuS = (cpu.user + cpu.system) / 1e6;
latencies.sort((a, b) => a - b);
const pct = (p) => (latencies.length ? latencies[Math.max(0, Math.min(latencies.length - 1, Math.ceil(p * latencies.length) - 1))] : 0);
const out = {
  client: 'sdk2', mode: opts.mode, n, wall_s: wall, ops_per_s: wall > 0 ? n / wall : 0,
  p50_ms: pct(0.5), p99_ms: pct(0.99), max_ms: pct(1), cpu_s: cpuS,
  cpu_per_op_us: n > 0 ? (cpuS / n) * 1e6 : 0,
  peak_rss_kb: process.resourceUsage().maxRSS,
  startup_cpu_ms: (startupCpu.user + startupCpu.system) / 1000, errors, era, ...extra,
};
process.stdout.write(`${JSON.stringify(out)}\n`);
if (errors > 0) process.stderr.write(`sdk2_client: ${errors} errors; the first: ${firstError}\n`);
process.exit(errors > 0 ? 1 : 0);
