-- Servers built with third-party frameworks, as real peers nobody here wrote, started by this spec on
-- 127.0.0.1 and stopped by their PIDs: fastmcp 4.20 (the TypeScript framework, 2025 era) in its
-- stateful mode (sessions, a standalone GET stream for its log notices) and its stateless mode, and
-- a Mastra server (@mastra/mcp 2.0, 2026-07-28 only, on Node 22) whose `book` tool asks the caller
-- for input. Each is driven the way a user would: list, call, progress, cancel, gather, and the
-- operator command's import and check.
local mcp = require "mcpclient"
local core = require "mcpclient.core"
local modern = require("mcpclient.era.2026_07_28").wire
local cli = require "support.cli"
local peers = require "support.peers"
local wait_for = require("support.wait").for_value

local function connect(url, extra)
  local options = { url = url, identifier = "peer", health = mcp.health.memory() }
  for k, v in pairs(extra or {}) do options[k] = v end
  return mcp.connect(options)
end

local function names_of(tools)
  local names = {}
  for _, t in ipairs(tools) do names[#names + 1] = t.name end
  table.sort(names)
  return names
end

-- A cancel hook that fires `after` seconds from now.
local function cancel_after(after)
  local t0 = core.now()
  return function() return core.now() - t0 > after end
end

-- `lua5.4 bin/mcpclient --db <db> <args...>` → exit code, stdout, stderr.
local mcpclient = cli.mcpclient

local fresh_db = cli.fresh_db

local remove_db = cli.remove_db

-- The check lines of `mcpclient check`: check id -> { status, detail }.
local function check_lines(out)
  local lines = {}
  for line in out:gmatch("[^\n]+") do
    local status, id, detail = line:match("^(%a[%a ]-)%s%s+(%S+)%s*(.*)$")
    if status then lines[id] = { status = status, detail = detail } end
  end
  return lines
end

-- Import and check a peer through the operator command; every check that applies passes.
local function import_and_check(url, expected_tools, era_line, opening)
  local db = fresh_db()
  local ok, why = pcall(function()
    local code, out, err = mcpclient(db, "add", "--identifier", "fw", "--name", "Framework", "--url", url,
      "--data-class", "publicContent", "--approval", "no", "--enabled")
    assert.equal(0, code, out .. err)
    code, out, err = mcpclient(db, "import", "fw")
    assert.equal(0, code, out .. err)
    assert.equal(string.format("fw: %d imported, 0 skipped, 0 orphaned", expected_tools), out:match("^[^\n]*"))
    code, out, err = mcpclient(db, "check", "fw", "--call", "echo", "--arguments", '{"message":"hi"}')
    local lines = check_lines(out)
    for id, line in pairs(lines) do
      assert.is_not.equal("failed", line.status, id .. ": " .. line.detail .. "\n" .. out .. err)
    end
    assert.equal(0, code, out .. err)
    for _, id in ipairs { "handshake", "session", "discovery", "schemas", "call", "cancel", "health" } do
      assert.equal("passed", lines[id] and lines[id].status, id .. "\n" .. out)
    end
    assert.truthy(lines.session.detail:find(era_line, 1, true), out)
    assert.truthy(lines.handshake.detail:find(opening, 1, true), out)
  end)
  remove_db(db)
  if not ok then error(why, 0) end
end

for _, kind in ipairs { "fastmcp-stateful", "fastmcp-stateless" } do
  describe("a fastmcp server (" .. kind .. ") #integration", function()
    local peer
    setup(function() peer = peers.start(kind) end)
    teardown(function() if peer then peer.stop() end end)

    it("lists its tools and calls them in the 2025 era", function()
      local conn <close> = connect(peer.url)
      local tools, listing = assert(conn:list_tools())
      assert.equal("legacy", listing.era)
      assert.same({ "add", "chatty", "count", "echo", "image", "slow" }, names_of(tools))
      for _, t in ipairs(tools) do assert(core.normalise_schema(t.inputSchema)) end
      assert.equal("Echo: grüße ✓", assert(conn:call_tool("echo", { message = "grüße ✓" })).text)
      assert.equal("42", assert(conn:call_tool("add", { a = 40, b = 2 })).text)
      local image = assert(conn:call_tool("image", {}))
      assert.equal("image", image.content[2].type)
      assert.truthy(image.text:find("dropped 1 non-text content block (image)", 1, true), image.text)
      local server = conn:server()
      assert.equal("mcpclient-fastmcp-peer", server.server_info.name)
      -- fastmcp refuses arguments its schema rejects with a JSON-RPC error, before running the tool
      local ok, _, err = conn:call_tool("add", { a = "x" })
      assert.is_nil(ok)
      assert.equal("rpc_error", err.kind)
      assert.equal(-32602, err.rpc_code)
    end)

    it("hands the call's progress to on_progress, in order", function()
      local conn <close> = connect(peer.url)
      local seen = {}
      local outcome = assert(conn:call_tool("count", { steps = 5 }, {
        on_progress = function(progress, total) seen[#seen + 1] = { progress, total } end }))
      assert.equal("counted 5", outcome.text)
      assert.same({ { 1, 5 }, { 2, 5 }, { 3, 5 }, { 4, 5 }, { 5, 5 } }, seen)
    end)

    it("cancels a slow call in flight", function()
      local conn <close> = connect(peer.url)
      assert(conn:ping())
      local t0 = core.now()
      local ok, _, err = conn:call_tool("slow", { seconds = 10 }, { cancel = cancel_after(0.3) })
      assert.is_nil(ok)
      assert.equal("cancelled", err.kind)
      assert.is_true(err.in_flight)
      -- well inside the tool's 10 s (generous: the machine may be loaded)
      assert.is_true(core.now() - t0 < 5, "the cancel took " .. (core.now() - t0) .. " s")
      -- the connection goes on
      assert.equal("Echo: after", assert(conn:call_tool("echo", { message = "after" })).text)
    end)

    it("gathers 20 calls at once on one connection", function()
      local conn <close> = connect(peer.url)
      local fns = {}
      for i = 1, 20 do fns[i] = function() return conn:call_tool("add", { a = i, b = 1000 }) end end
      local results = mcp.gather(fns)
      for i = 1, 20 do
        local outcome = results[i][1]
        assert(outcome, results[i][2])
        assert.equal(tostring(i + 1000), outcome.text)
      end
    end)

    it("imports and passes the live checks through the operator command", function()
      import_and_check(peer.url, 6, "ping on the session", "protocol 2025-11-25, mcpclient-fastmcp-peer")
    end)
  end)
end

describe("a fastmcp server's log notices #integration", function()
  local peer
  setup(function() peer = peers.start("fastmcp-stateful") end)
  teardown(function() if peer then peer.stop() end end)

  it("reach on_log from its standalone GET stream, under the text rule", function()
    local seen = {}
    local conn <close> = connect(peer.url, { on_log = function(level, logger, data)
      seen[#seen + 1] = { level = level, logger = logger, data = data }
    end })
    assert.equal("logged", assert(conn:call_tool("chatty", {})).text)
    local by_level = {}
    for _, s in ipairs(seen) do by_level[s.level] = s end
    assert.equal("hello from fastmcp", by_level.info.data.message)
    assert.equal("it broke", by_level.error.data.message)
    assert.equal(7, by_level.error.data.context.code)
    -- the control and bidi characters are out
    local warned = by_level.warning.data.message
    assert.equal("careful [31m  now", warned)
    for _, s in ipairs(seen) do assert.is_nil(s.logger) end
  end)
end)

describe("a Mastra server (@mastra/mcp 2.0, 2026-07-28 only) #integration", function()
  local peer
  setup(function() peer = peers.start("mastra", { log = true }) end)
  teardown(function() if peer then peer.stop() end end)

  -- The server's log: "POST <method> <version> <Mcp-Method> <Mcp-Name> <envelope> <declared capabilities>".
  local function posts()
    local list = {}
    for _, line in ipairs(peer.log_lines()) do
      local method, name, envelope, caps = line:match("^POST (%S+) %S+ %S+ (%S+) (%S+) (%S+)$")
      if method then list[#list + 1] = { method = method, name = name, envelope = envelope, caps = caps } end
    end
    return list
  end

  it("discovers, lists and calls in the modern era, no handshake", function()
    local conn <close> = connect(peer.url)
    local tools, listing = assert(conn:list_tools())
    assert.equal("modern", listing.era)
    assert.same({ "add", "book", "count", "echo", "slow" }, names_of(tools))
    for _, t in ipairs(tools) do assert(modern.normalise_schema(t.inputSchema)) end
    assert.equal("Echo: hi", assert(conn:call_tool("echo", { message = "hi" })).text)
    assert.equal("42", assert(conn:call_tool("add", { a = 40, b = 2 })).text)
    assert.equal("mcpclient-mastra-peer", conn:server().server_info.name)
    for _, p in ipairs(posts()) do
      assert.is_not.equal("initialize", p.method)
      assert.equal("2026-07-28", p.envelope)
      assert.equal("-", p.caps) -- no handler given: no capability declared
    end
  end)

  it("hands the call's progress to on_progress, in order", function()
    local conn <close> = connect(peer.url)
    local seen = {}
    local outcome = assert(conn:call_tool("count", { steps = 4 }, {
      on_progress = function(progress, total, message) seen[#seen + 1] = { progress, total, message } end }))
    assert.equal("counted 4", outcome.text)
    assert.same({ { 1, 4, "step 1" }, { 2, 4, "step 2" }, { 3, 4, "step 3" }, { 4, 4, "step 4" } }, seen)
  end)

  it("cancels a slow call by closing its stream; the server sees the abort", function()
    local conn <close> = connect(peer.url)
    local t0 = core.now()
    local ok, _, err = conn:call_tool("slow", { seconds = 10 }, { cancel = cancel_after(0.3) })
    assert.is_nil(ok)
    assert.equal("cancelled", err.kind)
    assert.is_true(core.now() - t0 < 5, core.now() - t0)  -- well inside the tool's 10 s
    wait_for("the server to log the call's abort (aborted slow)", 60, function()
      for _, line in ipairs(peer.log_lines()) do if line == "aborted slow" then return true end end
      return nil
    end)
  end)

  it("gathers 20 calls at once", function()
    local conn <close> = connect(peer.url)
    local fns = {}
    for i = 1, 20 do fns[i] = function() return conn:call_tool("add", { a = i, b = 1 }) end end
    local results = mcp.gather(fns)
    for i = 1, 20 do assert.equal(tostring(i + 1), (assert(results[i][1], results[i][2])).text) end
  end)

  it("refuses a tool that asks for input when no handler is given: missing_capability, naming it", function()
    local conn <close> = connect(peer.url)
    local ok, message, err = conn:call_tool("book", { order = "o-1" })
    assert.is_nil(ok)
    assert.equal("missing_capability", err.kind)
    assert.equal("elicitation", err.capability)
    assert.equal(-32021, err.rpc_code)
    assert.equal(400, err.status)
    assert.equal("elicitation.form", err.capabilities)
    assert.truthy(message:find('"elicitation" capability it needs (elicitation.form)', 1, true), message)
  end)

  it("answers the tool's input request through on_elicitation, elicitation declared in every envelope", function()
    local asked = {}
    local conn <close> = connect(peer.url, { on_elicitation = function(request)
      asked[#asked + 1] = request
      return { action = "accept", content = { address = "1 Main St" } }
    end })
    local before = #posts()
    assert(conn:list_tools())
    local outcome = assert(conn:call_tool("book", { order = "o-2" }))
    -- the server asked for the address inside the result (input_required); the answer went back with
    -- the call sent again (a new id, the server's requestState), and the tool ran to the end
    assert.equal("booked o-2 to 1 Main St", outcome.text)
    assert.equal(1, #asked)
    assert.equal("Delivery address for o-2?", asked[1].message)
    assert.same({ "address" }, asked[1].requestedSchema.required)
    local sent = { table.unpack(posts(), before + 1) }
    local calls = 0
    for _, p in ipairs(sent) do
      assert.equal("elicitation", p.caps)
      if p.method == "tools/call" then calls = calls + 1 end
    end
    assert.equal(2, calls)
  end)

  it("hands the person's decline back: the server ends the call as a tool error, and the tool does not run", function()
    local conn <close> = connect(peer.url, { on_elicitation = function() return { action = "decline" } end })
    local before = #posts()
    local outcome = assert(conn:call_tool("book", { order = "o-3" }))
    assert.is_true(outcome.is_error)
    assert.equal("The remote tool reported an error: Tool 'book' was declined", outcome.text)
    local calls = 0
    for _, p in ipairs { table.unpack(posts(), before + 1) } do
      if p.method == "tools/call" then calls = calls + 1 end
    end
    assert.equal(2, calls) -- the call, and once more with the decline: never a third time
  end)

  it("imports and passes the live checks through the operator command", function()
    import_and_check(peer.url, 5, "no session in the 2026-07-28 era: a second server/discover answered in",
      "server/discover, no initialize: protocol 2026-07-28, mcpclient-mastra-peer")
  end)
end)
