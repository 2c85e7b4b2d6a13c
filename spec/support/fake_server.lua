--- A scripted MCP server behind a fake HTTP leg.
--
-- Injected with mcp.connect{ transport = fake }. It answers leg:send(req)
-- exactly as the C leg's contract says, from a FIFO of scripted responses,
-- and records every request. Everything above the leg — encoding, status and
-- media-type handling, the handshake order, event-stream decoding — runs for
-- real. A request without an id (a notification), or any request when the
-- queue is empty, gets 202 with an empty body and consumes nothing.
--
-- A fake is a server of the 2025 era unless made with { modern = true }: it
-- answers the client's server/discover probe by itself, as the official
-- 2025 SDK does (400, a JSON-RPC error that is no modern one), without
-- recording it, consuming a script entry or advancing the clock (see
-- `probes`). A modern fake records and scripts server/discover like any
-- other request.
local json = require "mcpclient.json"

local Fake = {}
Fake.__index = Fake

local CLOCK_ORIGIN = 4242.0 -- seconds; catches code that reads the clock as absolute

function Fake.new(options)
  options = options or {}
  local self = setmetatable({
    queue = {},
    requests = {},
    durations = {},
    now = CLOCK_ORIGIN,
    -- what the host name resolves to; a documentation address passes the default gate
    addresses = options.addresses or { options.address or "203.0.113.10" },
    resolved = {},
    modern = options.modern or false,
    probes = 0,
  }, Fake)
  self.clock = function() return self.now end
  return self
end

--- Each following leg advances the clock by the next of these seconds (missing -> 0).
function Fake:take(...)
  for _, seconds in ipairs { ... } do self.durations[#self.durations + 1] = seconds end
  return self
end

function Fake:advance(seconds) self.now = self.now + seconds end

local function push(self, entry) self.queue[#self.queue + 1] = entry; return self end

--- 200 JSON {"jsonrpc":"2.0","id":<the request's id>,"result":result}.
function Fake:will_return(result, session_id)
  return push(self, { session_id = session_id, build = function(id)
    return '{"jsonrpc":"2.0","id":' .. id .. ',"result":' .. json.encode(result) .. "}"
  end })
end

function Fake:will_return_rpc_error(code, message)
  return push(self, { build = function(id)
    return json.encode { jsonrpc = "2.0", id = id, error = { code = code, message = message } }
  end })
end

--- Exactly these bytes ("%ID%" becomes the request id); status 200 and
--- application/json unless given.
function Fake:will_return_raw(body, status, content_type, session_id)
  return push(self, { status = status, content_type = content_type, session_id = session_id,
    build = function(id) return (body:gsub("%%ID%%", tostring(id))) end })
end

--- The initialize answer. version defaults to 2025-11-25.
function Fake:will_handshake(session_id, version, server_info)
  return self:will_return({
    protocolVersion = version or "2025-11-25",
    capabilities = { tools = {} },
    serverInfo = server_info or { name = "Fake MCP", version = "1.0" },
  }, session_id)
end

--- An event-stream answer. `events` is a list of strings (raw SSE text, where
--- "%ID%" becomes the request id) or functions(id) -> text. options:
--- { chunk = bytes per on_stream call, session_id, status }.
function Fake:will_stream(events, options)
  options = options or {}
  return push(self, {
    content_type = "text/event-stream", session_id = options.session_id, status = options.status,
    chunk = options.chunk,
    build = function(id)
      local parts = {}
      for i, e in ipairs(events) do
        parts[i] = type(e) == "function" and e(id) or (e:gsub("%%ID%%", tostring(id)))
      end
      return table.concat(parts)
    end,
  })
end

--- The SSE framing of a result answering the request, as the SDK sends it.
function Fake.sse_result(result, event_id)
  return function(id)
    return "event: message\n" .. (event_id and ("id: " .. event_id .. "\n") or "")
      .. 'data: {"jsonrpc":"2.0","id":' .. id .. ',"result":' .. json.encode(result) .. "}\n\n"
  end
end

--- The leg fails as libcurl would: kind "transport" or "timeout".
function Fake:will_fail(kind, detail)
  return push(self, { fail = kind, detail = detail })
end

--- The server never answers: the leg waits for the cancel hook, advancing the
--- clock by `step` seconds per poll, and times out when the leg's time is up.
function Fake:will_hang(step)
  return push(self, { hang = step or 0.02 })
end

--- Call fn(req) to produce the response table yourself.
function Fake:will(fn) return push(self, { custom = fn }) end

local function header(req, name)
  local lname = name:lower() .. ":"
  for _, line in ipairs(req.headers or {}) do
    if line:sub(1, #lname):lower() == lname then return (line:sub(#lname + 1):gsub("^%s+", "")) end
  end
  return nil
end
Fake.header = header

function Fake:resolve(host)
  self.resolved[#self.resolved + 1] = host
  return self.addresses
end

function Fake:close() self.closed = true end

local LEGACY_PROBE_ANSWER = '{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: Server not initialized"},'
  .. '"id":null}'

function Fake:send(req)
  local decoded = req.body and json.decode(req.body) or nil
  if not self.modern and type(decoded) == "table" and decoded.method == "server/discover" then
    self.probes = self.probes + 1
    return { status = 400, headers = { ["content-type"] = "application/json" }, body = LEGACY_PROBE_ANSWER,
      duration_ms = 0, media_type = "application/json", streamed = false, stopped = false, truncated = false }
  end
  local record = {
    http_method = req.method,
    method = type(decoded) == "table" and decoded.method or nil,
    id = type(decoded) == "table" and decoded.id or nil,
    body = decoded,
    raw = req.body,
    session = header(req, "Mcp-Session-Id") or "",
    accept = header(req, "Accept"),
    protocol = header(req, "MCP-Protocol-Version"),
    last_event_id = header(req, "Last-Event-ID"),
    timeout_ms = req.timeout_ms,
    connect_timeout_ms = req.connect_timeout_ms,
    secret_header = req.secret_header,
    pin = req.pin,
    headers = req.headers,
  }
  self.requests[#self.requests + 1] = record
  local duration = table.remove(self.durations, 1) or 0

  local is_request = record.id ~= nil
  if is_request then self.last_request_id = record.id end
  local entry = (is_request or req.method ~= "POST") and table.remove(self.queue, 1) or nil
  if not entry then
    self.now = self.now + duration
    local status = req.method == "POST" and 202 or 405
    return { status = status, headers = {}, body = "", duration_ms = duration * 1000,
      streamed = false, stopped = false, truncated = false }
  end
  if entry.custom then return entry.custom(req, record) end
  if entry.fail then
    self.now = self.now + duration
    return nil, entry.fail, entry.detail or "scripted failure"
  end
  if entry.hang then
    local waited = 0
    while true do
      if req.cancel and req.cancel() then return nil, "cancelled", "the call was cancelled" end
      self.now = self.now + entry.hang
      waited = waited + entry.hang
      if waited * 1000 >= req.timeout_ms then
        return nil, "timeout", "Operation timed out after " .. req.timeout_ms .. " milliseconds"
      end
    end
  end
  self.now = self.now + duration

  -- A GET resumes the stream of the latest request: its answer carries that id.
  local body = entry.build(record.id or self.last_request_id or 0)
  local headers = { ["content-type"] = entry.content_type or "application/json" }
  if entry.session_id then headers["mcp-session-id"] = entry.session_id end
  local truncated = false
  if #body > req.max_bytes then body, truncated = body:sub(1, req.max_bytes), true end
  -- the media type as the C leg reports it: before ';', trimmed of spaces and tabs, lower case
  local media = (headers["content-type"]:match("^[^;]*") or ""):match("^[ \t]*(.-)[ \t]*$"):lower()
  local response = { status = entry.status or 200, headers = headers, body = body, duration_ms = duration * 1000,
    media_type = media, streamed = false, stopped = false, truncated = truncated, session_id = entry.session_id }
  if media == "text/event-stream" and req.on_stream then
    response.streamed, response.body = true, ""
    local size = entry.chunk or #body
    for at = 1, math.max(#body, 1), math.max(size, 1) do
      if req.on_stream(body:sub(at, at + size - 1)) then response.stopped = true; break end
    end
  end
  return response
end

--- JSON-RPC methods in the order they reached the server (notifications too).
--- Keep `conn` alive as long as this fake: a spec that drops a connection
--- (connect(fake):call_tool(...)) would otherwise have it collected mid-test,
--- and its finalizer's DELETE would join the requests the spec asserts.
function Fake:hold(conn)
  self.held = self.held or {}
  self.held[#self.held + 1] = conn
  return conn
end

function Fake:methods()
  local list = {}
  for i, r in ipairs(self.requests) do list[i] = r.method or r.http_method end
  return list
end

function Fake:granted_timeouts()
  local list = {}
  for i, r in ipairs(self.requests) do list[i] = r.timeout_ms end
  return list
end

return Fake
