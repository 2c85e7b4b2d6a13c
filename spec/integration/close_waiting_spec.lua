-- conn:close() while another coroutine's operation still waits on the connection: that operation
-- returns nil, message, err with kind "closed" (err.in_flight for a tools/call the server may have
-- acted on), over stdio and over HTTP, whatever it was waiting for: an answer, room in the
-- child's stdin, its turn at the pipe, a transfer in the engine, or a blocking send.
local mcp = require "mcpclient"
local core = require "mcpclient.core"
local engine = require "mcpclient.engine"
local peers = require "support.peers"
local stdio = require "support.stdio"

local function quiet() end

-- Run `call(conn)` and close the connection from another task after `after` seconds; returns
-- what the call returned, packed, and whether the closing task raised.
local function closed_while(conn, after, call)
  local results = mcp.gather {
    function() return call(conn) end,
    function()
      engine.sleep(after)
      conn:close()
    end,
  }
  assert.is_nil(results[2].error)
  assert.is_nil(results[1].error, "the waiting call raised: " .. tostring(results[1].error))
  return results[1]
end

describe("closing a connection while a call waits #integration", function()
  describe("over stdio", function()
    after_each(function()
      collectgarbage()
      collectgarbage()
      assert.same({ zombies = 0, alive = 0 }, stdio.children())
    end)

    it("ends a call waiting for its answer: closed, in flight", function()
      local conn = mcp.connect(stdio.options("legacy", { log = quiet }))
      assert(conn:ping())
      local t0 = core.now()
      local answer = closed_while(conn, 0.2, function(c) return c:call_tool("slow", { seconds = 3 }) end)
      assert.is_nil(answer[1])
      assert.equal("closed", answer[3].kind)
      assert.is_true(answer[3].in_flight)
      assert.matches('"fake"', answer[2], 1, true)
      assert.is_true(core.now() - t0 < 2.5)
    end)

    it("ends a call whose line waits for room in the child's stdin, and one waiting for the pipe: closed", function()
      local conn = mcp.connect(stdio.options("deaf", { log = quiet }))
      assert(conn:ping())
      local results = mcp.gather {
        function() return conn:call_tool("echo", { message = string.rep("x", 4 * 1024 * 1024) }) end,
        function() return conn:call_tool("echo", { message = "queued" }) end,
        function()
          engine.sleep(0.2)
          conn:close()
        end,
      }
      for i = 1, 2 do
        assert.is_nil(results[i].error, tostring(results[i].error))
        assert.equal("closed", results[i][3].kind)
        assert.is_false(results[i][3].in_flight)
      end
    end)
  end)

  describe("over HTTP", function()
    local session, stateless
    setup(function()
      session = peers.start("sdk-session")
      stateless = peers.start("sdk-stateless")
    end)
    teardown(function()
      for _, p in ipairs { session, stateless } do if p then p.stop() end end
    end)

    for _, kind in ipairs { "session", "stateless" } do
      it("ends a call whose transfer is in the engine: closed, in flight (" .. kind .. ")", function()
        local peer = kind == "session" and session or stateless
        local conn = mcp.connect { url = peer.url, identifier = "peer", health = mcp.health.discard }
        assert(conn:ping())
        local t0 = core.now()
        local answer = closed_while(conn, 0.2, function(c) return c:call_tool("slow", { seconds = 3 }) end)
        assert.is_nil(answer[1])
        assert.equal("closed", answer[3].kind)
        assert.is_true(answer[3].in_flight)
        assert.is_true(core.now() - t0 < 2.5)
      end)
    end

    it("ends a blocking call whose own hook closed the connection: closed, no raise", function()
      local conn = mcp.connect { url = stateless.url, identifier = "peer", health = mcp.health.discard }
      assert(conn:ping())
      local t0 = core.now()
      local ok, outcome, _, err = pcall(conn.call_tool, conn, "slow", { seconds = 3 }, { cancel = function()
        if core.now() - t0 > 0.2 then conn:close() end
        return false
      end })
      assert.is_true(ok, tostring(outcome))
      assert.is_nil(outcome)
      assert.equal("closed", err.kind)
      assert.is_true(core.now() - t0 < 2.5)
    end)

    it("refuses a new operation after the close (misuse raises), as before", function()
      local conn = mcp.connect { url = stateless.url, identifier = "peer", health = mcp.health.discard }
      conn:close()
      assert.has_error(function() conn:ping() end, "the connection is closed")
    end)
  end)
end)
