// The official TypeScript SDK clients over stdio, under benchmark (bench/stdio.lua starts it; it
// is not a test): v1 (@modelcontextprotocol/sdk, Client + StdioClientTransport) or v2
// (@modelcontextprotocol/client, Client + StdioClientTransport from its ./stdio), each spawning
// the same server as mcpclient does.
//
//   node bench/sdk_stdio_client.mjs --sdk 1|2 [--calls N] [--warmup W] [--era legacy|modern] -- ARGV...
//
// One connection: the time from start() to the first answer of one callTool echo (spawn, opening,
// call), then W untimed calls and N timed sequential callTool echo {message}. Prints one JSON
// line: client, n, wall_s, wall_per_op_us, cpu_s, cpu_per_op_us (process.cpuUsage over the timed
// part, user + system), peak_rss_kb (process.resourceUsage().maxRSS), first_answer_ms, errors.
import { performance } from 'node:perf_hooks';

const args = process.argv.slice(2);
const split = args.indexOf('--');
if (split < 0 || split === args.length - 1) {
  process.stderr.write('sdk_stdio_client: give the server argv after --\n');
  process.exit(2);
}
const argv = args.slice(split + 1);
const opts = { sdk: '1', calls: 2000, warmup: 200, era: 'legacy' };
for (let i = 0; i < split; i += 2) {
  const key = args[i].replace(/^--/, '');
  if (!(key in opts) || args[i + 1] === undefined) {
    process.stderr.write(`sdk_stdio_client: bad argument ${args[i]}\n`);
    process.exit(2);
  }
  opts[key] = key === 'calls' || key === 'warmup' ? Number(args[i + 1]) : args[i + 1];
}

let Client;
let StdioClientTransport;
if (opts.sdk === '1') {
  const sdk = new URL('../spec/peers/node_modules/@modelcontextprotocol/sdk/dist/esm/', import.meta.url);
  ({ Client } = await import(new URL('client/index.js', sdk)));
  ({ StdioClientTransport } = await import(new URL('client/stdio.js', sdk)));
} else {
  const dist = new URL('../spec/peers/node_modules/@modelcontextprotocol/client/dist/', import.meta.url);
  ({ Client } = await import(new URL('index.mjs', dist)));
  ({ StdioClientTransport } = await import(new URL('stdio.mjs', dist)));
}

let errors = 0;
let firstError;
async function echo(client) {
  try {
    const result = await client.callTool({ name: 'echo', arguments: { message: 'hello' } });
    if (result.isError || result?.content?.[0]?.text !== 'Echo: hello') {
      errors += 1;
      firstError ??= JSON.stringify(result);
    }
  } catch (e) {
    errors += 1;
    firstError ??= e instanceof Error ? e.message : String(e);
  }
}

const started = performance.now();
const clientOptions = opts.era === 'modern' ? { versionNegotiation: { mode: { pin: '2026-07-28' } } } : undefined;
const client = new Client({ name: 'bench', version: '1.0.0' }, clientOptions);
const transport = new StdioClientTransport({ command: argv[0], args: argv.slice(1), stderr: 'ignore' });
await client.connect(transport);
await echo(client);
const firstAnswerMs = performance.now() - started;
for (let i = 0; i < opts.warmup; i++) await echo(client);
const cpu0 = process.cpuUsage();
const t0 = performance.now();
for (let i = 0; i < opts.calls; i++) await echo(client);
const wall = (performance.now() - t0) / 1000;
const cpu = process.cpuUsage(cpu0);
await client.close();
const cpuS = (cpu.user + cpu.system) / 1e6;
process.stdout.write(JSON.stringify({
  client: `sdk${opts.sdk === '1' ? '' : '2'}-stdio`, era: opts.era, n: opts.calls, wall_s: wall,
  wall_per_op_us: (wall / opts.calls) * 1e6, cpu_s: cpuS, cpu_per_op_us: (cpuS / opts.calls) * 1e6,
  peak_rss_kb: process.resourceUsage().maxRSS, first_answer_ms: firstAnswerMs, errors, first_error: firstError,
}) + '\n');
