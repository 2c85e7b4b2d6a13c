-- core.spawn and a child that closed its stdin: how the host is kept from SIGPIPE. A SIGPIPE at
-- its default is set to ignored once (a write learns of the closed pipe from EPIPE); one the host
-- ignores stays ignored; a handler the host installed is kept and never sees a SIGPIPE of ours
-- (each write blocks it). The child always starts with SIGPIPE at its default. The disposition is
-- the whole process's, so each case runs a host of its own (spec/support/sigpipe_host.lua).

local function sh_quote(s)
  return "'" .. s:gsub("'", "'\\''") .. "'"
end

-- Run the host with SIGPIPE as `disposition` says ("default" or "ignored", set by env(1) right
-- before it starts: a disposition of ignored is inherited across exec, and this process's own
-- may be ignored already by a child an earlier spec started) and `env` (NAME = value); its
-- report as a table, and what it wrote to stderr.
local function host(disposition, env)
  local err = os.tmpname()
  local vars = { LUA_CPATH = package.cpath, LUA_PATH = package.path }
  for k, v in pairs(env or {}) do vars[k] = v end
  local assign = {}
  for k, v in pairs(vars) do assign[#assign + 1] = k .. "=" .. sh_quote(v) end
  local signal = disposition == "ignored" and "--ignore-signal=PIPE" or "--default-signal=PIPE"
  local command = string.format("env %s %s lua5.4 spec/support/sigpipe_host.lua 2>%s", signal,
    table.concat(assign, " "), sh_quote(err))
  local p = assert(io.popen(command))
  local report = {}
  for line in p:lines() do
    local key, value = line:match("^(%a+)%s*(.*)$")
    report[key] = value
  end
  local fine, how, code = p:close()
  local f = assert(io.open(err))
  local stderr = f:read("a")
  f:close()
  os.remove(err)
  report.exit = fine and 0 or string.format("%s %s", how, code)
  return report, stderr
end

-- A preload that installs a SIGPIPE handler saying so on stderr, built once (cc is needed to
-- build the core anyway).
local handler_so
local function handler_library()
  if handler_so then return handler_so end
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir -p " .. sh_quote(dir)))
  local c = assert(io.open(dir .. "/handler.c", "w"))
  c:write([[
#include <signal.h>
#include <string.h>
#include <unistd.h>
static void seen(int sig) {
  (void)sig;
  (void)!write(2, "SIGPIPE reached the host's handler\n", 35);
}
__attribute__((constructor)) static void install(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = seen;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGPIPE, &sa, NULL);
}
]])
  c:close()
  handler_so = dir .. "/handler.so"
  assert(os.execute(string.format("cc -shared -fPIC -o %s %s", sh_quote(handler_so), sh_quote(dir .. "/handler.c"))))
  return handler_so
end

describe("core.spawn and SIGPIPE", function()
  it("a host at the default: SIGPIPE becomes ignored, the write fails closed, the host lives, the child "
    .. "sees the default", function()
    local report, stderr = host("default")
    assert.equal("default", report.before, stderr)
    assert.equal("default", report.child)
    assert.equal("nil closed", report.write)
    assert.equal("ignored", report.after)
    assert.equal("", report.alive)
    assert.equal(0, report.exit)
  end)

  it("a host that ignores SIGPIPE: it stays ignored, and the child still sees the default", function()
    local report, stderr = host("ignored")
    assert.equal("ignored", report.before, stderr)
    assert.equal("default", report.child)
    assert.equal("nil closed", report.write)
    assert.equal("ignored", report.after)
    assert.equal(0, report.exit)
  end)

  it("a host with a handler of its own: the handler is kept and never sees the write's SIGPIPE", function()
    local preload = handler_library()
    local inherited = os.getenv("LD_PRELOAD")  -- a sanitizer's runtime stays first
    local report, stderr = host("default", { LD_PRELOAD = inherited and (inherited .. " " .. preload) or preload })
    assert.equal("caught", report.before, stderr)
    assert.equal("default", report.child)
    assert.equal("nil closed", report.write)
    assert.equal("caught", report.after)
    assert.equal("", report.alive)
    assert.is_nil(stderr:find("SIGPIPE reached", 1, true), stderr)
    assert.equal(0, report.exit)
  end)
end)
