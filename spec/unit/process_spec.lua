-- core.spawn: a child process on pipes (csrc/core/process.c). Each rule of the
-- spawn, the framing and the shutdown, against real programs.
--
-- A `sleep N` inside a child's script keeps the child running while the spec looks at it (or
-- splits its writes, or is the child that never reads): it is the scenario, not a wait of the
-- spec's. The spec waits for events (a line, a file, the child gone), each bounded generously
-- since it returns as soon as the event happens: the machine running the suite may be loaded.
local core = require "mcpclient.core"
local stdio = require "support.stdio"
local wait_for = require("support.wait").for_value

-- How long a read waits for a line the child is about to write (returns as soon as it comes).
local LINE_MS = 30000

local function lines_of(proc)
  local out = {}
  while true do
    local line, kind = proc:read_line(LINE_MS)
    if not line then return out, kind end
    out[#out + 1] = line
  end
end

local function elapsed(fn)
  local t0 = core.now()
  local a, b, c = fn()
  return core.now() - t0, a, b, c
end

describe("core.spawn", function()
  it("passes argv as it is, never through a shell", function()
    local proc <close> = assert(core.spawn { argv = { "echo", "a; touch /tmp/mcp-pwned $(id)" } })
    assert.same({ "a; touch /tmp/mcp-pwned $(id)" }, (lines_of(proc)))
  end)

  it("starts the child in a process group of its own", function()
    local proc <close> = assert(core.spawn { argv = { "sh", "-c", "ps -o pgid= -p $$" } })
    local pgid = tonumber((lines_of(proc))[1])
    assert.equal(proc:pid(), pgid)
    assert.are_not.equal(stdio.pid, pgid)
  end)

  it("gives the child the allow-list of the environment plus env, and nothing else", function()
    local script = [[
      local core = require "mcpclient.core"
      local p = core.spawn { argv = { "env" }, env = { GIVEN = "yes", PATH = "/usr/bin:/bin" } }
      while true do local l = p:read_line(5000) if not l then break end print(l) end
      p:close()]]
    -- a sanitizer's runtime goes along (a module built for it loads only under it); the child
    -- started by core.spawn does not inherit it either
    local preload = os.getenv("LD_PRELOAD")
    local cmd = string.format("env -i HOME=/root PATH=/usr/bin:/bin SECRET_TOKEN=hunter2 LC_TIME=C LANG=C.UTF-8 "
      .. "'BASH_FUNC_x%%%%=() { :; }' LUA_CPATH=%q %s lua5.4 -e %q", package.cpath,
      preload and string.format("LD_PRELOAD=%q ASAN_OPTIONS=detect_leaks=0", preload) or "", script)
    local p = assert(io.popen(cmd))
    local seen = {}
    for line in p:lines() do
      local name, value = line:match("^([^=]+)=(.*)$")
      seen[name] = value
    end
    p:close()
    assert.same({ HOME = "/root", PATH = "/usr/bin:/bin", LC_TIME = "C", LANG = "C.UTF-8", GIVEN = "yes" }, seen)
  end)

  it("leaves no other descriptor of the host open in the child", function()
    local held = assert(io.open("/dev/null"))  -- fopen: not close-on-exec
    local proc <close> = assert(core.spawn { argv = { "ls", "/proc/self/fd" } })
    local fds = lines_of(proc)
    held:close()
    table.sort(fds)
    assert.same({ "0", "1", "2", "3" }, fds)  -- 3: ls's own directory handle
  end)

  it("names a program that is not found, as kind transport", function()
    local proc, kind, detail = core.spawn { argv = { "mcp-no-such-program-x" } }
    assert.is_nil(proc)
    assert.equal("transport", kind)
    assert.matches('the program "mcp%-no%-such%-program%-x" was not found', detail)
    assert.equal("transport", select(2, core.spawn { argv = { "/nonexistent/bin/tool" } }))
  end)

  it("starts the child in cwd, and refuses a cwd that is no directory", function()
    local proc <close> = assert(core.spawn { argv = { "pwd" }, cwd = "/tmp" })
    assert.same({ "/tmp" }, (lines_of(proc)))
    local none, kind, detail = core.spawn { argv = { "pwd" }, cwd = "/nonexistent-dir" }
    assert.is_nil(none)
    assert.equal("transport", kind)
    assert.matches("cwd", detail)
  end)

  it("raises on misuse", function()
    assert.has_error(function() core.spawn { argv = {} } end)
    assert.has_error(function() core.spawn { argv = { "" } } end)
    assert.has_error(function() core.spawn { argv = { "echo", "a\0b" } } end)
    assert.has_error(function() core.spawn { argv = { "echo" }, env = { ["A=B"] = "x" } } end)
    assert.has_error(function() core.spawn { argv = { "echo" }, env = { A = 1 } } end)
  end)

  it("keeps the last 64 KiB of stderr", function()
    local proc <close> = assert(core.spawn { argv = { "sh", "-c",
      "head -c 200000 /dev/zero | tr '\\0' a >&2; printf END >&2; echo done" } })
    assert.same({ "done" }, (lines_of(proc)))
    local err = proc:stderr()
    assert.equal(65536, #err)
    assert.equal("aaaEND", err:sub(-6))
  end)

  it("reads stderr the child wrote past the ring's end before it was asked", function()
    -- 70 000 bytes, none drained before stderr() is called: the ring wraps while it reads. The
    -- child makes a file once the pipe holds its 64 KiB (the rest then waits for room) and
    -- another once all of it is written; nothing turns the engine, so only stderr() reads.
    local full, all = os.tmpname(), os.tmpname()
    os.remove(full)
    os.remove(all)
    local proc <close> = assert(core.spawn { argv = { "sh", "-c",
      "head -c 65536 /dev/zero | tr '\\0' b >&2; : >\"$1\"; "
      .. "head -c 4454 /dev/zero | tr '\\0' b >&2; printf 0123456789 >&2; : >\"$2\"; sleep 30", "sh", full, all } })
    local function exists(path)
      local f = io.open(path)
      if f then f:close() end
      return f ~= nil
    end
    wait_for("the child to fill the stderr pipe", 60, function() return exists(full) end)
    assert.equal(string.rep("b", 65536), proc:stderr())  -- the pipe's 64 KiB: the child waits with the rest
    wait_for("the child to write the rest of its stderr", 60, function() return exists(all) end)
    assert.equal(string.rep("b", 65526) .. "0123456789", proc:stderr())
    os.remove(full)
    os.remove(all)
  end)

  it("reads lines split across writes, strips CR, passes over blank lines", function()
    -- the child's sleeps split a line across writes: that is what is read here
    local proc <close> = assert(core.spawn { argv = { "sh", "-c",
      "printf '{\"a\":'; sleep 0.1; printf '1}\\r\\n\\n\\n'; sleep 0.1; printf '{\"b\":2}\\n'" } })
    assert.same({ '{"a":1}', '{"b":2}' }, (lines_of(proc)))
  end)

  it("refuses a line over the read cap and reads no further", function()
    local proc <close> = assert(core.spawn { argv = { "sh", "-c",
      "head -c 3145728 /dev/zero | tr '\\0' a; echo; echo after" } })
    local line, kind, detail = proc:read_line(5000)
    assert.is_nil(line)
    assert.equal("malformed", kind)
    assert.matches("2097152", detail)
    assert.equal("closed", select(2, proc:read_line(100)))
  end)

  it("bounds a write to a child that never reads its stdin", function()
    local proc <close> = assert(core.spawn { argv = { "sleep", "30" } })
    local took, ok, kind, written = elapsed(function() return proc:write(string.rep("x", 1024 * 1024), 200) end)
    assert.is_nil(ok)
    assert.equal("timeout", kind)
    assert.is_true(written > 0 and written < 1024 * 1024)
    -- the write's own 200 ms bound, not the child's 30 s life, ends it (a generous upper bound: the
    -- machine may be loaded)
    assert.is_true(took >= 0.19 and took < 10, took)
  end)

  it("reports a child that closed its stdin as closed, with its exit status, and the host lives on", function()
    local proc <close> = assert(core.spawn { argv = { "sh", "-c", "exec 0<&-; echo ready; sleep 0.2; exit 4" } })
    assert.equal("ready", proc:read_line(LINE_MS))
    local ok, kind, ending = proc:write(string.rep("x", 200000), 2000)
    assert.is_nil(ok)
    assert.equal("closed", kind)
    assert.is_string(ending)
    proc:close()
    assert.equal("exited", (proc:status()))
  end)

  it("names how a child that died ended", function()
    local proc <close> = assert(core.spawn { argv = { "sh", "-c", "kill -9 $$" } })
    local line, kind, ending = proc:read_line(LINE_MS)
    assert.is_nil(line)
    assert.equal("closed", kind)
    assert.matches("killed by signal 9", ending)
    local other <close> = assert(core.spawn { argv = { "sh", "-c", "exit 7" } })
    assert.equal("exited with status 7", select(3, other:read_line(LINE_MS)))
  end)

  describe("shutdown", function()
    it("is quick for a child that exits when stdin closes", function()
      local proc = assert(core.spawn { argv = { "cat" } })
      local took, ending = elapsed(function() return proc:close() end)
      assert.equal("exited with status 0", ending)
      assert.is_true(took < 2, took)  -- inside the 2 s the child is given before SIGTERM: no signal was needed
      assert.equal(ending, proc:close())  -- idempotent
      assert.is_nil(proc:pid())
    end)

    it("escalates to SIGTERM, then SIGKILL, for the whole group", function()
      local proc = assert(core.spawn { argv = { "sh", "-c",
        "trap '' TERM; (trap '' TERM; exec sleep 100) & echo $!; exec 0<&-; while :; do sleep 1; done" } })
      local grandchild = tonumber(proc:read_line(LINE_MS))
      assert.is_true(stdio.running(grandchild))
      local took, ending = elapsed(function() return proc:close() end)
      assert.matches("signal 9", ending)
      -- 0.5 s after stdin's close, 2 s after SIGTERM, then no endless wait (generous: the machine may be loaded)
      assert.is_true(took >= 2.4 and took < 15, took)
      assert.is_false(stdio.running(grandchild))
    end)

    it("gives a child that ignores stdin's close 0.5 s, not 2, before SIGTERM", function()
      -- it never reads stdin (as a Node server kept alive by a timer) and ends at SIGTERM
      local proc = assert(core.spawn { argv = { "sh", "-c", "echo up; exec sleep 100" } })
      assert.equal("up", proc:read_line(LINE_MS))
      local took, ending = elapsed(function() return proc:close() end)
      assert.equal("was killed by signal 15 (Terminated)", ending)
      assert.is_true(took >= 0.45 and took < 1.9, took)
    end)

    it("ends what a child that exited left in its group", function()
      local proc = assert(core.spawn { argv = { "sh", "-c", "sleep 100 & echo $!; read x; exit 0" } })
      local grandchild = tonumber(proc:read_line(LINE_MS))
      local took = elapsed(function() return proc:close() end)
      assert.is_true(took < 2, took)  -- inside the 2 s before SIGTERM: the group is ended once the child exits
      assert.is_false(stdio.running(grandchild))
    end)

    it("runs from the garbage collector", function()
      local pid
      do
        local proc = assert(core.spawn { argv = { "cat" } })
        pid = proc:pid()
      end
      collectgarbage()
      collectgarbage()
      assert.is_false(stdio.running(pid))
      assert.equal(0, stdio.children().zombies)
    end)

    it("runs at interpreter exit, even through os.exit", function()
      local script = [[
        local core = require "mcpclient.core"
        local p = core.spawn { argv = { "sh", "-c", "trap '' TERM; exec sleep 100" } }
        _G.keep = p
        print(p:pid())
        io.stdout:flush()
        os.exit(0)]]
      local p = assert(io.popen(string.format("LUA_CPATH=%q lua5.4 -e %q", package.cpath, script)))
      local pid = tonumber(p:read("l"))
      p:close()
      assert.is_false(stdio.running(pid))
    end)
  end)
end)

-- The engine owns a child's stdout and stderr for the child's life: each turn
-- of it reads whichever is ready, so a waiter only turns the engine and takes
-- what the turn read (no watch per wait), and nothing left unread keeps the
-- engine awake.
describe("core.spawn in the engine", function()
  -- Turns the engine until done() holds (at most 60 s: it returns as soon as it holds); returns
  -- whether it did.
  local function turn_until(done)
    local stop = core.now() + 60
    while not done() do
      if core.now() > stop then return false end
      core.engine_step(100)
    end
    return true
  end

  it("reads the child's answer in the turn that wakes for it, and read_line(0) takes it from there", function()
    local proc <close> = assert(core.spawn { argv = { "sh", "-c", "read x; echo got $x; echo said >&2; sleep 5" } })
    assert.is_true(proc:write("a\n", 1000))
    assert.same({ nil, "timeout" }, { proc:read_line(0) })  -- nothing is read but by a turn
    local took = elapsed(function() return core.engine_step(20000) end)
    assert.is_true(took < 10, took)  -- woken by the answer, not by the end of the wait
    local line
    assert.is_true(turn_until(function()
      line = line or proc:read_line(0)
      return line ~= nil and proc:stderr() == "said\n"
    end))
    assert.equal("got a", line)
  end)

  it("is not kept awake by what a child writes while nobody waits", function()
    -- stderr is written before stdout: once the line is read, both have been
    local proc <close> = assert(core.spawn { argv = { "sh", "-c", "echo noise >&2; echo unasked; sleep 5" } })
    local line
    assert.is_true(turn_until(function()
      line = proc:read_line(0)
      return line ~= nil
    end))
    assert.equal("unasked", line)
    core.engine_step(0)
    -- both pipes are open and read empty by the turns: a turn waits its whole time, the engine's descriptor is quiet
    local took = elapsed(function() return core.engine_step(100) end)
    assert.is_true(took >= 0.09, took)
    assert.is_nil(core.fd_ready(core.engine_pollfd(), "r"))
    assert.equal("noise\n", proc:stderr())
  end)

  it("stops reading stdout at the read cap, so the engine does not spin, and read_line names it", function()
    local proc <close> = assert(core.spawn { argv = { "sh", "-c",
      "head -c 3145728 /dev/zero | tr '\\0' a; echo; sleep 5" } })
    -- turns read until the cap; from then on stdout is left to the child's full pipe and a turn waits
    assert.is_true(turn_until(function() return elapsed(function() return core.engine_step(100) end) >= 0.09 end))
    local line, kind, detail = proc:read_line(0)
    assert.is_nil(line)
    assert.equal("malformed", kind)
    assert.matches("2097152", detail)
  end)

  it("refuses to have a descriptor it reads itself watched by a waiter", function()
    local proc <close> = assert(core.spawn { argv = { "sleep", "5" } })
    local out, err = proc:fds()
    assert.has_error(function() core.engine_watch(out, "r") end)
    assert.has_error(function() core.engine_watch(err, "r") end)
    core.engine_watch(out, nil)  -- unwatching it is no misuse: it stays the engine's
    proc:close()
    local r, w = core.pipe()  -- the numbers a closed child's pipes free are anyone's again
    core.engine_watch(r, "r")
    core.engine_watch(r, nil)
    core.fd_close(r)
    core.fd_close(w)
  end)
end)

describe("core.spawn in the engine, past the read cap", function()
  it("gives stdout back to the engine once the lines read bring the buffer under the cap", function()
    -- 2 299 990 bytes of 11-byte lines nobody asked for, then an answer to what is written
    local proc <close> = assert(core.spawn { argv = { "sh", "-c",
      "yes abcdefghij | head -c 2299990; read x; echo got $x; sleep 5" } })
    -- turns read until the cap (nothing is taken off): then turns wait, stdout no longer the engine's
    -- (three waits in a row: the child is held up by its full pipe, not by the machine's load)
    local stop, waited = core.now() + 60, 0
    repeat
      waited = elapsed(function() return core.engine_step(100) end) >= 0.09 and waited + 1 or 0
    until waited == 3 or core.now() > stop
    local count = 0
    while count < 209090 and core.now() < stop do
      core.engine_step(100)
      local line = proc:read_line(0)
      while line do
        count = count + 1
        line = proc:read_line(0)
      end
    end
    assert.equal(209090, count)
    assert.is_true(proc:write("a\n", 1000))
    local took = elapsed(function() return core.engine_step(20000) end)
    assert.is_true(took < 10, took)  -- woken by the answer: stdout is the engine's again
    local line
    stop = core.now() + 60
    repeat
      line = proc:read_line(0)
      if not line then core.engine_step(100) end
    until line or core.now() > stop
    assert.equal("got a", line)
  end)
end)
