// A fastmcp server (the TypeScript framework, 4.20), bound to 127.0.0.1, endpoint /mcp. A framework
// server nobody here wrote, of the 2025 era, in either of fastmcp's HTTP modes.
//
// usage: node spec/peers/fastmcp-server.mjs --mode stateful|stateless --port N
//   Prints exactly one line `listening <port>` on stdout once it accepts connections.
//   stateful:  sessions (Mcp-Session-Id), event-stream answers, a standalone GET stream on which
//              fastmcp sends its log notices (they are not tied to a request).
//   stateless: no session; every POST stands alone.
// Tools: echo, add, slow (stops early when the call is cancelled), count (progress 1..steps on the
// call's stream), chatty (log notices at four levels, one carrying control characters), image.
import { FastMCP, imageContent } from 'fastmcp';
import { z } from 'zod';

function parseArgs(argv) {
  const opts = { mode: null, port: null };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--mode') opts.mode = argv[++i];
    else if (a === '--port') opts.port = Number(argv[++i]);
    else throw new Error(`unknown argument ${a}`);
  }
  if (!['stateful', 'stateless'].includes(opts.mode)) throw new Error('--mode must be stateful or stateless');
  if (!Number.isInteger(opts.port) || opts.port < 1 || opts.port > 65535) {
    throw new Error('--port must be an integer 1..65535');
  }
  return opts;
}

let opts;
try {
  opts = parseArgs(process.argv.slice(2));
} catch (err) {
  process.stderr.write(`fastmcp-server: ${err.message}\n`);
  process.exit(2);
}

const sleep = (ms, signal) => new Promise((resolve) => {
  const timer = setTimeout(done, ms);
  function done() { clearTimeout(timer); if (signal) signal.removeEventListener('abort', done); resolve(); }
  if (signal) {
    if (signal.aborted) done(); else signal.addEventListener('abort', done);
  }
});

// A 1x1 PNG.
const PIXEL = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==';

// fastmcp's own console logger would write every session event to stdout: keep stdout to the one line.
const quiet = { debug() {}, error() {}, info() {}, log() {}, warn() {} };
const server = new FastMCP({ name: 'mcpclient-fastmcp-peer', version: '4.20.0', logger: quiet });

server.addTool({
  name: 'echo',
  description: 'Returns "Echo: <message>".',
  parameters: z.object({ message: z.string() }),
  execute: async ({ message }) => `Echo: ${message}`,
});

server.addTool({
  name: 'add',
  description: 'Adds two numbers.',
  parameters: z.object({ a: z.number(), b: z.number() }),
  execute: async ({ a, b }) => String(a + b),
});

server.addTool({
  name: 'slow',
  description: 'Waits the given seconds (stops early when the call is cancelled).',
  parameters: z.object({ seconds: z.number() }),
  execute: async ({ seconds }, { signal }) => {
    await sleep(seconds * 1000, signal);
    return signal.aborted ? 'aborted' : `slept ${seconds}`;
  },
});

server.addTool({
  name: 'count',
  description: 'Reports progress 1..steps (of steps), then answers "counted <steps>".',
  parameters: z.object({ steps: z.number().int().min(1).max(50) }),
  execute: async ({ steps }, { reportProgress }) => {
    for (let i = 1; i <= steps; i++) {
      await reportProgress({ progress: i, total: steps });
      await sleep(5);
    }
    return `counted ${steps}`;
  },
});

server.addTool({
  name: 'chatty',
  description: 'Sends log notices (debug, info, warn, error), then answers "logged".',
  parameters: z.object({}),
  execute: async (_args, { log }) => {
    log.debug('debugging', { step: 1 });
    log.info('hello from fastmcp');
    log.warn('careful\u001b[31m\u202e now');
    log.error('it broke', { code: 7 });
    await sleep(200);
    return 'logged';
  },
});

server.addTool({
  name: 'image',
  description: 'A text block and a 1x1 PNG.',
  parameters: z.object({}),
  execute: async () => ({
    content: [{ type: 'text', text: 'a pixel' }, await imageContent({ buffer: Buffer.from(PIXEL, 'base64') })],
  }),
});

await server.start({
  transportType: 'httpStream',
  httpStream: { port: opts.port, host: '127.0.0.1', endpoint: '/mcp', stateless: opts.mode === 'stateless' },
});
process.stdout.write(`listening ${opts.port}\n`);

for (const sig of ['SIGTERM', 'SIGINT']) {
  process.on(sig, () => {
    server.stop().finally(() => process.exit(0));
    setTimeout(() => process.exit(0), 500).unref();
  });
}
