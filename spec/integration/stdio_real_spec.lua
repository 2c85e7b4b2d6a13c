-- Real stdio servers nobody here wrote, each started by the connection itself (argv, no
-- shell) and stopped by its close: server-everything in stdio mode, server-memory,
-- server-filesystem on a temporary directory (all on the 2025-era SDK), and the official SDK
-- v2's serveStdio (the 2026-07-28 stdio binding). Plus mcp.gather over stdio and HTTP at once.
local mcp = require "mcpclient"
local core = require "mcpclient.core"
local peers = require "support.peers"
local stdio = require "support.stdio"
local read_all = require("support.shell").read_all
local wait_for = require("support.wait").for_value

local MODULES = peers.node_modules .. "/@modelcontextprotocol/"

local function connect(argv, extra)
  local options = { identifier = "real", command = argv, health = mcp.health.discard, budget = 30 }
  for k, v in pairs(extra or {}) do options[k] = v end
  return mcp.connect(options)
end

local function names(tools)
  local set = {}
  for _, tool in ipairs(tools) do set[tool.name] = true end
  return set
end

local function tmpdir()
  local p = assert(io.popen("mktemp -d"))
  local dir = p:read("l")
  p:close()
  return dir
end

describe("real servers over stdio #integration", function()
  setup(function() peers.require_available() end)
  after_each(function()
    collectgarbage()
    collectgarbage()
    assert.same({ zombies = 0, alive = 0 }, stdio.children())
  end)

  it("server-everything (stdio mode): list, call, ping, progress, 2025 era", function()
    local conn <close> = connect { "node", MODULES .. "server-everything/dist/index.js", "stdio" }
    local tools = assert(conn:list_tools())
    assert.is_true(names(tools).echo and names(tools)["get-sum"])
    assert.equal("Echo: hi", assert(conn:call_tool("echo", { message = "hi" })).text)
    assert.equal("The sum of 2 and 40 is 42.", assert(conn:call_tool("get-sum", { a = 2, b = 40 })).text)
    local server = conn:server()
    assert.same({ "legacy", "stdio" }, { server.era, server.transport })
    assert.is_true(stdio.running(server.pid))
    assert(conn:ping())
    local seen = 0
    local outcome = assert(conn:call_tool("trigger-long-running-operation", { duration = 0.3, steps = 3 },
      { on_progress = function() seen = seen + 1 end }))
    assert.is_false(outcome.is_error)
    assert.equal(3, seen)
    local pid = server.pid
    conn:close()
    assert.is_false(stdio.running(pid))
  end)

  it("server-memory: the graph it keeps in MEMORY_FILE_PATH (given through env)", function()
    local dir = tmpdir()
    local file = dir .. "/memory.jsonl"
    do
      local conn <close> = connect({ "node", MODULES .. "server-memory/dist/index.js" },
        { env = { MEMORY_FILE_PATH = file } })
      assert.is_true(names(assert(conn:list_tools())).create_entities)
      assert(conn:call_tool("create_entities", { entities = { { name = "Ada", entityType = "person",
        observations = { "wrote the first program" } } } }))
      assert.matches("wrote the first program", assert(conn:call_tool("read_graph", {})).text, 1, true)
    end
    local f = assert(io.open(file))
    assert.matches('"Ada"', f:read("a"), 1, true)
    f:close()
    os.execute("rm -rf '" .. dir .. "'")
  end)

  it("server-filesystem on a temporary directory: write, read, and a path outside refused", function()
    local dir = tmpdir()
    local conn <close> = connect { "node", MODULES .. "server-filesystem/dist/index.js", dir }
    assert(conn:call_tool("write_file", { path = dir .. "/note.txt", content = "over stdio" }))
    assert.equal("over stdio", assert(conn:call_tool("read_text_file", { path = dir .. "/note.txt" })).text)
    local outside = assert(conn:call_tool("read_text_file", { path = "/etc/hostname" }))
    assert.is_true(outside.is_error)
    os.execute("rm -rf '" .. dir .. "'")
  end)

  it("the SDK v2's serveStdio: the 2026-07-28 era over stdio, a cancelled call told with notifications/cancelled",
    function()
      local log = os.tmpname()
      local conn <close> = connect({ "node", peers.dir .. "/sdk2-stdio-server.mjs" }, { env = { PEER_LOG = log } })
      assert.equal("Echo: modern", assert(conn:call_tool("echo", { message = "modern" })).text)
      assert.same({ "modern", "2026-07-28" }, { conn:server().era, conn:server().protocol_version })
      assert.equal("42", assert(conn:call_tool("add", { a = 40, b = 2 })).text)
      local t0 = core.now()
      local cancel = function() return core.now() - t0 > 0.2 end
      local outcome, _, err = conn:call_tool("slow", { ms = 10000 }, { cancel = cancel })
      assert.is_nil(outcome)
      assert.equal("cancelled", err.kind)
      -- well inside the tool's 10 s: the cancel ended the wait, not the tool's answer (a generous
      -- bound, the machine may be loaded)
      assert.is_true(core.now() - t0 < 5, core.now() - t0)
      assert.equal("Echo: still", assert(conn:call_tool("echo", { message = "still" })).text)
      local f = assert(io.open(log))
      assert.equal("aborted slow\n", f:read("a"))
      f:close()
      os.remove(log)
    end)

  -- the lines of the peer's wire log (PEER_WIRE_LOG): "<method> <id or requestId>" per message it read
  local function wire_lines(path)
    local f = assert(io.open(path))
    local lines = {}
    for line in f:lines() do lines[#lines + 1] = line end
    f:close()
    return lines
  end

  it("the SDK v2's serveStdio: a standing subscriptions/listen carries its notices, during a call and between "
    .. "answers, to on_change; subscribe and unsubscribe open it again at once", function()
    local wire, log, seen = os.tmpname(), os.tmpname(), {}
    local conn <close> = connect({ "node", peers.dir .. "/sdk2-stdio-server.mjs" },
      { env = { PEER_WIRE_LOG = wire, PEER_LOG = log },
        on_change = function(kind, uri) seen[#seen + 1] = kind .. (uri and (" " .. uri) or "") end })
    assert.is_true(conn:subscribe("doc://readme"))
    assert.equal("modern", conn:server().era)
    -- sent while the call runs: read before its answer
    assert.equal("touched", assert(conn:call_tool("touch", {})).text)
    assert.same({ "resources", "resource doc://readme" }, seen)
    -- sent 100 ms after the answer, while nothing is asked: waiting in the pipe for the next operation
    -- (the peer says when it has written them)
    assert.equal("touched", assert(conn:call_tool("touch", { after = 100 })).text)
    wait_for("the peer to write the notices after its answer", 60, function()
      return read_all(log) == "sent after\n"
    end)
    os.remove(log)
    assert.equal("Echo: next", assert(conn:call_tool("echo", { message = "next" })).text)
    assert.same({ "resources", "resource doc://readme", "resources", "resource doc://readme" }, seen)
    -- no longer subscribed: the listen is opened again without the URI, so only the list notice comes
    assert.is_true(conn:unsubscribe("doc://readme"))
    assert.equal("touched", assert(conn:call_tool("touch", {})).text)
    assert.same({ "resources", "resource doc://readme", "resources", "resource doc://readme", "resources" }, seen)
    local methods, tags = {}, {}
    for _, line in ipairs(wire_lines(wire)) do
      local method, tag = line:match("^(%S+) (%S+)$")
      if method ~= "tools/call" then methods[#methods + 1], tags[#tags + 1] = method, tag end
    end
    os.remove(wire)
    -- one listen opened with the subscription, cancelled by its id when it changed, one opened after
    assert.same({ "server/discover", "subscriptions/listen", "notifications/cancelled", "subscriptions/listen" },
      methods)
    assert.equal(tags[2], tags[3])
  end)

  it("the SDK v2's serveStdio in the 2025 era: change notices written between answers reach on_change", function()
    local log, seen = os.tmpname(), {}
    local conn <close> = connect({ "node", peers.dir .. "/sdk2-stdio-server.mjs" }, { protocol = "2025-11-25",
      env = { PEER_LOG = log },
      on_change = function(kind, uri) seen[#seen + 1] = kind .. (uri and (" " .. uri) or "") end })
    assert.is_true(conn:subscribe("doc://readme"))
    assert.equal("legacy", conn:server().era)
    assert.equal("touched", assert(conn:call_tool("touch", { after = 100 })).text)
    -- the notices are written 100 ms after the answer: the peer says when it has written them
    wait_for("the peer to write the notices after its answer", 60, function()
      return read_all(log) == "sent after\n"
    end)
    os.remove(log)
    assert.equal("Echo: later", assert(conn:call_tool("echo", { message = "later" })).text)
    assert.same({ "resources", "resource doc://readme" }, seen)
    assert.is_true(conn:unsubscribe("doc://readme"))
  end)

  it("mcp.gather runs stdio and HTTP connections together", function()
    local http_peer = peers.start("sdk2-default")
    local over_http <close> = mcp.connect { identifier = "web", url = http_peer.url, health = mcp.health.discard }
    local local_one <close> = connect { "node", peers.dir .. "/sdk2-stdio-server.mjs" }
    local legacy <close> = connect { "node", MODULES .. "server-everything/dist/index.js", "stdio" }
    assert(over_http:ping())
    assert(local_one:ping())
    assert(legacy:ping())
    -- two calls of 2 s each: together they take about 2 s, one after the other at least 4 s
    local t0 = core.now()
    local results = mcp.gather {
      function() return over_http:call_tool("slow", { seconds = 2 }) end,
      function() return local_one:call_tool("slow", { ms = 2000 }) end,
      function() return legacy:call_tool("echo", { message = "alongside" }) end,
    }
    local took = core.now() - t0
    http_peer.stop()
    assert.is_false(assert(results[1][1], results[1][2]).is_error)
    assert.equal("slept", results[2][1].text)
    assert.equal("Echo: alongside", results[3][1].text)
    assert.is_true(took >= 2 and took < 4, took)
  end)
end)
