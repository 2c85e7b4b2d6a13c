-- Roots and sampling against real servers nobody here wrote, each started by this spec (or by the
-- connection itself, over stdio) and stopped by its PID: server-filesystem over stdio with no
-- directory argument, operating only on the roots the client gives (and following set_roots);
-- server-everything over stdio and Streamable HTTP, whose roots and sampling tools exist only
-- for a client that declared the capability (what the server received in initialize), asking
-- for roots and a sampled message through them; the SDK v2 server (2026-07-28) asking for both
-- in one input_required round.
local mcp = require "mcpclient"
local peers = require "support.peers"
local stdio = require "support.stdio"
local wait_for = require("support.wait").for_value

local MODULES = peers.node_modules .. "/@modelcontextprotocol/"

local function tmpdir()
  local p = assert(io.popen("mktemp -d"))
  local dir = p:read("l")
  p:close()
  return dir
end

local function write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

local function names(tools)
  local set = {}
  for _, tool in ipairs(tools) do set[tool.name] = true end
  return set
end

local function sampler(seen)
  return function(request)
    seen[#seen + 1] = request
    return { role = "assistant", model = "lua-test-model", content = { type = "text", text = "Paris." },
      stopReason = "endTurn" }
  end
end

describe("roots and sampling with real servers #integration", function()
  setup(function() peers.require_available() end)

  describe("over stdio", function()
    -- every server started by the connection is gone once it is closed
    after_each(function()
      collectgarbage()
      collectgarbage()
      assert.same({ zombies = 0, alive = 0 }, stdio.children())
    end)

    it("server-filesystem with no directory argument works in the roots given, and follows set_roots", function()
      local a, b = tmpdir(), tmpdir()
      finally(function() os.execute("rm -rf '" .. a .. "' '" .. b .. "'") end)
      write(a .. "/note.txt", "in root a")
      write(b .. "/other.txt", "in root b")
      local conn <close> = mcp.connect { identifier = "fs", health = mcp.health.discard, budget = 30,
        command = { "node", MODULES .. "server-filesystem/dist/index.js" }, roots = { { uri = "file://" .. a,
          name = "a" } } }
      -- the server asks for the roots after initialization; its answer is read by the next operation
      local function allowed()
        local out = assert(conn:call_tool("list_allowed_directories", {}))
        return out.text
      end
      wait_for("the roots to reach server-filesystem", 10, function() return allowed():find(a, 1, true) end)
      assert.equal("in root a", assert(conn:call_tool("read_text_file", { path = a .. "/note.txt" })).text)
      assert.is_true(assert(conn:call_tool("read_text_file", { path = b .. "/other.txt" })).is_error)
      -- a new set: the server is told (roots/list_changed), asks again, and then works there only
      assert(conn:set_roots { { uri = "file://" .. b, name = "b" } })
      wait_for("the new roots to reach server-filesystem", 10, function()
        local text = allowed()
        return text:find(b, 1, true) and not text:find(a, 1, true)
      end)
      assert.equal("in root b", assert(conn:call_tool("read_text_file", { path = b .. "/other.txt" })).text)
      assert.is_true(assert(conn:call_tool("read_text_file", { path = a .. "/note.txt" })).is_error)
    end)

    it("server-filesystem with no directory and no roots cannot operate: the capability was not declared", function()
      local conn <close> = mcp.connect { identifier = "fs", health = mcp.health.discard, budget = 10,
        command = { "node", MODULES .. "server-filesystem/dist/index.js" } }
      -- it never asks for roots (none were declared), so it has no directory to work in
      local out = assert(conn:call_tool("list_allowed_directories", {}))
      assert.equal("Allowed directories:\n", out.text)
    end)

    local everything = { "node", MODULES .. "server-everything/dist/index.js", "stdio" }

    it("server-everything over stdio: its roots and sampling tools exist only for a client that declared them",
      function()
        local plain <close> = mcp.connect { identifier = "ev", command = everything, health = mcp.health.discard,
          budget = 30 }
        local listed = names(assert(plain:list_tools()))
        assert.is_true(listed.echo)
        assert.is_nil(listed["get-roots-list"])
        assert.is_nil(listed["trigger-sampling-request"])
        plain:close()

        local seen = {}
        local conn <close> = mcp.connect { identifier = "ev", command = everything, health = mcp.health.discard,
          budget = 30, roots = { { uri = "file:///srv/notes", name = "notes" } }, on_sampling = sampler(seen) }
        listed = names(assert(conn:list_tools()))
        assert.is_true(listed["get-roots-list"])
        assert.is_true(listed["trigger-sampling-request"])
        local roots = assert(conn:call_tool("get-roots-list", {})).text
        assert.truthy(roots:find("notes", 1, true), roots)
        assert.truthy(roots:find("URI: file:///srv/notes", 1, true), roots)
        local out = assert(conn:call_tool("trigger-sampling-request",
          { prompt = "Capital of France?", maxTokens = 20 }))
        assert.is_false(out.is_error)
        assert.truthy(out.text:find('"model": "lua-test-model"', 1, true), out.text)
        assert.truthy(out.text:find("Paris.", 1, true), out.text)
        assert.equal(1, #seen)
        assert.equal(20, seen[1].maxTokens)
        assert.equal("ev", seen[1].server)
        assert.truthy(seen[1].messages[1].content.text:find("Capital of France?", 1, true))
      end)

    it("server-everything over stdio: a refusal reaches the tool as the server's error, the call itself answered",
      function()
        local conn <close> = mcp.connect { identifier = "ev", command = everything, health = mcp.health.discard,
          budget = 30, on_sampling = function() return nil, "no model for servers today" end }
        -- the server's SDK turns the client's error (-1, the refusal's wording) into the tool's failure
        local out = assert(conn:call_tool("trigger-sampling-request", { prompt = "x" }))
        assert.is_true(out.is_error)
        assert.truthy(out.text:find("MCP error -1: the client refused the sampling request: no model for servers "
          .. "today", 1, true), out.text)
      end)
  end)

  describe("server-everything over Streamable HTTP", function()
    local peer
    setup(function() peer = peers.start("everything") end)
    teardown(function() if peer then peer.stop() end end)

    it("answers its roots request and its sampling request on the session's streams", function()
      local seen = {}
      local conn <close> = mcp.connect { url = peer.url, identifier = "ev", health = mcp.health.discard, budget = 30,
        roots = { { uri = "file:///srv/http", name = "over-http" } }, on_sampling = sampler(seen) }
      local roots = assert(conn:call_tool("get-roots-list", {})).text
      assert.truthy(roots:find("URI: file:///srv/http", 1, true), roots)
      local out = assert(conn:call_tool("trigger-sampling-request", { prompt = "Capital?", maxTokens = 10 }))
      assert.truthy(out.text:find("Paris.", 1, true), out.text)
      assert.equal(10, seen[1].maxTokens)
    end)
  end)

  describe("the SDK v2 server (2026-07-28)", function()
    local peer
    setup(function() peer = peers.start("sdk2-modern") end)
    teardown(function() if peer then peer.stop() end end)

    it("gets the roots and a sampled message in one input round, and the call completes", function()
      local seen = {}
      local conn <close> = mcp.connect { url = peer.url, identifier = "v2", health = mcp.health.discard,
        roots = { { uri = "file:///srv/modern", name = "m" } }, on_sampling = sampler(seen) }
      local out = assert(conn:call_tool("workspace", {}))
      assert.equal("roots file:///srv/modern; model lua-test-model; said Paris.", out.text)
      assert.equal(64, seen[1].maxTokens)
      assert.equal("Summarise the workspace.", seen[1].messages[1].content.text)
      assert.equal("modern", conn:server().era)
    end)

    it("without roots and sampling the same call is refused: the capability was not declared", function()
      local conn <close> = mcp.connect { url = peer.url, identifier = "v2", health = mcp.health.discard }
      local out, message, err = conn:call_tool("workspace", {})
      assert.is_nil(out)
      assert.equal("missing_capability", err.kind)
      assert.truthy(message:find('does not declare the "roots" capability', 1, true), message)
    end)
  end)
end)
