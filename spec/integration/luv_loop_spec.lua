-- The library's luv bridge (mcp.loop{ luv = uv }): calls started with bridge.wrap wait through
-- libuv instead of blocking, so three slow calls to a stdio server run at once while a 10 ms timer
-- keeps ticking; a wait in a coroutine the bridge did not start blocks as without a hook; the
-- bridge's handles close. Each server child is the connection's and is stopped by its close.
local uv = require "luv"
local mcp = require "mcpclient"
local stdio = require "support.stdio"

describe("mcp.loop{ luv = uv }", function()
  after_each(function()
    mcp.loop {}
    uv.run() -- lets the closed handles go
  end)

  it("runs wrapped calls at once while the loop's own timer ticks", function()
    local conns = {}
    for i = 1, 3 do conns[i] = mcp.connect(stdio.options("legacy", { identifier = "s" .. i })) end
    for i = 1, 3 do assert(conns[i]:ping()) end -- each child started: what follows is the calls alone
    local bridge = mcp.loop { luv = uv }
    local results, left, ticks = {}, 3, 0
    local ticker = uv.new_timer()
    ticker:start(10, 10, function()
      ticks = ticks + 1
      if left == 0 then ticker:stop() end
    end)
    local started = mcp.now()
    for i = 1, 3 do
      bridge.wrap(function()
        results[i] = table.pack(conns[i]:call_tool("slow", { seconds = 1 }))
        left = left - 1
      end)
    end
    assert.equal(3, left) -- every call waits in the loop: none ran to its end inside wrap
    uv.run()
    local took = mcp.now() - started
    ticker:close()
    bridge.close()
    uv.run()
    for i = 1, 3 do
      assert.equal("slept", assert(results[i][1], results[i][2]).text)
      conns[i]:close()
    end
    -- at once, not one after the other (3 s); the timer ran meanwhile (generous: a loaded machine)
    assert.is_true(took < 2.5, took)
    assert.is_true(ticks >= 10, ticks)
  end)

  it("blocks a wait in a coroutine it did not start, as without a hook", function()
    local conn <close> = mcp.connect(stdio.options("legacy"))
    mcp.loop { luv = uv }
    local outcome
    local co = coroutine.create(function() outcome = conn:call_tool("echo", { message = "plain" }) end)
    assert(coroutine.resume(co))
    assert.equal("dead", coroutine.status(co))
    assert.equal("Echo: plain", outcome.text)
  end)

  it("refuses what is not the luv module, and wait with luv", function()
    assert.has_error(function() mcp.loop { luv = {} } end, "loop: 'luv' must be the luv module (require \"luv\")")
    assert.has_error(function() mcp.loop { luv = uv, wait = function() end } end,
      "loop: give either wait or luv, not both")
  end)
end)
