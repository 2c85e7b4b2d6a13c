// The official TypeScript SDK v2 client under benchmark (bench/modern.lua starts it; not a test):
// Client + StreamableHTTPClientTransport from @modelcontextprotocol/client 2.4.0 with
// versionNegotiation { mode: 'auto' } (server/discover first), so against a 2026-07-28 server it
// speaks the modern era, as mcpclient does with its default protocol = "auto".
//
//   node bench/sdk2_client.mjs --url URL [--calls N] [--warmup W] [--message TEXT]
//
//   One connection; W untimed calls, then N timed sequential callTool echo {message}.
// Prints one JSON line with the fields bench/mcpclient_client.lua prints for warm mode: client,
// mode, n, wall_s, ops_per_s, p50_ms, p99_ms, max_ms, cpu_s, cpu_per_op_us (process.cpuUsage over
// the timed part: user + system, every thread), peak_rss_kb (process.resourceUsage().maxRSS),
// startup_cpu_ms, errors, era (what the client negotiated).
import { performance } from 'node:perf_hooks';

const pkg = new URL('../spec/peers/node_modules/@modelcontextprotocol/client/dist/index.mjs', import.meta.url);
const { Client, StreamableHTTPClientTransport } = await import(pkg);
const startupCpu = process.cpuUsage();

function usage(why) {
  process.stderr.write(`sdk2_client: ${why}\n`);
  process.exit(2);
}

const opts = { url: null, calls: 1000, warmup: 50, message: 'hello' };
{
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i += 2) {
    const m = /^--([\w-]+)$/.exec(argv[i]);
    if (!m || argv[i + 1] === undefined || !(m[1] in opts)) usage(`bad arguments near ${argv[i]}`);
    opts[m[1]] = m[1] === 'url' || m[1] === 'message' ? argv[i + 1] : Number(argv[i + 1]);
  }
  if (!opts.url) usage('--url is required');
}

let errors = 0;
let firstError;
const client = new Client({ name: 'bench', version: '1.0.0' }, { versionNegotiation: { mode: 'auto' } });
await client.connect(new StreamableHTTPClientTransport(new URL(opts.url)));

async function echoOnce() {
  try {
    const result = await client.callTool({ name: 'echo', arguments: { message: opts.message } });
    const text = result.content?.[0]?.text ?? '';
    if (result.isError || !text.includes(opts.message)) throw new Error(`unexpected answer: ${text}`);
  } catch (err) {
    errors++;
    firstError = firstError ?? String(err);
  }
}

for (let i = 0; i < opts.warmup; i++) await echoOnce();
const latencies = [];
const cpu0 = process.cpuUsage();
const t0 = performance.now();
for (let i = 0; i < opts.calls; i++) {
  const s = performance.now();
  await echoOnce();
  latencies.push(performance.now() - s);
}
const wall = (performance.now() - t0) / 1000;
const cpu = process.cpuUsage(cpu0);
const cpuS = (cpu.user + cpu.system) / 1e6;
latencies.sort((a, b) => a - b);
const pct = (p) => (latencies.length ? latencies[Math.max(0, Math.min(latencies.length - 1, Math.ceil(p * latencies.length) - 1))] : 0);
const era = client.getProtocolEra?.() ?? client.getNegotiatedProtocolVersion?.() ?? 'unknown';
await client.close();
const out = {
  client: 'sdk2', mode: 'warm', n: opts.calls, wall_s: wall, ops_per_s: wall > 0 ? opts.calls / wall : 0,
  p50_ms: pct(0.5), p99_ms: pct(0.99), max_ms: pct(1), cpu_s: cpuS,
  cpu_per_op_us: opts.calls > 0 ? (cpuS / opts.calls) * 1e6 : 0,
  peak_rss_kb: process.resourceUsage().maxRSS,
  startup_cpu_ms: (startupCpu.user + startupCpu.system) / 1000, errors, era: String(era),
};
process.stdout.write(`${JSON.stringify(out)}\n`);
if (errors > 0) {
  process.stderr.write(`sdk2_client: ${errors} errors; the first: ${firstError}\n`);
  process.exit(1);
}
