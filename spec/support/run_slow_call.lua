--- The other process of spec/integration/run_cancel_spec.lua: start a run on
--- the store at <db> and call the peer's slow tool in it.
--
--   lua5.4 spec/support/run_slow_call.lua <db path> <seconds> [<lease seconds>]
--
-- (LUA_PATH / LUA_CPATH must reach lua/ and build/.) Prints, flushed line by line:
--   started <run uid>
--   returned <core.now() at return, monotonic seconds> <run status> <is_error> <err.kind or -> <in_flight or ->
--   text <the result text on one line>
local core = require "mcpclient.core"
local run = require "mcpclient.agent.run"
local store = require "mcpclient.agent.store"

local path = arg[1] or error("usage: run_slow_call.lua <db path> <seconds>")
local seconds = tonumber(arg[2] or "10")
local lease = math.tointeger(tonumber(arg[3] or "900"))

local function say(...)
  io.stdout:write(...)
  io.stdout:write("\n")
  io.stdout:flush()
end

local s = assert(store.open(path))
local r = assert(run.start(s, {
  user = { name = "ops", uid = 1, admin = true },
  configuration = { identifier = "cfg-local", provider = "p-local" },
  providers = { ["p-local"] = { zone = "local" } },
  lease_seconds = lease,
}))
say("started ", r.uid)
local result = r:invoke("mcp_peer_slow", { seconds = seconds })
local returned = core.now()
local err = result.err or {}
say(string.format("returned %.6f %s %s %s %s", returned, r.status, tostring(result.is_error), err.kind or "-",
  err.in_flight and "in_flight" or "-"))
say("text ", (result.text:gsub("[\r\n]", " ")))
r:finish()
s:close()
