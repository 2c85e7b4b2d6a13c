--- Worker processes of the multi-process run specs (task_durable_spec, run_waiting_spec): hosts
--- of one run on a shared store, each a script of spec/support/ started by the spec.
---
--- In a worker script: say (one line out, flushed), pid, one_line and options (the run options
--- every worker uses, plus its own). In a spec: ENV (the module paths a worker and the operator
--- command are started with, and no user data directory), start, stop, scratch (its temporary
--- files) and mcpclient (the operator command on a worker's store).
local worker = {}

--- Write the arguments as one line on stdout, at once: the spec reads it while the worker runs.
function worker.say(...)
  io.stdout:write(...)
  io.stdout:write("\n")
  io.stdout:flush()
end

--- This process's id (the owner names carry it).
function worker.pid()
  local f = io.open("/proc/self/stat", "r")
  local text = f and f:read("l") or "0"
  if f then f:close() end
  return text:match("^(%d+)")
end

--- A result's text on one line.
function worker.one_line(text)
  return (tostring(text):gsub("[\r\n]", " "))
end

--- The run options of a worker: an admin, the local zone's configuration, messages to stderr,
--- and `extra` over them.
function worker.options(extra)
  local options = {
    user = { name = "ops", uid = 1, admin = true },
    configuration = { identifier = "cfg-local", provider = "p-local" },
    providers = { ["p-local"] = { zone = "local" } },
    log = function(_, message) io.stderr:write(message, "\n") end,
  }
  for k, v in pairs(extra or {}) do options[k] = v end
  return options
end

local peers, quote -- the spec's side only: a worker process never loads them
local function spec_side()
  if not peers then
    peers, quote = require "support.peers", require("support.shell").quote
    worker.ENV = string.format("LUA_PATH=%s LUA_CPATH=%s XDG_DATA_HOME=/nonexistent/mcpclient-spec",
      quote(peers.root .. "/lua/?.lua;" .. peers.root .. "/lua/?/init.lua;" .. peers.root .. "/spec/?.lua;;"),
      quote(peers.root .. "/build/?.so;;"))
  end
end

--- Start spec/support/<script> on the store at `location` with `words` (already quoted where
--- needed), from the repository's root: its stdout goes to `out`, its stderr to out .. ".err".
--- → { pid, pipe }
function worker.start(script, location, words, out)
  spec_side()
  local pipe = assert(io.popen("echo $$; cd " .. quote(peers.root) .. " && " .. worker.ENV
    .. " exec lua5.4 spec/support/" .. script .. " " .. quote(location) .. " " .. words .. " >" .. quote(out)
    .. " 2>" .. quote(out .. ".err") .. " </dev/null"))
  return { pid = math.tointeger(tonumber(pipe:read("l"))), pipe = pipe }
end

--- End a worker started by start: SIGKILL when it still runs, then its pipe closed.
function worker.stop(child)
  spec_side()
  if peers.alive(child.pid) then os.execute("kill -KILL " .. child.pid .. " 2>/dev/null") end
  child.pipe:close()
end

--- Temporary paths for a spec's stores, worker outputs and control files: :path() makes one,
--- :remove() deletes every one made so far with the files beside it (-wal, -shm, .err).
function worker.scratch()
  local paths = {}
  return {
    path = function()
      local path = os.tmpname()
      paths[#paths + 1] = path
      return path
    end,
    remove = function()
      for _, path in ipairs(paths) do
        for _, suffix in ipairs { "", "-wal", "-shm", ".err" } do os.remove(path .. suffix) end
      end
      paths = {}
    end,
  }
end

--- The operator command on the store at `location`, as a worker would run it: its output and
--- stderr together. → text
function worker.mcpclient(location, words)
  spec_side()
  local pipe = assert(io.popen("cd " .. quote(peers.root) .. " && " .. worker.ENV .. " lua5.4 bin/mcpclient --db "
    .. quote(location) .. " " .. words .. " 2>&1"))
  local text = pipe:read("a")
  pipe:close()
  return text
end

return worker
