-- A server's descendant that leaves its process group and session (a double fork and setsid)
-- holding the server's output: close() ends it too, promptly, and reaps it (the client is the
-- children's subreaper while a child runs); at os.exit the same. A process the host started
-- itself is never touched. The server is spec/support/stdio_server.lua in its escape mode.
local core = require "mcpclient.core"
local mcp = require "mcpclient"
local shell = require "support.shell"
local stdio = require "support.stdio"

-- Wait (bounded) until pid is no longer running; true when it is gone.
local function gone_within(pid, seconds)
  local until_s = core.now() + seconds
  while stdio.running(pid) do
    if core.now() > until_s then return false end
    core.sleep(0.01)
  end
  return true
end

local function kill(pid)
  os.execute("kill -KILL " .. pid .. " 2>/dev/null")
end

describe("a server's descendant that left its group", function()
  local escaped
  after_each(function()
    if escaped and stdio.running(escaped) then kill(escaped) end -- only when a case failed
    escaped = nil
    assert.same({ zombies = 0, alive = 0 }, stdio.children())
  end)

  it("is ended and reaped by close, which returns promptly", function()
    local conn = mcp.connect(stdio.options("escape"))
    escaped = assert(tonumber(assert(conn:call_tool("grandchild")).text))
    assert.is_true(stdio.running(escaped))
    -- it is in a session of its own: the group's signals never reach it
    local stat = assert(io.open("/proc/" .. escaped .. "/stat")):read("l")
    local sid = tonumber(stat:match("^%d+ %b() %a %d+ %d+ (%d+)"))
    assert.equal(escaped, sid)
    local t0 = core.now()
    conn:close()
    local took = core.now() - t0
    assert.is_false(stdio.running(escaped))
    assert.is_nil(io.open("/proc/" .. escaped .. "/stat")) -- reaped: not even a zombie is left
    -- the server exits at stdin's close: no grace is waited out
    assert.is_true(took < 1.5, "close took " .. took .. " s")
  end)

  it("is ended by core.spawn's close, and a process the host started is left alone", function()
    local own = assert(io.popen("echo $$; exec sleep 1000"))
    local own_pid = assert(tonumber(own:read("l")))
    local proc = assert(core.spawn { argv = stdio.command("escape"), env = stdio.env() })
    assert(proc:write('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"grandchild"}}\n', 5000))
    local line = assert(proc:read_line(10000))
    escaped = assert(tonumber(core.json.decode(line).result.content[1].text))
    assert.is_true(stdio.running(escaped))
    proc:close()
    assert.is_false(stdio.running(escaped))
    assert.is_true(stdio.running(own_pid))
    kill(own_pid)
    own:close()
  end)

  it("is ended when the host leaves with os.exit", function()
    local lua, server = table.unpack(stdio.command("escape"), 1, 2)
    -- the server's whole environment as the other cases give it (under ASan its preload too)
    local env = {}
    for name, value in pairs(stdio.env()) do env[#env + 1] = string.format("[%q] = %q", name, value) end
    local script = string.format([[
      local core = require "mcpclient.core"
      local p = core.spawn { argv = { %q, %q, "escape" }, env = { %s } }
      p:write('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"grandchild"}}\n', 5000)
      print(core.json.decode(p:read_line(10000)).result.content[1].text)
      io.stdout:flush()
      os.exit(0)]], lua, server, table.concat(env, ", "))
    local host = assert(io.popen(string.format("LUA_CPATH=%s lua5.4 -e %s", shell.quote(stdio.env().LUA_CPATH),
      shell.quote(script))))
    escaped = assert(tonumber(host:read("l")))
    host:close() -- waits for the host to exit: its exit handler has run
    assert.is_true(gone_within(escaped, 2))
  end)
end)
