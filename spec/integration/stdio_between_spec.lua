-- A stdio server that ends between two operations (killed while nobody waits on it). The host
-- learns of it without asking the kernel per call: from the engine's turns (the child's exit) or,
-- when no turn ran since, from its stdin at the next write (nothing of the request went). Either
-- way the next operation sees what it always saw: the ending named in a warning ("it ended between
-- operations"), a new child opened, the request answered by it and written once.
local mcp = require "mcpclient"
local core = require "mcpclient.core"
local stdio = require "support.stdio"

-- Kill the child `pid` and wait until it has exited (a zombie of ours: it runs nothing).
local function kill_and_wait(pid)
  assert(os.execute("kill -9 " .. pid))
  local until_s = core.now() + 5
  while stdio.running(pid) and core.now() < until_s do os.execute("sleep 0.01") end
  assert.is_false(stdio.running(pid))
end

describe("a stdio server that ended between operations", function()
  after_each(function()
    collectgarbage()
    collectgarbage()
    assert.equal(0, stdio.children().zombies)
  end)

  for _, era in ipairs { "legacy", "modern" } do
    for _, turned in ipairs { false, true } do
      local how = turned and "an engine turn ran since" or "no engine turn ran since"
      it("is noticed at the next call, named in a warning, and the call goes to a new child once (" .. era
        .. ", " .. how .. ")", function()
        local logged = {}
        local conn <close> = mcp.connect(stdio.options(era, {
          log = function(level, text) logged[#logged + 1] = level .. " " .. text end }))
        assert.equal("Echo: one", assert(conn:call_tool("echo", { message = "one" })).text)
        local first = conn:server().pid
        kill_and_wait(first)
        if turned then core.engine_step(50) end
        local outcome, message = conn:call_tool("echo", { message = "two" })
        assert.is_table(outcome, message)
        assert.equal("Echo: two", outcome.text)
        local second = conn:server().pid
        assert.are_not.equal(first, second)
        local warned = 0
        for _, line in ipairs(logged) do
          if line:find("it ended between operations", 1, true) then
            warned = warned + 1
            assert.matches("^warning ", line)
            assert.matches("was killed by signal 9", line, 1, true)
          end
        end
        assert.equal(1, warned, table.concat(logged, "\n"))
        -- the new child was opened and then asked the call, once
        local asked = assert(conn:call_tool("asked")).text
        local _, calls = asked:gsub("tools/call", "")
        assert.equal(1, calls, asked)
        assert.matches(era == "legacy" and "^initialize .*tools/call$" or "^server/discover .*tools/call$", asked)
        assert.equal(second, conn:server().pid)
      end)
    end
  end
end)
