-- mcp.connect{ command = argv }: a local server over stdio, honest and
-- hostile (spec/support/stdio_server.lua). Each case: the outcome of the
-- right kind within the budget, nothing sent twice, no child left behind.
local mcp = require "mcpclient"
local core = require "mcpclient.core"
local stdio = require "support.stdio"

local function connect(mode, extra)
  return mcp.connect(stdio.options(mode, extra))
end

local function quiet() end

describe("a server over stdio", function()
  after_each(function()
    collectgarbage()
    collectgarbage()
    assert.equal(0, stdio.children().zombies)
  end)

  describe("options", function()
    it("takes url or command, never both, and validates every option", function()
      local base = stdio.options("legacy")
      base.url = "http://127.0.0.1:1/mcp"
      assert.has_error(function() mcp.connect(base) end, "connect: give either url or command, not both")
      assert.has_error(function() mcp.connect { identifier = "x", health = quiet } end,
        "connect: url or command is required")
      assert.has_error(function()
        mcp.connect { identifier = "x", url = "http://127.0.0.1:1/", env = {}, health = quiet }
      end, "connect: env and cwd go with command (a server started over stdio)")
      assert.has_error(function() connect("legacy", { command = {} }) end)
      assert.has_error(function() connect("legacy", { command = { "" } }) end)
      assert.has_error(function() connect("legacy", { command = "lua5.4 server.lua" }) end)
      assert.has_error(function() connect("legacy", { env = { ["BAD NAME"] = "x" } }) end)
      assert.has_error(function() connect("legacy", { env = { A = 1 } }) end)
      assert.has_error(function() connect("legacy", { cwd = "" }) end)
      assert.has_error(function() connect("legacy", { auth = { credential = "env:X" } }) end,
        "connect: auth is for a server reached by url")
    end)

    it("starts nothing until the first operation, and shows the command, never an env value", function()
      local conn <close> = connect("legacy", { env = stdio.env { TOKEN = "s3cret-value" } })
      assert.is_nil(conn:server())
      assert.equal(0, stdio.children().alive)
      local shown = tostring(conn)
      assert.matches("stdio_server.lua legacy", shown, 1, true)
      assert.is_nil(shown:find("s3cret", 1, true))
    end)
  end)

  it("keeps the channel contract: exactly its methods, and the module offers only new", function()
    local http = require "mcpclient.channel.http"
    local module = require "mcpclient.channel.stdio"
    local function callable(obj)
      local names, found, t, seen = {}, {}, obj, {}
      while type(t) == "table" and not seen[t] do
        seen[t] = true
        for k, v in pairs(t) do
          if type(k) == "string" and type(v) == "function" and not k:match("^__") and not found[k] then
            found[k] = true
            names[#names + 1] = k
          end
        end
        local mt = getmetatable(t)
        t = mt and mt.__index
      end
      table.sort(names)
      return names
    end
    local contract = table.move(http.CONTRACT, 1, #http.CONTRACT, 1, {})
    table.sort(contract)
    local stderr = io.stderr
    finally(function() io.stderr = stderr end)  -- luacheck: ignore 122
    io.stderr = { write = function() end }  -- luacheck: ignore 122 (the traced connection's lines)
    for _, traced in ipairs { false, true } do
      local conn <close> = connect("legacy", { trace = traced })
      assert(conn:ping())
      assert.same(contract, callable(conn.session.channel))
    end
    assert.same({ "new" }, callable(module))
  end)

  describe("both eras", function()
    it("speaks to a 2025-era server (server/discover refused, then initialize)", function()
      local conn <close> = connect("legacy")
      local tools = assert(conn:list_tools())
      assert.equal("echo", tools[1].name)
      assert.equal("Echo: hi", assert(conn:call_tool("echo", { message = "hi" })).text)
      local server = conn:server()
      assert.same({ "legacy", "2025-11-25", "stdio" }, { server.era, server.protocol_version, server.transport })
      assert.is_true(stdio.running(server.pid))
      assert.equal(tostring(server.pid), assert(conn:call_tool("pid")).text)
      assert.equal("legacy", assert(conn:ping()).era)
    end)

    it("speaks to a 2026-07-28 server (server/discover answered, no initialize)", function()
      local conn <close> = connect("modern")
      assert.equal("Echo: new", assert(conn:call_tool("echo", { message = "new" })).text)
      assert.same({ "modern", "2026-07-28" }, { conn:server().era, conn:server().protocol_version })
      assert.equal("modern", assert(conn:ping()).era)
    end)

    it("a listen the server refuses: the request goes all the same, the refusal is not asked again, "
      .. "a subscribe it refuses fails", function()
      local conn <close> = connect("refuse_listen", { on_change = quiet })
      assert.equal("Echo: a", assert(conn:call_tool("echo", { message = "a" })).text)
      assert.equal("Echo: b", assert(conn:call_tool("echo", { message = "b" })).text)
      assert.equal("server/discover subscriptions/listen tools/call tools/call", assert(conn:call_tool("asked")).text)
      local ok, _, err = conn:subscribe("file:///a")
      assert.is_nil(ok)
      assert.same({ "rpc_error", -32601 }, { err.kind, err.rpc_code })
      -- the subscription was not kept: the old filter stands again, refused already, so not asked
      assert.equal("server/discover subscriptions/listen tools/call tools/call tools/call subscriptions/listen",
        assert(conn:call_tool("asked")).text)
      assert.is_nil(assert(conn:call_tool("notices")).text:find("cancelled", 1, true))
    end)

    it("a listen the server never acknowledges delays the first request by at most 1 s, and stays open", function()
      local conn <close> = connect("mute_listen", { on_change = quiet })
      local t0 = core.now()
      assert.equal("Echo: a", assert(conn:call_tool("echo", { message = "a" })).text)
      local took = core.now() - t0
      assert.is_true(took >= 0.9 and took < 2, took)
      assert.equal("server/discover subscriptions/listen tools/call", assert(conn:call_tool("asked")).text)
      -- unsubscribing from what was never subscribed changes nothing: the listen stands, never cancelled
      assert.is_true(conn:unsubscribe("file:///none"))
      assert.is_nil(assert(conn:call_tool("notices")).text:find("cancelled", 1, true))
      -- subscribing changes the filter: the open listen is cancelled by its id, a new one opened
      assert.is_true(conn:subscribe("file:///a"))
      assert.equal("notifications/cancelled:2", assert(conn:call_tool("notices")).text)
    end)

    it("takes a server that exits at server/discover for a 2025-era one, on a new child", function()
      local conn <close> = connect("exit_on_probe")
      assert.equal("Echo: x", assert(conn:call_tool("echo", { message = "x" })).text)
      assert.equal("legacy", conn:server().era)
    end)

    it("takes a server silent at server/discover for a 2025-era one", function()
      local conn <close> = connect("silent_probe")
      assert.equal("Echo: x", assert(conn:call_tool("echo", { message = "x" })).text)
      assert.equal("legacy", conn:server().era)
    end)

    it("pins an era with the protocol option", function()
      local conn <close> = connect("legacy", { protocol = "2025-11-25" })
      assert.equal("Echo: p", assert(conn:call_tool("echo", { message = "p" })).text)
    end)
  end)

  describe("never twice", function()
    for _, era in ipairs { "legacy", "modern" } do
      it("fails a call whose child died interrupted, names its exit status, starts a new child next (" .. era .. ")",
        function()
          local logged = {}
          local conn <close> = connect(era, { log = function(_, text) logged[#logged + 1] = text end })
          assert(conn:call_tool("echo", { message = "first" }))
          local first_pid = conn:server().pid
          local outcome, message, err = conn:call_tool("die", { status = 3 })
          assert.is_nil(outcome)
          assert.equal("interrupted", err.kind)
          assert.matches("exited with status 3", message, 1, true)
          assert.matches("dying as asked", message, 1, true)
          -- said once: the failure carries it, so no warning repeats it
          for _, line in ipairs(logged) do assert.is_nil(line:find("dying as asked", 1, true), line) end
          assert.is_false(stdio.running(first_pid))
          assert.equal("Echo: again", assert(conn:call_tool("echo", { message = "again" })).text)
          assert.are_not.equal(first_pid, conn:server().pid)
        end)
    end

    it("starts at most one child per operation", function()
      local conn <close> = connect("legacy", { log = quiet })
      local outcome, _, err = conn:call_tool("die")
      assert.is_nil(outcome)
      assert.equal("interrupted", err.kind)
      -- the next operation starts one child; that one dies too: no third
      outcome, _, err = conn:call_tool("die")
      assert.is_nil(outcome)
      assert.equal("interrupted", err.kind)
    end)

    it("names a program that is not found as transport, and writes nothing", function()
      local conn <close> = connect("legacy", { command = { "mcp-no-such-server-x", "--stdio" } })
      local outcome, message, err = conn:call_tool("echo")
      assert.is_nil(outcome)
      assert.equal("transport", err.kind)
      assert.matches('the program "mcp-no-such-server-x" was not found', message, 1, true)
    end)
  end)

  describe("a hostile server", function()
    it("that writes a line that is not JSON: interrupted (the call may have run), named, clipped, and the "
      .. "child is stopped", function()
      local conn <close> = connect("garbage", { log = quiet })
      assert(conn:list_tools())
      local pid = conn:server().pid
      local outcome, message, err = conn:call_tool("echo")
      assert.is_nil(outcome)
      assert.equal("interrupted", err.kind)
      assert.matches("this is not json", message, 1, true)
      assert.is_false(stdio.running(pid))
    end)

    it("that writes a 3 MiB line: interrupted at the read cap, and the child is stopped", function()
      local conn <close> = connect("huge", { log = quiet })
      assert(conn:list_tools())
      local pid = conn:server().pid
      local outcome, message, err = conn:call_tool("echo")
      assert.is_nil(outcome)
      assert.equal("interrupted", err.kind)
      assert.matches("2097152", message, 1, true)
      assert.is_false(stdio.running(pid))
    end)

    it("that never reads stdin again: the call ends at its budget, however large", function()
      local conn <close> = connect("deaf", { log = quiet })
      assert(conn:ping())
      local t0 = core.now()
      local outcome, _, err = conn:call_tool("echo", { message = "small" }, { budget = 0.5 })
      assert.is_nil(outcome)
      assert.equal("timeout", err.kind)
      outcome, _, err = conn:call_tool("echo", { message = string.rep("x", 4 * 1024 * 1024) }, { budget = 0.5 })
      assert.is_nil(outcome)
      assert.is_truthy(err.kind == "timeout" or err.kind == "interrupted")
      assert.is_true(core.now() - t0 < 2.5)
    end)

    it("that floods stderr: the call is answered, and what is kept is bounded and clean", function()
      local conn <close> = connect("flood", { command = stdio.command("flood", "4"), log = quiet })
      assert.equal("Echo: f", assert(conn:call_tool("echo", { message = "f" })).text)
      local outcome, message = conn:call_tool("die")
      assert.is_nil(outcome)
      assert.is_true(#message < 1200)
    end)

    it("that writes its answers in pieces", function()
      local conn <close> = connect("partial")
      assert.equal("Echo: p", assert(conn:call_tool("echo", { message = "p" })).text)
    end)

    it("that leaves a grandchild ignoring SIGTERM: close ends it", function()
      local conn = connect("legacy")
      local grandchild = tonumber(assert(conn:call_tool("grandchild")).text)
      assert.is_true(stdio.running(grandchild))
      conn:close()
      assert.is_false(stdio.running(grandchild))
    end)
  end)

  describe("operations", function()
    it("cancels a call in flight and tells the server (both eras over stdio)", function()
      for _, era in ipairs { "legacy", "modern" } do
        local conn <close> = connect(era, { log = quiet })
        assert(conn:ping())
        local t0 = core.now()
        local outcome, _, err = conn:call_tool("slow", { seconds = 0.5 }, { cancel = function()
          return core.now() - t0 > 0.1
        end })
        assert.is_nil(outcome)
        assert.equal("cancelled", err.kind)
        assert.is_true(err.in_flight)
        assert.is_true(core.now() - t0 < 0.3)
        -- the late answer to the cancelled call is passed over
        assert.matches("notifications/cancelled:%d+", assert(conn:call_tool("notices")).text)
      end
    end)

    it("hands progress to on_progress, its message under the text rule", function()
      local conn <close> = connect("legacy")
      local seen = {}
      local outcome = assert(conn:call_tool("progress", {}, { on_progress = function(progress, total, message)
        seen[#seen + 1] = { progress, total, message }
      end }))
      assert.equal("done", outcome.text)
      assert.same({ { 1, 2, core.clip("half\27[31m", 500) }, { 2, 2 } }, seen)
      assert.is_nil(seen[1][3]:find("\27", 1, true))
    end)

    it("answers an elicitation through the host's handler", function()
      local asked
      local conn <close> = connect("legacy", { on_elicitation = function(request)
        asked = request.message
        return { action = "accept", content = { name = "Ada" } }
      end })
      local outcome = assert(conn:call_tool("elicit"))
      assert.equal("Your name?", asked)
      assert.equal('elicited {"action":"accept","content":{"name":"Ada"}}', outcome.text)
    end)

    it("gives the child env (values and env: references) and cwd; no reference, no child", function()
      local conn <close> = connect("legacy", { env = stdio.env { GIVEN = "literal", FROM = "env:HOME" }, cwd = "/tmp" })
      assert.equal("literal", assert(conn:call_tool("env", { name = "GIVEN" })).text)
      assert.equal(os.getenv("HOME"), assert(conn:call_tool("env", { name = "FROM" })).text)
      assert.equal("unset", assert(conn:call_tool("env", { name = "BUSTED_NOT_INHERITED" })).text)
      assert.equal("/tmp", assert(conn:call_tool("cwd")).text)
      local missing <close> = connect("legacy", { env = stdio.env { TOKEN = "env:MCP_SURELY_UNSET_VAR" } })
      local outcome, message, err = missing:call_tool("echo")
      assert.is_nil(outcome)
      assert.equal("credential", err.kind)
      assert.matches("MCP_SURELY_UNSET_VAR", message, 1, true)
      assert.is_nil(missing:server())
    end)

    it("runs several stdio connections at once in mcp.gather", function()
      local a <close> = connect("legacy")
      local b <close> = connect("modern")
      local t0 = core.now()
      local results = mcp.gather {
        function() return a:call_tool("slow", { seconds = 0.4 }) end,
        function() return b:call_tool("slow", { seconds = 0.4 }) end,
      }
      assert.equal("slept", results[1][1].text)
      assert.equal("slept", results[2][1].text)
      assert.is_true(core.now() - t0 < 0.75 + 0.5)
    end)
  end)

  it("leaves no zombie and no descriptor after 1000 connect/close cycles", function()
    -- a minimal 2025-era server in sh: refuses server/discover, answers
    -- initialize, takes initialized, answers ping
    local script = table.concat({
      "read line; echo '{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-32601,\"message\":\"no\"}}'",
      "read line; echo '{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"protocolVersion\":\"2025-11-25\",'"
        .. "'\"capabilities\":{},\"serverInfo\":{\"name\":\"sh\",\"version\":\"1\"}}}'",
      "read line; read line; echo '{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{}}'",
      "read line",
    }, "; ")
    local command = { "sh", "-c", script }
    local function cycle()
      local conn <close> = mcp.connect { identifier = "cycle", command = command, health = quiet }
      assert(conn:ping())
    end
    cycle()
    collectgarbage()
    collectgarbage()
    local fds = stdio.fds()
    for _ = 1, 1000 do cycle() end
    collectgarbage()
    collectgarbage()
    local after = stdio.fds()
    assert.is_true(after <= fds, string.format("%d descriptors before, %d after", fds, after))
    assert.same({ zombies = 0, alive = 0 }, stdio.children())
  end)
end)
