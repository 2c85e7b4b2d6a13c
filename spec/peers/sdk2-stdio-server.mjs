// The official TypeScript SDK v2 (@modelcontextprotocol/server 2.4.0) over stdio: serveStdio
// decides the era from the opening (server/discover: 2026-07-28; initialize: the 2025 era). A peer
// nobody here wrote, for the 2026-07-28 stdio binding.
//
// usage: node spec/peers/sdk2-stdio-server.mjs
//   tools: echo {message} -> "Echo: <message>", add {a, b} -> "<a+b>", slow {ms} -> "slept"
//   (stops early when the client cancels it, and then appends "aborted slow" to the file
//   named by PEER_LOG, when set).
import fs from 'node:fs';
import { McpServer } from '@modelcontextprotocol/server';
import { serveStdio } from '@modelcontextprotocol/server/stdio';
import { z } from 'zod';

const text = (t) => ({ type: 'text', text: t });

serveStdio(() => {
  const server = new McpServer({ name: 'mcpclient-sdk2-stdio-peer', version: '2.0.0' },
    { capabilities: { tools: {} } });
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
});
