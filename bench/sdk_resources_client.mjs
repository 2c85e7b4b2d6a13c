// The official TypeScript SDK client (v1, @modelcontextprotocol/sdk) in the resource-listing
// benchmark (bench/resources.lua starts it; it is not a test).
//
//   node bench/sdk_resources_client.mjs --url URL [--lists N] [--warmup W] [--walk whole|pages]
//   One connection; W untimed, then N timed listings: listResources page after page, following
//   nextCursor (the SDK validates each page itself); whole (the default): every resource kept in
//   one array, dropped after the listing; pages: each page counted and dropped.
//
// Prints one JSON line with the fields bench/resources_client.lua prints (cpu from
// process.cpuUsage, every thread; peak_rss_kb from process.resourceUsage().maxRSS).
import { performance } from 'node:perf_hooks';

const sdk = new URL('../spec/peers/node_modules/@modelcontextprotocol/sdk/dist/esm/', import.meta.url);
const { Client } = await import(new URL('client/index.js', sdk));
const { StreamableHTTPClientTransport } = await import(new URL('client/streamableHttp.js', sdk));

const opts = { url: null, lists: 5, warmup: 1, walk: 'whole' };
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i += 2) {
  const key = /^--(url|lists|warmup|walk)$/.exec(argv[i])?.[1];
  if (!key || argv[i + 1] === undefined) {
    process.stderr.write(`sdk_resources_client: bad arguments near ${argv[i]}\n`);
    process.exit(2);
  }
  opts[key] = key === 'url' || key === 'walk' ? argv[i + 1] : Number(argv[i + 1]);
}

const client = new Client({ name: 'bench', version: '1.0' });
await client.connect(new StreamableHTTPClientTransport(new URL(opts.url)));
const rssBefore = Math.round(process.memoryUsage().rss / 1024);
let count = 0;
async function listOnce() {
  const all = [];
  let cursor;
  let listed = 0;
  do {
    const page = await client.listResources(cursor === undefined ? {} : { cursor });
    if (opts.walk === 'pages') listed += page.resources.length;
    else for (const r of page.resources) all.push(r);
    cursor = page.nextCursor;
  } while (cursor !== undefined);
  count = opts.walk === 'pages' ? listed : all.length;
}
for (let i = 0; i < opts.warmup; i++) await listOnce();
const cpu0 = process.cpuUsage();
const t0 = performance.now();
for (let i = 0; i < opts.lists; i++) await listOnce();
const cpu = process.cpuUsage(cpu0);
const wall = (performance.now() - t0) / 1000;
await client.close();
const cpuS = (cpu.user + cpu.system) / 1e6;
process.stdout.write(JSON.stringify({ client: 'sdk', walk: opts.walk, n: opts.lists, resources: count, cpu_s: cpuS,
  cpu_per_list_ms: cpuS / opts.lists * 1000, wall_s: wall, peak_rss_kb: process.resourceUsage().maxRSS,
  rss_before_kb: rssBefore }) + '\n');
