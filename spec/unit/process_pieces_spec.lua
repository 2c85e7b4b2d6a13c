-- core.spawn's handle: a long line that arrives in many small pieces is read whole (each piece
-- read by a turn of the engine or by read_line itself), and running() tells a child that ended,
-- from the engine's turns or from its stdin at the next write.
local core = require "mcpclient.core"
local stdio = require "support.stdio"

local LINE_MS = 10000

-- A child that writes `pieces` pieces of `size` bytes with no newline between them, the last one
-- ending in CR, then LF in a piece of its own, then the line "after"; each piece a write of its own.
local function piecewise(pieces, size)
  local script = string.format([[
io.stdout:setvbuf("no")
local piece = string.rep("y", %d)
for i = 1, %d do
  io.stdout:write(piece)
  if i %% 64 == 0 then os.execute("sleep 0.001") end
end
io.stdout:write("\r")
io.stdout:write("\n")
io.stdout:write("after\n")
]], size, pieces)
  return assert(core.spawn { argv = { "lua5.4", "-e", script } })
end

describe("core.spawn", function()
  it("reads a line that arrives in thousands of pieces whole, a CR split from its LF dropped", function()
    local proc <close> = piecewise(3000, 500)
    local line = assert(proc:read_line(LINE_MS))
    assert.equal(1500000, #line)
    assert.is_nil(line:find("[^y]"))
    assert.equal("after", proc:read_line(LINE_MS))
  end)

  it("reads such a line whole when the engine's turns read the pieces", function()
    local proc <close> = piecewise(2000, 300)
    local until_s = core.now() + LINE_MS / 1000
    local line, kind
    repeat
      core.engine_step(20)
      line, kind = proc:read_line(0)
    until line or kind ~= "timeout" or core.now() > until_s
    assert.equal(600000, #(line or ""))
    assert.is_nil(line:find("[^y]"))
    assert.equal("after", proc:read_line(LINE_MS))
  end)

  it("says a running child runs, and one that was killed does not once the engine's turns saw it end",
    function()
    local proc <close> = assert(core.spawn { argv = { "sleep", "30" } })
    assert.is_true(proc:running())
    assert.equal("running", proc:status())
    assert(os.execute("kill -9 " .. proc:pid()))
    local until_s = core.now() + 5
    while proc:running() and core.now() < until_s do core.engine_step(20) end
    assert.is_false(proc:running())
    assert.same({ "signalled", 9 }, { proc:status() })
  end)

  it("a child killed with no turn since: the next write finds its stdin closed and names how it ended",
    function()
    local proc <close> = assert(core.spawn { argv = { "sleep", "30" } })
    local pid = proc:pid()
    assert(os.execute("kill -9 " .. pid))
    local until_s = core.now() + 5
    while stdio.running(pid) and core.now() < until_s do os.execute("sleep 0.01") end
    local ok, kind, ending = proc:write("{}\n", 1000)
    assert.is_nil(ok)
    assert.equal("closed", kind)
    assert.matches("killed by signal 9", ending, 1, true)
    assert.is_false(proc:running())
  end)
end)
