// Preload for `node --import ./loopback.mjs …`: every net.Server (hence every http.Server and
// express app) that listens without naming a host binds 127.0.0.1 instead of every interface.
// The peers we start (server-everything, the conformance harness's test servers) call
// listen(port) with no host; test traffic must never be reachable from outside the machine.
//
// Forms handled: listen(), listen(cb), listen(port[, backlog][, cb]), listen("3001"[, cb]),
// listen({ port }[, cb]) and listen({}) — the host is added only when none is given. Pipes
// (a non-numeric string path, { path }) and inherited handles ({ fd }, { handle }, a handle
// object) are left alone: they are not TCP binds.
import net from 'node:net';
import dns from 'node:dns';

const LOOPBACK = '127.0.0.1';
const original = net.Server.prototype.listen;
const realLookup = dns.lookup;

function isPort(value) {
  if (value === undefined || value === null) return true;
  if (typeof value === 'number') return true;
  return typeof value === 'string' && value.trim() !== '' && !Number.isNaN(Number(value));
}

function withHost(args) {
  if (args.length === 0 || typeof args[0] === 'function') {
    return [0, LOOPBACK, ...args];
  }
  const first = args[0];
  if (typeof first === 'object' && first !== null) {
    const isHandle = 'path' in first || 'fd' in first || 'handle' in first || '_handle' in first;
    if (isHandle || (first.host !== undefined && first.host !== null)) return args;
    return [{ ...first, host: LOOPBACK }, ...args.slice(1)];
  }
  if (!isPort(first)) return args;
  // listen(port, host, …): a string second argument is the host.
  if (typeof args[1] === 'string') return args;
  // listen(port, undefined, cb): an explicitly absent host is replaced, not shifted.
  if (args.length > 1 && (args[1] === undefined || args[1] === null)) {
    return [first, LOOPBACK, ...args.slice(2)];
  }
  return [first, LOOPBACK, ...args.slice(1)];
}

// Node binds synchronously when no host is given but resolves a given host with dns.lookup
// first, so address() is null right after listen(0, host) — and callers written for the
// host-less form read it at once (the conformance suite's tools_call server does
// `app.listen(0).address().port`). For the host we add, answer that one lookup synchronously
// (only during this call: dns.lookup is restored before listen returns), so the bind is
// synchronous as the caller expects.
function loopbackLookup(hostname, options, callback) {
  const cb = typeof options === 'function' ? options : callback;
  if (hostname !== LOOPBACK || typeof cb !== 'function') {
    return realLookup.call(dns, hostname, options, callback);
  }
  if (options && typeof options === 'object' && options.all) {
    cb(null, [{ address: LOOPBACK, family: 4 }]);
  } else {
    cb(null, LOOPBACK, 4);
  }
  return undefined;
}

net.Server.prototype.listen = function listen(...args) {
  const changed = withHost(args);
  if (changed === args) return original.apply(this, args);
  dns.lookup = loopbackLookup;
  try {
    return original.apply(this, changed);
  } finally {
    dns.lookup = realLookup;
  }
};

// With MCP_PEER_EXIT_WITH_PARENT=1 (spec/support/peers.lua sets it), the process ends when the
// process that started it is gone (its parent PID changes), so a test run that dies without
// stopping its peers leaves no server behind.
if (process.env.MCP_PEER_EXIT_WITH_PARENT === '1') {
  const parent = process.ppid;
  setInterval(() => {
    if (process.ppid !== parent) process.exit(0);
  }, 500).unref();
}
