// The official TypeScript SDK client under benchmark (bench/run.lua starts it; it is not a test):
// Client + StreamableHTTPClientTransport from spec/peers/node_modules, the peer a user would
// otherwise pick, so the baseline every figure of ours is compared with.
//
//   node bench/sdk_client.mjs --url URL [--mode warm|cold|list|cancel] [--calls N] [--warmup W]
//        [--message TEXT] [--slow-ms MS] [--cancel-min-ms A] [--cancel-max-ms B] [--seed S]
//        [--walk pages|whole]
//
//   warm    one connection; W untimed calls, then N timed sequential callTool echo {message}.
//   cold    N times: new Client + transport, connect (initialize, initialized), callTool, then
//           terminateSession when there is a session (as mcpclient's close DELETEs) and close.
//   list    one connection; W untimed, then N timed listings of the whole catalogue (listTools
//           page after page, following nextCursor; the SDK validates each page itself). --walk
//           pages (the default): each page's tools counted and dropped; whole: every page's tools
//           collected into one array, held until the listing ends (as mcpclient's list_tools).
//   cancel  one connection; N callTool `slow` (MS ms) with an AbortSignal aborted by a timer
//           drawn uniformly in [A, B] ms; measured: abort() to the callTool promise settling.
//
// Prints one JSON line with the fields bench/mcpclient_client.lua prints: client, mode, n,
// wall_s, ops_per_s, p50_ms, p99_ms, max_ms, cpu_s, cpu_per_op_us (process.cpuUsage over the
// timed part: user + system, every thread), peak_rss_kb (process.resourceUsage().maxRSS),
// startup_cpu_ms (process CPU once the SDK is imported), errors, tools and rss_before_kb
// (process.memoryUsage().rss right before the first listing) for list, and samples (cancel: every
// latency in ms, ";"-separated).
import { performance } from 'node:perf_hooks';

const sdk = new URL('../spec/peers/node_modules/@modelcontextprotocol/sdk/dist/esm/', import.meta.url);
const { Client } = await import(new URL('client/index.js', sdk));
const { StreamableHTTPClientTransport } = await import(new URL('client/streamableHttp.js', sdk));
const startupCpu = process.cpuUsage();
const startupCpuMs = (startupCpu.user + startupCpu.system) / 1000;

function usage(why) {
  process.stderr.write(`sdk_client: ${why}\n`);
  process.exit(2);
}

const opts = {
  url: null, mode: 'warm', calls: 1000, warmup: 50, message: 'hello', slowMs: 2000,
  cancelMinMs: 10, cancelMaxMs: 60, seed: 1, walk: 'pages',
};
const numeric = new Set(['calls', 'warmup', 'slowMs', 'cancelMinMs', 'cancelMaxMs', 'seed']);
{
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i += 2) {
    const m = /^--([\w-]+)$/.exec(argv[i]);
    if (!m || argv[i + 1] === undefined) usage(`bad arguments near ${argv[i]}`);
    const key = m[1].replace(/-(\w)/g, (_, c) => c.toUpperCase());
    if (!(key in opts)) usage(`unknown option ${argv[i]}`);
    let value = argv[i + 1];
    if (numeric.has(key)) {
      value = Number(value);
      if (!Number.isInteger(value) || value < 0) usage(`${argv[i]} needs a non-negative integer`);
    }
    opts[key] = value;
  }
  if (!opts.url) usage('--url is required');
  if (opts.walk !== 'pages' && opts.walk !== 'whole') usage('--walk must be pages or whole');
}

// A small seeded generator (mulberry32), so runs draw the same cancel points as each other.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

let errors = 0;
let firstError;
function noteError(e) {
  errors += 1;
  if (firstError === undefined) firstError = e instanceof Error ? e.message : String(e);
}

async function connect() {
  const client = new Client({ name: 'bench', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(opts.url));
  await client.connect(transport);
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
    const text = result?.content?.[0]?.text;
    if (result.isError || typeof text !== 'string' || !text.includes(opts.message)) {
      noteError(`unexpected answer: ${JSON.stringify(result)}`);
    }
  } catch (e) {
    noteError(e);
  }
}

const latencies = [];
const extra = {};
const n = opts.calls;
let cpu0;
let t0;

if (opts.mode === 'warm') {
  const conn = await connect();
  for (let i = 0; i < opts.warmup; i++) await echoOnce(conn.client);
  cpu0 = process.cpuUsage();
  t0 = performance.now();
  for (let i = 0; i < n; i++) {
    const s = performance.now();
    await echoOnce(conn.client);
    latencies.push(performance.now() - s);
  }
  await disconnect(conn);
} else if (opts.mode === 'cold') {
  cpu0 = process.cpuUsage();
  t0 = performance.now();
  for (let i = 0; i < n; i++) {
    const s = performance.now();
    const conn = await connect();
    await echoOnce(conn.client);
    await disconnect(conn);
    latencies.push(performance.now() - s);
  }
} else if (opts.mode === 'list') {
  const conn = await connect();
  let seen = 0;
  const listing = async () => {
    let cursor;
    let count = 0;
    const held = [];
    for (let page = 0; page < 1000; page++) {
      const result = await conn.client.listTools(cursor === undefined ? undefined : { cursor });
      count += result.tools.length;
      if (opts.walk === 'whole') held.push(...result.tools);
      cursor = result.nextCursor;
      if (!cursor) break;
    }
    seen = opts.walk === 'whole' ? held.length : count;
  };
  extra.rss_before_kb = Math.round(process.memoryUsage().rss / 1024);
  try {
    for (let i = 0; i < opts.warmup; i++) await listing();
    cpu0 = process.cpuUsage();
    t0 = performance.now();
    for (let i = 0; i < n; i++) {
      const s = performance.now();
      await listing();
      latencies.push(performance.now() - s);
    }
  } catch (e) {
    noteError(e);
    cpu0 = cpu0 ?? process.cpuUsage();
    t0 = t0 ?? performance.now();
  }
  extra.tools = seen;
  await disconnect(conn);
} else if (opts.mode === 'cancel') {
  const random = rng(opts.seed);
  const conn = await connect();
  for (let i = 0; i < Math.max(1, opts.warmup); i++) await echoOnce(conn.client);
  const args = { ms: opts.slowMs, seconds: opts.slowMs / 1000 };
  cpu0 = process.cpuUsage();
  t0 = performance.now();
  for (let i = 0; i < n; i++) {
    const delay = opts.cancelMinMs + random() * (opts.cancelMaxMs - opts.cancelMinMs);
    const controller = new AbortController();
    let firedAt;
    const timer = setTimeout(() => {
      firedAt = performance.now();
      controller.abort('cancelled by the benchmark');
    }, delay);
    let settled;
    try {
      await conn.client.callTool({ name: 'slow', arguments: args }, undefined, { signal: controller.signal });
      settled = performance.now();
      noteError('the slow call was not cancelled');
    } catch {
      settled = performance.now();
    }
    clearTimeout(timer);
    latencies.push(firedAt === undefined ? 0 : settled - firedAt);
  }
  // The SDK leaves the aborted POSTs open until the server answers them: do not wait for them.
  await conn.client.close();
} else {
  usage('--mode must be warm, cold, list or cancel');
}

const wall = (performance.now() - t0) / 1000;
const cpuDelta = process.cpuUsage(cpu0);
const cpu = (cpuDelta.user + cpuDelta.system) / 1e6;
latencies.sort((a, b) => a - b);
const pct = (p) => {
  if (latencies.length === 0) return 0;
  const k = Math.max(1, Math.min(latencies.length, Math.ceil(p * latencies.length)));
  return latencies[k - 1];
};
const out = {
  client: 'sdk', mode: opts.mode, n,
  wall_s: Number(wall.toFixed(6)), ops_per_s: Number((wall > 0 ? n / wall : 0).toFixed(3)),
  p50_ms: Number(pct(0.5).toFixed(4)), p99_ms: Number(pct(0.99).toFixed(4)), max_ms: Number(pct(1).toFixed(4)),
  cpu_s: Number(cpu.toFixed(6)), cpu_per_op_us: Number((n > 0 ? cpu / n * 1e6 : 0).toFixed(3)),
  peak_rss_kb: process.resourceUsage().maxRSS, startup_cpu_ms: Number(startupCpuMs.toFixed(3)),
  errors, ...extra,
};
// Every latency, so bench/run.lua can pool the runs (with 50 samples, p99 is the maximum).
if (opts.mode === 'cancel') out.samples = latencies.map((v) => v.toFixed(3)).join(';');
process.stdout.write(`${JSON.stringify(out)}\n`);
if (errors > 0) process.stderr.write(`sdk_client: ${errors} errors; the first: ${firstError}\n`);
process.exit(errors > 0 ? 1 : 0);
