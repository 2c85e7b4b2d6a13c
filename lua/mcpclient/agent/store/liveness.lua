--- The liveness repository of the store: when a server last answered and
-- how fast (mcp_server.last_contact, last_latency_ms), stamped by the
-- health recorder a connection calls after each completed operation. A
-- contact touches nothing else, so it never overwrites what an operator or
-- an import wrote, and it never fails or holds up the call it observes.
local core = require "mcpclient.agent.store.core"

local check_uid, check_time, adapter_of, exec = core.check_uid, core.check_time, core.adapter_of, core.exec

local liveness = {}

-- A contact is a stale timestamp at worst: it never holds a tool's answer
-- back for the whole busy timeout of a locked database.
liveness.CONTACT_BUSY_TIMEOUT_MS = 200

--- Liveness: touches only last_contact and last_latency_ms, so a contact
--- never overwrites what an operator or an import wrote. → true
-- @param latency_ms whole milliseconds (the connection rounds once, before it
--   calls its recorder)
function liveness.record_contact(self, uid, at, latency_ms)
  check_uid(uid)
  at = check_time(at, "at")
  if math.type(latency_ms) ~= "integer" or latency_ms < 0 then
    error("latency_ms must be a non-negative integer", 2)
  end
  local function stamp()
    return exec(self, "record a contact with server " .. uid,
      "UPDATE mcp_server SET last_contact = ?, last_latency_ms = ? WHERE uid = ?", { at, latency_ms, uid })
  end
  local adapter = adapter_of(self)
  if adapter.with_busy_timeout then return adapter:with_busy_timeout(liveness.CONTACT_BUSY_TIMEOUT_MS, stamp) end
  return stamp()
end

--- A recorder for mcp.connect{ health = ... }: stamps the contact and
-- raises when that fails, so the client logs its warning and the operation
-- still returns. `log`, when given, is told first as log("warning", message)
-- (a host that keeps its own log). A uid <= 0 records nothing.
function liveness.health_recorder(self, server_uid, log)
  check_uid(server_uid, "server_uid")
  if log ~= nil and type(log) ~= "function" then error("log must be a function", 2) end
  if server_uid <= 0 then return function() end end
  return function(identifier, latency_ms)
    local ok, message = self:record_contact(server_uid, os.time(), latency_ms)
    if not ok then
      local text = string.format('An MCP liveness observation for "%s" could not be stored: %s',
        tostring(identifier), message)
      if log then pcall(log, "warning", text) end
      error(message, 0)
    end
  end
end

return liveness
