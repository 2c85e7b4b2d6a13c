-- What a stdio child writes that is not the answer being read: an answer to a request nobody
-- waits for any more is passed over and counted, never charged to another call; a line that
-- breaks the framing after a request was written makes that request `interrupted` (it may have
-- run), naming the fault; and a change notice already written when a cached listing is asked for
-- is read first, so the cache is not served stale (spec/support/stdio_server.lua's modes).
local mcp = require "mcpclient"
local core = require "mcpclient.core"
local stdio = require "support.stdio"

local function connect(mode, extra)
  return mcp.connect(stdio.options(mode, extra))
end

local function quiet() end

describe("a stdio child's other lines", function()
  after_each(function()
    collectgarbage()
    collectgarbage()
    assert.equal(0, stdio.children().zombies)
  end)

  describe("an answer nobody waits for", function()
    it("is passed over and counted, and the next call is answered by the same child", function()
      local lines = {}
      local stderr = io.stderr
      finally(function() io.stderr = stderr end)  -- luacheck: ignore 122
      io.stderr = { write = function(_, text) lines[#lines + 1] = text end }  -- luacheck: ignore 122 (the trace)
      local conn <close> = connect("duplicate", { trace = true, log = quiet })
      assert.equal("twice", assert(conn:call_tool("echo")).text)
      local pid = conn:server().pid
      -- the first call's second answer is read by this one: passed over, and this one answered
      assert.equal("twice", assert(conn:call_tool("echo")).text)
      assert.equal(pid, conn:server().pid)
      assert.is_true(stdio.running(pid))
      assert.equal(1, conn.session.channel.dropped)
      local named
      for _, line in ipairs(lines) do
        if line:find("tools/call ok", 1, true) and line:find("passed over", 1, true) then named = line end
      end
      assert.is_truthy(named, table.concat(lines))
      assert.matches("1 answer to no waiting request %(id %d+%)", named)
    end)
  end)

  describe("a line that breaks the framing", function()
    -- (one call alone: stdio_spec's hostile server cases)
    it("after tools/call was written: every call waiting on that child is interrupted, naming the line", function()
      local conn <close> = connect("garbage", { log = quiet })
      assert(conn:list_tools())
      local pid = conn:server().pid
      local results = mcp.gather {
        function() return conn:call_tool("echo", { message = "one" }) end,
        function() return conn:call_tool("echo", { message = "two" }) end,
      }
      for i = 1, 2 do
        assert.is_nil(results[i][1])
        assert.equal("interrupted", results[i][3].kind)
        assert.matches("a line that is not JSON: this is not json", results[i][2], 1, true)
      end
      assert.is_false(stdio.running(pid))
    end)

    it("in answer to the opening, which acts on nothing: malformed", function()
      local conn <close> = connect("garbage_open", { log = quiet })
      local outcome, message, err = conn:ping()
      assert.is_nil(outcome)
      assert.equal("malformed", err.kind)
      assert.matches("starting up... this is not json", message, 1, true)
    end)
  end)

  describe("a change notice already written", function()
    for _, case in ipairs { { "written after the answer", 0.05 }, { "written with the answer", 0 } } do
      it("is read before a cached listing is answered (" .. case[1] .. ")", function()
        local conn <close> = connect("changing", { cache = true })
        assert.equal(1, #assert(conn:list_resources()))
        local _, listing = assert(conn:list_resources())
        assert.is_true(listing.cached)
        assert.equal("changed", assert(conn:call_tool("change", { delay = case[2] })).text)
        -- no turn of the engine meanwhile: what the child wrote waits where it is
        core.sleep(0.3)
        local listed
        listed, listing = assert(conn:list_resources())
        assert.is_nil(listing.cached)
        assert.equal(2, #listed)
      end)
    end
  end)
end)
