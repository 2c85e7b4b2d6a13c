-- Both protocol eras against the official TypeScript SDK v2 (@modelcontextprotocol/server 2.4.0),
-- started by this spec on 127.0.0.1 and stopped by its PID: the default handler (2026-07-28, and
-- 2025 traffic served statelessly), a modern-only handler (legacy: 'reject'), and the SDK's
-- sessionful 2025 transport. The server's log (spec/peers/sdk2-server.mjs) shows what reached it.
local mcp = require "mcpclient"
local core = require "mcpclient.core"
local peers = require "support.peers"

local function connect(url, extra)
  local options = { url = url, identifier = "peer", health = mcp.health.memory() }
  for k, v in pairs(extra or {}) do options[k] = v end
  return mcp.connect(options)
end

-- Log lines "POST <method> <MCP-Protocol-Version> <Mcp-Method> <Mcp-Name> <envelope version>".
local function wire(peer)
  local lines = {}
  for _, line in ipairs(peer.log_lines()) do
    local method, version, header_method, name, envelope = line:match("^POST (%S+) (%S+) (%S+) (%S+) (%S+)")
    if method then
      lines[#lines + 1] = { method = method, version = version, header_method = header_method, name = name,
        envelope = envelope }
    else
      lines[#lines + 1] = { event = line }
    end
  end
  return lines
end

local function methods(peer)
  local list = {}
  for _, l in ipairs(wire(peer)) do list[#list + 1] = l.method or l.event end
  return list
end

local function has(list, wanted)
  for _, v in ipairs(list) do if v == wanted then return true end end
  return false
end

-- Wait (bounded) until the server logged `wanted`: it returns once it has, so callers give it a
-- generous bound (the machine may be loaded).
local function logged(peer, wanted, seconds)
  local until_t = core.now() + seconds
  repeat
    if has(methods(peer), wanted) then return true end
    core.sleep(0.05)
  until core.now() > until_t
  return false
end

-- A cancel hook that fires `after` seconds from now.
local function cancel_after(after)
  local t0 = core.now()
  return function() return core.now() - t0 > after end
end

for _, kind in ipairs { "sdk2-default", "sdk2-modern" } do
  describe("the SDK v2 server (" .. kind .. ") in the 2026-07-28 era #integration", function()
    local peer
    setup(function() peer = peers.start(kind, { log = true }) end)
    teardown(function() if peer then peer.stop() end end)

    it("discovers, lists and calls in the modern era: no initialize, headers and envelope on every POST", function()
      local conn <close> = connect(peer.url)
      local tools, listing = assert(conn:list_tools())
      assert.same({ era = "modern", schemas = "tables", ttl_ms = 0, cache_scope = "private" }, listing)
      local by_name = {}
      for _, t in ipairs(tools) do by_name[t.name] = t end
      assert.truthy(by_name.echo and by_name["grüße"] and by_name.passthrough)
      assert.equal("Echo: hi ✓", assert(conn:call_tool("echo", { message = "hi ✓" })).text)
      assert.equal("42", assert(conn:call_tool("add", { a = 40, b = 2 })).text)
      assert.equal("hallo", assert(conn:call_tool("grüße", {})).text)
      assert.is_true(assert(conn:call_tool("fail", {})).is_error)
      local server = conn:server()
      assert.equal("modern", server.era)
      assert.equal("mcpclient-sdk2-peer", server.server_info.name)
      local lines = wire(peer)
      assert.is_false(has(methods(peer), "initialize"))
      for _, l in ipairs(lines) do
        assert.equal("2026-07-28", l.version)
        assert.equal("2026-07-28", l.envelope)
        assert.equal(l.method, l.header_method)
      end
      assert.equal("=?base64?Z3LDvMOfZQ==?=", lines[#lines - 1].name)
    end)

    it("carries the SDK's passthrough schema ({} additionalProperties) through the normaliser", function()
      local conn <close> = connect(peer.url)
      local tools = assert(conn:list_tools())
      for _, t in ipairs(tools) do
        if t.name == "passthrough" then
          local schema, why = core.normalise_schema(t.inputSchema)
          assert(schema, why)
          assert.is_true(schema.additionalProperties)
        end
      end
    end)

    it("mirrors x-mcp-header arguments into Mcp-Param headers, which the SDK checks against the body", function()
      local conn <close> = connect(peer.url)
      assert(conn:list_tools())
      assert.equal("routed us-west1/7", assert(conn:call_tool("route", { region = "us-west1", shard = 7 })).text)
      -- the server's bytes stay in content; the text a model reads has its line break as one line feed
      local routed = assert(conn:call_tool("route", { region = "Zürich\r\nX: 1" }))
      assert.equal("routed Zürich\r\nX: 1/-", routed.content[1].text)
      assert.equal("routed Zürich\nX: 1/-", routed.text)
      -- a connection that never listed: the SDK refuses (-32020) before acting, one listing, one resend
      local fresh <close> = connect(peer.url)
      local before = #methods(peer)
      assert.equal("routed eu/-", assert(fresh:call_tool("route", { region = "eu" })).text)
      local seen = methods(peer)
      assert.same({ "server/discover", "tools/call", "tools/list", "tools/call" }, { table.unpack(seen, before + 1) })
    end)

    it("pings with server/discover and reports the era", function()
      local conn <close> = connect(peer.url)
      local report = assert(conn:ping())
      assert.equal("modern", report.era)
      assert.equal("2026-07-28", report.protocol_version)
      assert.equal("mcpclient-sdk2-peer", report.server_name)
      assert(conn:ping())
      assert.is_false(has(methods(peer), "ping"))
    end)

    it("cancels by closing the stream: the tool is seen aborted on the server, no notice is sent", function()
      local conn <close> = connect(peer.url)
      assert(conn:ping())
      local started = core.now()
      local ok, _, err = conn:call_tool("slow", { seconds = 10 }, { cancel = cancel_after(0.3) })
      assert.is_nil(ok)
      assert.equal("cancelled", err.kind)
      assert.is_true(err.in_flight)
      assert.is_true(core.now() - started < 5, core.now() - started)  -- well inside the tool's 10 s
      assert.is_true(logged(peer, "aborted slow", 30), "the server never saw the call aborted")
      assert.is_false(has(methods(peer), "notifications/cancelled"))
    end)
  end)
end

describe("the SDK v2 modern-only server, asked in the 2025 era #integration", function()
  local peer
  setup(function() peer = peers.start("sdk2-modern", { log = true }) end)
  teardown(function() if peer then peer.stop() end end)

  it("refuses the revision with protocol_version naming what it supports", function()
    local conn <close> = connect(peer.url, { protocol = "2025-11-25" })
    local ok, message, err = conn:list_tools()
    assert.is_nil(ok)
    assert.equal("protocol_version", err.kind)
    assert.equal(400, err.status)
    assert.equal(-32022, err.rpc_code)
    assert.equal("2025-11-25", err.requested)
    assert.equal("2026-07-28", err.offered)
    assert.truthy(message:find("it names 2026-07-28", 1, true), message)
    assert.same({ "initialize" }, methods(peer))
  end)
end)

describe("the SDK v2 default server, pinned to 2025-11-25 #integration", function()
  local peer
  setup(function() peer = peers.start("sdk2-default", { log = true }) end)
  teardown(function() if peer then peer.stop() end end)

  it("is served statelessly in the 2025 era", function()
    local conn <close> = connect(peer.url, { protocol = "2025-11-25" })
    assert(conn:list_tools())
    assert.equal("Echo: x", assert(conn:call_tool("echo", { message = "x" })).text)
    assert.equal("legacy", assert(conn:ping()).era)
    assert.is_false(has(methods(peer), "server/discover"))
  end)
end)

describe("the SDK v2 sessionful 2025 server (the fallback) #integration", function()
  local peer
  setup(function() peer = peers.start("sdk2-session", { log = true }) end)
  teardown(function() if peer then peer.stop() end end)

  it("probes once, falls back to initialize, and keeps the 2025 session", function()
    local conn <close> = connect(peer.url)
    assert(conn:list_tools())
    assert.equal("Echo: y", assert(conn:call_tool("echo", { message = "y" })).text)
    local report = assert(conn:ping())
    assert.equal("legacy", report.era)
    assert.equal("2025-11-25", report.protocol_version)
    local list = methods(peer)
    assert.same({ "server/discover", "initialize", "notifications/initialized", "tools/list", "tools/call", "ping" },
      list)
  end)

  it("cancels with notifications/cancelled in the 2025 era, and the tool is aborted", function()
    local conn <close> = connect(peer.url)
    assert(conn:ping())
    local ok, _, err = conn:call_tool("slow", { seconds = 10 }, { cancel = cancel_after(0.3) })
    assert.is_nil(ok)
    assert.equal("cancelled", err.kind)
    assert.is_true(logged(peer, "notifications/cancelled", 30))
    assert.is_true(logged(peer, "aborted slow", 30), "the server never saw the call aborted")
  end)
end)
