--- The trace switch: one line on stderr per exchange of a connection (the
--- method, the outcome with the HTTP status when there was one, the time
--- taken, the bytes received), for an operator asking "what did it send?".
--
-- On with connect's `trace = true`, or MCPCLIENT_TRACE=1 in the environment
-- when the option is not given. A line carries no body, no header, no session
-- id and no credential: the method names are this client's own, the
-- identifier is the operator's, and the outcome is an err.kind.
--
--   mcpclient trace "docs": initialize ok 41 ms 512 bytes
--   mcpclient trace "docs": tools/call failed http_status 404 3 ms
--   mcpclient trace "docs": tools/call ok 2 ms 80 bytes; passed over 1 answer to no waiting request (id 4)
--   mcpclient trace "docs": tools/list ok 3 ms 210 bytes; via proxy http://127.0.0.1:3128 (https_proxy)
--
-- The last part names the answers the channel read while it read this
-- request's and passed over because no request waited for them (a second
-- answer to a finished request, an id never sent): `call.dropped`, { count,
-- the first ids as text }, set by the channel.
local core = require "mcpclient.core"

local trace = {}

--- Whether tracing is on: the option when given, else MCPCLIENT_TRACE=1.
function trace.enabled(option, getenv)
  if option ~= nil then return option end
  return (getenv or os.getenv)("MCPCLIENT_TRACE") == "1"
end

-- The outcome part of a line: "ok", or "failed <kind>[ <status>]". A stdio
-- server silent at the server/discover probe (the channel fails it as
-- method-not-found, detail "no answer to server/discover within N seconds",
-- so the opening goes on with initialize) is named as the silence it was,
-- not as a JSON-RPC error the server never sent: "server/discover silent: no
-- answer within 5 s (taken for a 2025-era server; initialize follows) 5001 ms".
local function outcome(ok, err)
  if ok then return "ok" end
  if type(err) ~= "table" then return "failed" end
  local silent = err.kind == "rpc_error" and type(err.detail) == "string"
    and err.detail:match("^no answer to server/discover within (%d+) seconds")
  if silent then
    return string.format("silent: no answer within %s s (taken for a 2025-era server; initialize follows)", silent)
  end
  local status = math.type(err.status) == "integer" and (" " .. err.status) or ""
  return "failed " .. tostring(err.kind) .. status
end

-- The answers passed over while a request was read, named, or "".
local function passed_over(dropped)
  if type(dropped) ~= "table" or not dropped.count then return "" end
  local more = dropped.count - #dropped
  return string.format("; passed over %d answer%s to no waiting request (id %s%s)", dropped.count,
    dropped.count == 1 and "" or "s", table.concat(dropped, ", "), more > 0 and (" and " .. more .. " more") or "")
end

-- The proxy an HTTP channel dials through, named with where it came from
-- (never with credentials: a proxy URL carrying any is refused), or "".
local function through(channel)
  local via = type(channel.dial) == "table" and channel.dial.via
  if type(via) ~= "table" then return "" end
  return string.format("; via proxy %s (%s)", via.url, via.source)
end

-- One line, inert, on `write`.
local function emit(write, identifier, method, ok, err, ms, bytes, dropped, via)
  local line = string.format('mcpclient trace "%s": %s %s %d ms%s%s%s', identifier, method, outcome(ok, err), ms,
    math.type(bytes) == "integer" and string.format(" %d bytes", bytes) or "", passed_over(dropped), via)
  write(core.clip(line, 500) .. "\n")
end

--- Wrap a channel's exchanges (request, notify, end_session) so each writes
--- its line. A reply to a server request is no exchange of the client's own
--- and writes none.
-- @param channel the connection's channel
-- @param identifier the server identifier
-- @param clock seconds (the connection's clock)
-- @param write function(text), default io.stderr:write
function trace.wrap(channel, identifier, clock, write)
  write = write or function(text) io.stderr:write(text) end
  local function timed(name, method_of)
    local original = channel[name]
    channel[name] = function(self, op, what, ...)
      local method = method_of(what, ...)
      if not method then return original(self, op, what, ...) end
      local started = clock()
      local a, b, c = original(self, op, what, ...)
      local ms = math.floor((clock() - started) * 1000 + 0.5)
      emit(write, identifier, method, a ~= nil and a ~= false, c, ms, type(a) == "table" and a.bytes or nil,
        type(what) == "table" and what.dropped or nil, through(self))
      return a, b, c
    end
  end
  timed("request", function(call) return call.method end)
  timed("notify", function(_, message) return message.method end)
  timed("end_session", function() return "DELETE" end)
  return channel
end

return trace
