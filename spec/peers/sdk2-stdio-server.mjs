// The official TypeScript SDK v2 (@modelcontextprotocol/server 2.4.0) over stdio: serveStdio
// decides the era from the opening (server/discover: 2026-07-28; initialize: the 2025 era). A peer
// nobody here wrote, for the 2026-07-28 stdio binding.
//
// usage: node spec/peers/sdk2-stdio-server.mjs
//   tools: echo {message} -> "Echo: <message>", add {a, b} -> "<a+b>", slow {ms} -> "slept"
//   (stops early when the client cancels it, and then appends "aborted slow" to the file
//   named by PEER_LOG, when set), touch {after?} -> "touched" (sends resources/list_changed and
//   resources/updated for doc://readme, at once or, with after, that many ms after its answer: in the 2026-07-28 era serveStdio delivers them on each
//   open subscriptions/listen that asked for them, stamped with its subscriptionId; in the 2025
//   era they go to stdout as they are; once those sent after the answer are written, "sent after"
//   is appended to the file named by PEER_LOG, when set, so a spec waits for them, not for time).
//   resources: doc://readme (text); capabilities resources.subscribe and listChanged (in the 2025
//   era resources/subscribe and unsubscribe are answered {}).
//   PEER_WIRE_LOG, when set, names a file that gets one line per message the client writes,
//   before serveStdio sees it: `<method> <id>` for a request, `<method> <params.requestId|->` for
//   a notification.
import fs from 'node:fs';
import { McpServer } from '@modelcontextprotocol/server';
import { serveStdio, StdioServerTransport } from '@modelcontextprotocol/server/stdio';
import { z } from 'zod';

const text = (t) => ({ type: 'text', text: t });

// The wire, its incoming messages logged (PEER_WIRE_LOG) on their way to serveStdio's handler.
const wire = new StdioServerTransport();
if (process.env.PEER_WIRE_LOG) {
  let handler;
  Object.defineProperty(wire, 'onmessage', {
    get: () => handler,
    set: (fn) => {
      handler = fn && ((message, extra) => {
        const tag = message.id !== undefined ? message.id : (message.params?.requestId ?? '-');
        fs.appendFileSync(process.env.PEER_WIRE_LOG, `${message.method ?? 'response'} ${tag}\n`);
        return fn(message, extra);
      });
    },
  });
}

serveStdio(() => {
  const server = new McpServer({ name: 'mcpclient-sdk2-stdio-peer', version: '2.0.0' },
    { capabilities: { tools: {}, resources: { subscribe: true, listChanged: true } } });
  server.registerResource('readme', 'doc://readme', { mimeType: 'text/markdown' }, async (uri) => ({
    contents: [{ uri: uri.href, mimeType: 'text/markdown', text: '# Peer\nA stdio test server.' }],
  }));
  // the 2025 era's resources/subscribe and unsubscribe (the 2026-07-28 era has subscriptions/listen)
  server.server.setRequestHandler('resources/subscribe', async () => ({}));
  server.server.setRequestHandler('resources/unsubscribe', async () => ({}));
  server.registerTool('touch', {
    description: 'Sends resources/list_changed and resources/updated for doc://readme.',
    inputSchema: z.object({ after: z.number().optional() }),
  }, async ({ after }) => {
    const send = async () => {
      await server.server.sendResourceListChanged();
      await server.server.sendResourceUpdated({ uri: 'doc://readme' });
    };
    const said = () => { if (process.env.PEER_LOG) fs.appendFileSync(process.env.PEER_LOG, 'sent after\n'); };
    if (after) setTimeout(() => { send().then(said).catch(() => {}); }, after);
    else await send();
    return { content: [text('touched')] };
  });
  server.registerTool('echo', {
    description: 'Returns "Echo: <message>".',
    inputSchema: z.object({ message: z.string() }),
  }, async ({ message }) => ({ content: [text(`Echo: ${message}`)] }));
  server.registerTool('add', {
    description: 'Adds two numbers.',
    inputSchema: z.object({ a: z.number(), b: z.number() }),
  }, async ({ a, b }) => ({ content: [text(String(a + b))] }));
  server.registerTool('slow', {
    description: 'Answers after ms milliseconds.',
    inputSchema: z.object({ ms: z.number() }),
  }, async ({ ms }, ctx) => {
    const signal = ctx.mcpReq.signal;
    await new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      signal.addEventListener('abort', () => {
        clearTimeout(timer);
        if (process.env.PEER_LOG) fs.appendFileSync(process.env.PEER_LOG, 'aborted slow\n');
        resolve();
      });
    });
    return { content: [text('slept')] };
  });
  return server;
}, { transport: wire });
