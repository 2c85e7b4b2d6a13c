--- A host for spec/unit/process_sigpipe_spec.lua, run as a process of its own (SIGPIPE's
--- disposition is the whole process's): it starts a child that reports how it sees SIGPIPE and
--- then closes its stdin, writes to it, and prints, one per line:
---   before <disposition>   the host's SIGPIPE before any child (default, ignored or caught)
---   child <disposition>    how the child sees it
---   write <ok> <kind>      what the write to the closed stdin returned
---   after <disposition>    the host's SIGPIPE after the write
---   alive                  the host lived through it
local core = require "mcpclient.core"

local SIGPIPE_BIT = 1 << 12  -- signal 13 in /proc's masks

-- How the status file `path` says this process handles SIGPIPE.
local function disposition(path)
  local masks = {}
  for line in io.lines(path) do
    local name, hex = line:match("^(Sig%a%a%a):%s*(%x+)")
    if name then masks[name] = tonumber(hex, 16) end
  end
  if masks.SigIgn & SIGPIPE_BIT ~= 0 then return "ignored" end
  if masks.SigCgt & SIGPIPE_BIT ~= 0 then return "caught" end
  return "default"
end

io.stdout:setvbuf("line")
print("before " .. disposition("/proc/self/status"))
-- the child copies its own status out (cat is exec'd by sh: it handles signals as sh was given
-- them), then closes stdin and stays a while, so the write meets a reader that is gone
local proc <close> = assert(core.spawn { argv = { "sh", "-c",
  "cat /proc/self/status | grep '^Sig'; exec 0<&-; echo closed; sleep 1" } })
local status = os.tmpname()
local out = assert(io.open(status, "w"))
while true do
  local line = assert(proc:read_line(5000))
  if line == "closed" then break end
  out:write(line, "\n")
end
out:close()
print("child " .. disposition(status))
os.remove(status)
local ok, kind = proc:write(string.rep("x", 200000), 2000)
print("write " .. tostring(ok) .. " " .. tostring(kind))
print("after " .. disposition("/proc/self/status"))
proc:close()
print("alive")
