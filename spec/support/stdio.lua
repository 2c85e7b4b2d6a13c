--- What the stdio specs share: the command of the scripted server
--- (spec/support/stdio_server.lua) in a mode, the env it needs, and counts
--- of this process's children and descriptors.
local stdio = {}

local function first_line(file)
  local line = file:read("l")
  file:close()
  return line
end

local root = first_line(assert(io.popen("pwd")))

-- The child inherits no LUA_* variable: the C core's path is passed in env,
-- absolute, and a sanitizer's preload when this run has one.
local function absolute(path)
  return (path:gsub("%./", root .. "/"))
end

function stdio.env(extra)
  local env = { LUA_CPATH = absolute(package.cpath), LUA_PATH = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua" }
  for _, name in ipairs { "LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS" } do env[name] = os.getenv(name) end
  for k, v in pairs(extra or {}) do env[k] = v end
  return env
end

function stdio.command(mode, arg)
  return { "lua5.4", root .. "/spec/support/stdio_server.lua", mode or "legacy", arg }
end

--- connect options for the scripted server in `mode`, with `extra` over them.
function stdio.options(mode, extra)
  local options = { identifier = "fake", command = stdio.command(mode), env = stdio.env(), health = function() end,
    budget = 10 }
  for k, v in pairs(extra or {}) do options[k] = v end
  return options
end

local self_pid = first_line(assert(io.open("/proc/self/stat"))):match("^(%d+)")
stdio.pid = tonumber(self_pid)

--- This process's children by state: { zombies = n, alive = n }.
function stdio.children()
  local counts = { zombies = 0, alive = 0 }
  local p = assert(io.popen("ps -o ppid=,stat= -e"))
  for line in p:lines() do
    local ppid, stat = line:match("^%s*(%d+)%s+(%S+)")
    if tonumber(ppid) == stdio.pid then
      if stat:find("Z") then counts.zombies = counts.zombies + 1 else counts.alive = counts.alive + 1 end
    end
  end
  p:close()
  counts.alive = counts.alive - 1 -- the ps itself (its sh is exec'd away)
  return counts
end

--- How many descriptors this process holds. Probed through /proc/self/fdinfo, which opens none
--- of them and starts no child: a listing child (`ls /proc/<pid>/fd`) can run before this process
--- has closed its own copy of the listing pipe's far end, and then counts one descriptor too many.
--- The probe's own descriptor is counted every time, alike before and after.
function stdio.fds()
  local status = assert(io.open("/proc/self/status"))
  local size = tonumber(status:read("a"):match("FDSize:%s*(%d+)"))
  status:close()
  local n = 0
  for fd = 0, size - 1 do
    local f = io.open("/proc/self/fdinfo/" .. fd)
    if f then
      n = n + 1
      f:close()
    end
  end
  return n
end

--- Is process `pid` running (not gone, not a zombie)?
function stdio.running(pid)
  local f = io.open("/proc/" .. pid .. "/stat")
  if not f then return false end
  local stat = f:read("l")
  f:close()
  return stat ~= nil and not stat:match("^%d+ %b() ([ZX])")
end

return stdio
