// The official TypeScript SDK client issuing calls concurrently (bench/concurrency.lua starts it;
// not a test): one Client + StreamableHTTPClientTransport, W untimed sequential calls, then N
// timed callTool echo {message} with K in flight at once (K workers under Promise.all).
//
//   node bench/sdk_concurrent.mjs --url URL [--calls N] [--concurrency K] [--warmup W]
//
// Prints one JSON line: client, n, concurrency, wall_s, ops_per_s, cpu_s, cpu_per_op_us
// (process.cpuUsage over the timed part, user + system, every thread), peak_rss_kb, errors.
import { performance } from 'node:perf_hooks';

const sdk = new URL('../spec/peers/node_modules/@modelcontextprotocol/sdk/dist/esm/', import.meta.url);
const { Client } = await import(new URL('client/index.js', sdk));
const { StreamableHTTPClientTransport } = await import(new URL('client/streamableHttp.js', sdk));

const opts = { url: null, calls: 2000, concurrency: 8, warmup: 100 };
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i += 2) {
  const key = argv[i].replace(/^--/, '');
  if (!(key in opts)) { process.stderr.write(`sdk_concurrent: unknown option ${argv[i]}\n`); process.exit(2); }
  opts[key] = key === 'url' ? argv[i + 1] : Number(argv[i + 1]);
}
if (!opts.url) { process.stderr.write('sdk_concurrent: --url is required\n'); process.exit(2); }

const client = new Client({ name: 'bench', version: '1.0.0' });
await client.connect(new StreamableHTTPClientTransport(new URL(opts.url)));
let errors = 0;
const call = async () => {
  try {
    const r = await client.callTool({ name: 'echo', arguments: { message: 'hello' } });
    if (r.isError) errors++;
  } catch { errors++; }
};
for (let i = 0; i < opts.warmup; i++) await call();

let issued = 0;
const worker = async () => { while (issued < opts.calls) { issued++; await call(); } };
const cpu0 = process.cpuUsage();
const t0 = performance.now();
await Promise.all(Array.from({ length: opts.concurrency }, worker));
const wall = (performance.now() - t0) / 1000;
const cpu = process.cpuUsage(cpu0);
const cpuS = (cpu.user + cpu.system) / 1e6;
process.stdout.write(JSON.stringify({
  client: 'sdk', n: opts.calls, concurrency: opts.concurrency, wall_s: wall, ops_per_s: opts.calls / wall,
  cpu_s: cpuS, cpu_per_op_us: cpuS * 1e6 / opts.calls, peak_rss_kb: process.resourceUsage().maxRSS, errors,
}) + '\n');
await client.close();
process.exit(0);
