-- A host's wait hook (mcp.loop) that raises: the raise ends the operation in the host's
-- coroutine, and what the operation held is given back although Lua closes no variable of a
-- coroutine an error ended: the engine stops asking for a turn every 10 ms (mcp.engine.timeout()
-- is nil again), the call's progress listener is off its session, and the connection still works.
local mcp = require "mcpclient"
local stdio = require "support.stdio"

describe("a wait hook that raises", function()
  after_each(function()
    mcp.loop {}
    collectgarbage()
    collectgarbage()
    assert.same({ zombies = 0, alive = 0 }, stdio.children())
  end)

  it("ends the operation with its raise and leaves nothing behind", function()
    local conn <close> = mcp.connect(stdio.options("legacy"))
    assert(conn:ping()) -- open: the call below is the only exchange in flight
    assert.is_nil(mcp.engine.timeout())
    local hooked = 0
    mcp.loop { wait = function()
      hooked = hooked + 1
      error("the host's loop broke", 0)
    end }
    local co = coroutine.create(function()
      return conn:call_tool("slow", { seconds = 0.2 }, { on_progress = function() end })
    end)
    local ok, err = coroutine.resume(co)
    assert.is_false(ok)
    assert.equal("the host's loop broke", err)
    assert.equal(1, hooked)
    assert.equal("dead", coroutine.status(co))
    -- the host's next look at the engine: nothing is in flight, nothing needs a turn
    assert.is_nil(mcp.engine.timeout())
    assert.is_nil(next(conn.session.progress_to))
    mcp.loop {}
    local outcome = assert(conn:call_tool("echo", { message = "after" }))
    assert.equal("Echo: after", outcome.text)
  end)

  it("leaves nothing behind when the host drops the coroutine at once", function()
    local conn <close> = mcp.connect(stdio.options("legacy"))
    assert(conn:ping())
    mcp.loop { wait = function() error("the host's loop broke", 0) end }
    local ok = coroutine.resume(coroutine.create(function()
      return conn:call_tool("slow", { seconds = 0.2 }, { on_progress = function() end })
    end))
    assert.is_false(ok)
    collectgarbage()
    collectgarbage() -- the dead coroutine is nobody's any more: the engine still closes it
    assert.is_nil(mcp.engine.timeout())
    assert.is_nil(next(conn.session.progress_to))
  end)

  it("is counted out when the host closes the coroutine while the hook waits", function()
    local conn <close> = mcp.connect(stdio.options("legacy"))
    assert(conn:ping())
    mcp.loop { wait = function() coroutine.yield("waiting") end }
    local co = coroutine.create(function()
      return conn:call_tool("slow", { seconds = 0.2 }, { on_progress = function() end })
    end)
    local ok, what = coroutine.resume(co)
    assert.is_true(ok)
    assert.equal("waiting", what)
    assert.equal(0.01, mcp.engine.timeout()) -- an operation waits in the hook
    assert.is_true(coroutine.close(co))
    assert.is_nil(mcp.engine.timeout())
    assert.is_nil(next(conn.session.progress_to))
  end)
end)
