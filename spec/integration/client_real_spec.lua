-- The client against real MCP servers nobody here wrote (pinned in spec/peers/package.json):
-- the official TypeScript SDK server (stateless JSON, session + event
-- streams) and server-everything. Each server is started by this spec on
-- 127.0.0.1 and stopped by its PID.
local mcp = require "mcpclient"
local peers = require "support.peers"

local function connect(url, extra)
  local options = { url = url, identifier = "peer", health = mcp.health.memory() }
  for k, v in pairs(extra or {}) do options[k] = v end
  return mcp.connect(options), options.health
end

-- Log lines "<http> <method> <id> <session> <version>" of a started peer, as tables.
local function wire(peer)
  local lines = {}
  for _, line in ipairs(peer.log_lines()) do
    local http, method, id, session, version = line:match("^(%S+) (%S+) (%S+) (%S+) (%S+)")
    lines[#lines + 1] = { http = http, method = method, id = id, session = session, version = version }
  end
  return lines
end

local function count(lines, method)
  local n = 0
  for _, l in ipairs(lines) do if l.method == method then n = n + 1 end end
  return n
end

for _, kind in ipairs { "sdk-stateless", "sdk-session" } do
  describe("the SDK reference server (" .. kind .. ") #integration", function()
    local peer
    setup(function() peer = peers.start(kind, { log = true }) end)
    teardown(function() if peer then peer.stop() end end)

    it("lists its tools, calls them, and reuses one session", function()
      local conn <close>, contacts = connect(peer.url)
      local tools = assert(conn:list_tools())
      local by_name = {}
      for _, t in ipairs(tools) do by_name[t.name] = t end
      assert.truthy(by_name.echo)
      assert.equal("object", by_name.echo.inputSchema.type)

      local out = assert(conn:call_tool("echo", { message = "hi ✓" }))
      assert.equal("Echo: hi ✓", out.text)
      assert.is_false(out.is_error)
      assert.equal("42", assert(conn:call_tool("add", { a = 40, b = 2 })).text)
      local failed = assert(conn:call_tool("fail", {}))
      assert.is_true(failed.is_error)
      assert.truthy(failed.text:find("failed on purpose", 1, true))
      assert.equal(4, #contacts)

      local before = count(wire(peer), "initialize")
      for _ = 1, 5 do assert(conn:call_tool("add", { a = 1, b = 1 })) end
      local lines = wire(peer)
      assert.equal(before, count(lines, "initialize"), "warm calls must not re-initialize")
      -- every leg after the handshake carries the negotiated revision
      assert.equal("2025-11-25", lines[#lines].version)
    end)

    it("answers ping with the server's own revision and name", function()
      local conn <close> = connect(peer.url)
      local report = assert(conn:ping())
      assert.is_true(report.reachable)
      assert.equal("2025-11-25", report.protocol_version)
      assert.truthy(#report.server_name > 0)
    end)

    it("reads the dropped-block note for an image", function()
      local conn <close> = connect(peer.url)
      local out = assert(conn:call_tool("image", {}))
      assert.equal("[mcpclient reads text only and dropped 1 non-text content block (image).]\nbefore\nafter",
        out.text)
    end)

    it("refuses an answer over the 2 MiB read cap", function()
      local conn <close> = connect(peer.url)
      local ok, message, err = conn:call_tool("big", { bytes = 3 * 1024 * 1024 })
      assert.is_nil(ok)
      assert.equal("malformed", err.kind)
      assert.truthy(message:find('"peer"', 1, true))
      assert.is_true(#message < 1000)
      -- and the connection still works afterwards
      assert.equal("Echo: after", assert(conn:call_tool("echo", { message = "after" })).text)
    end)

    it("cancels a slow call in flight and tells the server", function()
      local conn <close> = connect(peer.url)
      assert(conn:list_tools())
      local core = require "mcpclient.core"
      local started = core.now()
      local ok, message, err = conn:call_tool("slow", { seconds = 10 },
        { cancel = function() return core.now() - started > 0.3 end })
      local elapsed = core.now() - started
      assert.is_nil(ok)
      assert.equal("cancelled", err.kind)
      assert.truthy(message:find("may already have acted", 1, true))
      -- well inside the tool's 10 s (generous: the machine may be loaded)
      assert.is_true(elapsed < 5, "cancel took " .. elapsed .. " s")
      local lines = wire(peer)
      local call_id
      for _, l in ipairs(lines) do
        if l.method == "tools/call" then call_id = l.id end
      end
      -- The notice is fire and forget: the caller got its answer first, so
      -- the server may log the notice a moment later.
      local function notices()
        local n = 0
        for _, line in ipairs(peer.log_lines()) do
          if line:find("notifications/cancelled", 1, true) and line:find(" " .. call_id .. "$") then n = n + 1 end
        end
        return n
      end
      local give_up = core.now() + 30  -- generous: the wait ends when the notice is logged
      while notices() == 0 and core.now() < give_up do core.sleep(0.02) end
      assert.equal(1, notices())
    end)
  end)
end

describe("the SDK session server restarted mid-session #integration", function()
  it("recovers by initializing again, once", function()
    local peer = peers.start("sdk-session", { log = true })
    local port = peer.port
    local conn <close> = connect(peer.url)
    local ok, result = pcall(function()
      assert(conn:list_tools())
      peer.stop()
      peer = peers.start("sdk-session", { log = true, port = port })
      local out = assert(conn:call_tool("echo", { message = "again" }))
      assert.equal("Echo: again", out.text)
      local lines = wire(peer)
      -- the new server saw: the stale call (404), initialize, initialized, the retried call
      assert.same({ "tools/call", "initialize", "notifications/initialized", "tools/call" },
        { lines[1].method, lines[2].method, lines[3].method, lines[4].method })
    end)
    peer.stop()
    assert(ok, result)
  end)

  it("sends DELETE on close and the server forgets the session", function()
    local peer = peers.start("sdk-session", { log = true })
    local ok, result = pcall(function()
      local conn = connect(peer.url)
      assert(conn:list_tools())
      conn:close()
      local lines = wire(peer)
      local last = lines[#lines]
      assert.equal("DELETE", last.http)
      assert.truthy(last.session ~= "-")
    end)
    peer.stop()
    assert(ok, result)
  end)
end)

describe("server-everything #integration", function()
  local peer
  setup(function() peer = peers.start("everything") end)
  teardown(function() if peer then peer.stop() end end)

  it("lists its catalogue over event streams with priming events and calls tools", function()
    local conn <close>, contacts = connect(peer.url)
    local tools = assert(conn:list_tools())
    local names = {}
    for _, t in ipairs(tools) do names[t.name] = true end
    assert.truthy(names.echo and names["get-sum"])
    assert.equal("Echo: hi", assert(conn:call_tool("echo", { message = "hi" })).text)
    assert.equal("The sum of 2 and 40 is 42.", assert(conn:call_tool("get-sum", { a = 2, b = 40 })).text)
    local report = assert(conn:ping())
    assert.equal("2025-11-25", report.protocol_version)
    assert.equal(4, #contacts) -- list, two calls, ping
  end)

  it("reports an unknown tool as a tool error, not a transport failure", function()
    local conn <close> = connect(peer.url)
    local out = assert(conn:call_tool("no-such-tool", {}))
    assert.is_true(out.is_error)
  end)

  it("normalises or refuses every schema of its catalogue with a reason, as text and as kept alike", function()
    local core = require "mcpclient.core"
    local conn <close> = connect(peer.url)
    local tools = assert(conn:list_tools())
    local as_text = assert(conn:list_tools { schemas = "text" })
    local kept = assert(conn:list_tools { schemas = "kept" })
    local accepted = 0
    for i, t in ipairs(tools) do
      local schema, reason = core.normalise_schema(t.inputSchema)
      assert.equal(mcp.json.encode(t.inputSchema), as_text[i].inputSchema)
      if schema then
        accepted = accepted + 1
        local stored = mcp.json.encode(schema)
        assert.equal(stored, mcp.json.encode(assert(core.decode_stored_schema(stored))))
        assert.is_nil(schema["$schema"])
        assert.equal(stored, kept[i].inputSchema, t.name)
        assert.equal(stored, core.normalise_schema_text(as_text[i].inputSchema), t.name)
      else
        assert.equal("string", type(reason), t.name)
        assert.same({ refused = reason }, kept[i].inputSchema)
      end
    end
    assert.is_true(accepted >= 10)
  end)

  it("recovers after a restart, where it answers 400 for the unknown session", function()
    local conn <close> = connect(peer.url)
    assert(conn:list_tools())
    local port = peer.port
    peer.stop()
    peer = peers.start("everything", { port = port })
    assert.equal("Echo: back", assert(conn:call_tool("echo", { message = "back" })).text)
  end)
end)
