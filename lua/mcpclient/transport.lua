--- Streamable HTTP: one JSON-RPC message per HTTP exchange (REFERENCE §1).
--
-- A Transport belongs to one connection. It owns the HTTP leg (libcurl in C,
-- or a fake a spec injects), the pinned address, the credential reference and
-- the request ids. Every leg runs the same gauntlet, in this order: cancel
-- flag, operation budget, host gate, credential, send, status, media type,
-- body. Session state belongs to the caller and is passed in per request.
local core = require "mcpclient.core"
local credentials = require "mcpclient.credentials"
local Deadline = require "mcpclient.deadline"
local errors = require "mcpclient.errors"
local hostgate = require "mcpclient.hostgate"

local json = core.json
local fail = errors.fail

local MAX_RESPONSE_BYTES = 2 * 1024 * 1024
local MAX_RESUMPTIONS = 2             -- GET + Last-Event-ID after a stream ends early
local DEFAULT_RETRY_MS = 1000
local CANCEL_NOTICE_SECONDS = 1       -- notifications/cancelled is best-effort within this
local ACCEPT_BOTH = "Accept: application/json, text/event-stream"
-- Where a stream that broke after an event id stands in for a response.
local BROKEN_STREAM = { stopped = false, truncated = false, duration_ms = 0 }

local Transport = {}
Transport.__index = Transport

--- @param config { identifier, url, target (parsed url), leg, auth, resolver,
---   host_gate, refuse_private, connect_timeout, tls = {ca_file, client_cert, client_key} }
function Transport.new(config)
  local self = setmetatable({}, Transport)
  for k, v in pairs(config) do self[k] = v end
  self.last_id = 0
  return self
end

function Transport:close()
  if self.leg then self.leg:close() end
end

function Transport:next_id()
  self.last_id = self.last_id + 1
  return self.last_id
end

local function media_type(headers)
  local value = headers["content-type"] or ""
  return (value:match("^([^;]*)") or ""):match("^%s*(.-)%s*$"):lower()
end

-- The address to dial, checked once per connection and then pinned. The
-- lookup is bounded by the operation's budget and cancel hook.
function Transport:destination(op)
  if self.dial then return true end
  local dial, message, err = hostgate.admit(self.target, op, self)
  if not dial then return nil, message, err end
  self.dial = dial
  return true
end

-- Headers every leg after the handshake carries.
local function session_headers(list, session)
  if session then
    if session.id then list[#list + 1] = "Mcp-Session-Id: " .. session.id end
    if session.version then list[#list + 1] = "MCP-Protocol-Version: " .. session.version end
  end
  return list
end

--[[
One HTTP exchange with every check that precedes and follows the wire.
`op` is the operation: { deadline, cancel }. Returns the leg's response
table, or the failure triple — or nil, "cancelled" when the hook fired with
the request on the wire, so the caller can tell the server before it reports.
]]
function Transport:exchange(op, method, headers, body, on_stream, cancellable)
  if op.cancel and op.cancel() then
    return fail("cancelled", { server = self.identifier, in_flight = false })
  end
  local timeout_ms, connect_timeout_ms = op.deadline:leg(self.connect_timeout)
  if not timeout_ms then
    return fail("deadline", { server = self.identifier, budget = errors.seconds(op.deadline.total) })
  end
  if not self.dial then
    local ok, message, err = self:destination(op)
    if not ok then return nil, message, err end
    timeout_ms, connect_timeout_ms = op.deadline:leg(self.connect_timeout)  -- what the lookup left
    if not timeout_ms then
      return fail("deadline", { server = self.identifier, budget = errors.seconds(op.deadline.total) })
    end
  end
  local secret_header, message, err
  if self.oauth then
    secret_header, message, err = self.oauth:header(op)
    if secret_header == nil then return nil, message, err end
    secret_header = secret_header or nil
  elseif self.auth then
    local secret, reason = credentials.resolve(self.auth.credential, self.resolver)
    if not secret then return fail("credential", { server = self.identifier, detail = reason }) end
    secret_header = credentials.header_line(self.auth, secret)
  end
  local response, kind, detail = self.leg:send {
    method = method,
    url = self.dial.url or self.url,
    headers = headers,
    secret_header = secret_header,
    body = body,
    timeout_ms = timeout_ms,
    connect_timeout_ms = connect_timeout_ms,
    max_bytes = MAX_RESPONSE_BYTES,
    pin = self.dial.pin,
    cancel = cancellable and op.cancel or nil,
    on_stream = on_stream,
    ca_file = self.tls.ca_file, client_cert = self.tls.client_cert, client_key = self.tls.client_key,
  }
  if response then return self:authorized(op, response, method, headers, body, on_stream, cancellable) end
  if kind == "cancelled" then return nil, "cancelled" end
  if kind == "timeout" then
    return fail("timeout",
      { server = self.identifier, budget = errors.seconds(op.deadline.total), detail = detail })
  end
  return fail("transport", { server = self.identifier, detail = detail })
end

-- A 401 (or 403) goes to the OAuth provider, if there is one; when it holds
-- a new token the refused request, which the server never ran, is sent again.
function Transport:authorized(op, response, ...)
  if not self.oauth or (response.status ~= 401 and response.status ~= 403) then return response end
  local again, message, err = self.oauth:refused(op, response.status, response.headers)
  if again == nil then return nil, message, err end
  if not again then return response end
  return self:exchange(op, ...)
end

-- Did this failed response say that our session is gone? (D1: 404, or a 400
-- that names the session, which some servers answer instead.)
local function session_lost(response, session)
  if not (session and session.id) then return false end
  if response.status == 404 then return true end
  return response.status == 400 and (response.body or ""):lower():find("session", 1, true) ~= nil
end

function Transport:status_failure(response, session)
  local _, message, err = fail("http_status", { server = self.identifier, status = response.status })
  err.session_lost = session_lost(response, session) or nil
  return nil, message, err
end

-- The answer a JSON-RPC classification gives, as a result or a failure.
function Transport:answer(kind, a, b)
  if kind == "result" then return a end
  if kind == "error" then return fail("rpc_error", { server = self.identifier, code = a, detail = b }) end
  if kind == "other" then return fail("malformed", { server = self.identifier, detail = "the body is " .. a }) end
  return fail("malformed", { server = self.identifier, detail = a })
end

--[[
A Reader reads event streams until the message answering `id` arrives (D6).
Its state survives a resumption: the decoder is new per stream, the last
event id and the retry interval carry over.
]]
local Reader = {}
Reader.__index = Reader

function Reader.new(id, ordered)
  return setmetatable({ id = id, ordered = ordered, messages = 0 }, Reader)
end

-- Look at decoded events; true once the answer is among them.
function Reader:take(events)
  for _, event in ipairs(events) do
    self.messages = self.messages + 1
    local kind, a, b = core.rpc_classify(event.data, self.id, self.ordered)
    if kind == "result" or kind == "error" then
      self.answer = { kind, a, b }
      return true
    end
  end
  return false
end

-- The leg's on_stream hook for one stream. The decoder is made on the first
-- byte, so plain JSON answers never pay for one.
function Reader:hook()
  self.decoder = nil
  return function(chunk)
    local decoder = self.decoder
    if not decoder then
      decoder = core.sse_decoder()
      self.decoder = decoder
    end
    return self:take(decoder:feed(chunk))
  end
end

-- A stream that broke (the connection failed) after the server gave an
-- event id can be resumed like one that ended (MCP 2025-11-25, SEP-1699).
function Reader:broke_after_event(err)
  local decoder = self.decoder
  if err.kind ~= "transport" or not decoder then return false end
  local event_id = decoder:last_event_id()
  return event_id ~= nil and event_id ~= ""
end

-- The stream is over: take what was pending and remember where it stood.
function Reader:finish()
  local decoder = self.decoder
  if not decoder then return end
  self:take(decoder:finish())
  local event_id = decoder:last_event_id()
  if event_id and event_id ~= "" then self.last_event_id = event_id end
  self.retry_ms = decoder:retry() or self.retry_ms
  decoder:close()
  self.decoder = nil
end

-- Is this answer an event stream? The leg decides first (it streamed what it
-- saw labelled so); a body it kept whole but whose label reads as an event
-- stream here is decoded here, so the two halves never disagree about a body.
local function is_stream(response, media, reader)
  if response.streamed then return true end
  if media ~= "text/event-stream" then return false end
  reader:hook()(response.body)
  return true
end

-- Wait before a resumption, in slices so a cancel flag is still honoured.
-- Counted in slices rather than read off the connection's clock, which a
-- host (or a spec) may drive by hand.
local function wait(op, seconds)
  local slices = math.max(1, math.ceil(seconds / 0.02))
  for _ = 1, slices do
    if op.cancel and op.cancel() then return false end
    core.sleep(seconds / slices)
  end
  return true
end

--- Send a JSON-RPC request and return its result (a table), plus leg info
--- { duration_ms, session_id, status }; or the failure triple.
function Transport:request(op, session, method, params, ordered)
  local id = self:next_id()
  local encoded, why = json.try_encode(params)
  if not encoded then
    return fail("malformed", { server = self.identifier, detail = "the request could not be encoded: " .. why })
  end
  local body = '{"jsonrpc":"2.0","id":' .. id .. ',"method":' .. json.encode(method)
    .. ',"params":' .. encoded .. '}'
  local headers = session_headers({ "Content-Type: application/json", ACCEPT_BOTH }, session)
  local reader = Reader.new(id, ordered)
  local response, message, err = self:exchange(op, "POST", headers, body, reader:hook(), true)
  if not response then
    if message == "cancelled" then return self:cancelled(session, id, method) end
    if method == "initialize" or not reader:broke_after_event(err) then return nil, message, err end
    return self:finish_stream(op, session, reader, BROKEN_STREAM, {}, method, id)
  end
  if response.status >= 300 then return self:status_failure(response, session) end
  local info = { duration_ms = response.duration_ms, session_id = response.headers["mcp-session-id"] }
  if info.session_id == "" then info.session_id = nil end
  local media = media_type(response.headers)
  if is_stream(response, media, reader) then
    return self:finish_stream(op, session, reader, response, info, method, id)
  end
  if media ~= "" and media ~= "application/json" then
    return fail("content_type", { server = self.identifier, media_type = media })
  end
  if not response.body:find("%S") then
    return fail("malformed", { server = self.identifier, detail = "empty body with status " .. response.status })
  end
  local result, m, e = self:answer(core.rpc_classify(response.body, id, ordered))
  if not result then return nil, m, e end
  return result, info
end

-- A stream ended (or stopped at the answer): take the answer, or resume.
function Transport:finish_stream(op, session, reader, response, info, method, id)
  local resumptions = 0
  while true do
    if not reader.answer and not response.stopped then reader:finish() end
    if reader.answer then
      local result, m, e = self:answer(table.unpack(reader.answer, 1, 3))
      if not result then return nil, m, e end
      info.duration_ms = response.duration_ms
      return result, info
    end
    if response.truncated then
      return fail("malformed", { server = self.identifier,
        detail = "the event stream exceeded " .. MAX_RESPONSE_BYTES .. " bytes before the response" })
    end
    if not reader.last_event_id or resumptions == MAX_RESUMPTIONS then
      local detail = reader.messages == 0 and "the event stream carried no message"
        or "the event stream carried no response to the request"
      return fail("malformed", { server = self.identifier, detail = detail })
    end
    resumptions = resumptions + 1
    local delay = (reader.retry_ms or DEFAULT_RETRY_MS) / 1000
    if delay >= op.deadline:remaining() then
      return fail("deadline", { server = self.identifier, budget = errors.seconds(op.deadline.total) })
    end
    if not wait(op, delay) then return self:cancelled(session, id, method) end
    local headers = session_headers({ "Accept: text/event-stream", "Last-Event-ID: " .. reader.last_event_id },
      session)
    local message, err
    response, message, err = self:exchange(op, "GET", headers, nil, reader:hook(), true)
    if not response then
      if message == "cancelled" then return self:cancelled(session, id, method) end
      if not reader:broke_after_event(err) then return nil, message, err end
      response = BROKEN_STREAM
    elseif response.status >= 300 then
      return self:status_failure(response, session)
    elseif not is_stream(response, media_type(response.headers), reader) then
      return fail("content_type", { server = self.identifier, media_type = media_type(response.headers) })
    end
  end
end

-- The cancel flag fired during a request: tell the server (never for the
-- handshake, best-effort, bounded) and report the cancellation.
function Transport:cancelled(session, id, method)
  if method ~= "initialize" then
    self:notify({ deadline = Deadline.open(CANCEL_NOTICE_SECONDS, self.clock) }, session, "notifications/cancelled",
      { requestId = id, reason = "cancelled by the client" })
  end
  return fail("cancelled", { server = self.identifier, in_flight = method == "tools/call" })
end

--- Send a JSON-RPC notification. The reply body is never parsed.
function Transport:notify(op, session, method, params)
  local body = '{"jsonrpc":"2.0","method":' .. json.encode(method) .. ',"params":' .. json.encode(params) .. '}'
  local headers = session_headers({ "Content-Type: application/json", ACCEPT_BOTH }, session)
  local response, message, err = self:exchange(op, "POST", headers, body, nil, false)
  if not response then return nil, message, err end
  if response.status >= 300 then return self:status_failure(response, session) end
  return true
end

--- End a session (D1): DELETE; 405 means the server keeps no sessions.
function Transport:delete(op, session)
  local response, message, err = self:exchange(op, "DELETE", session_headers({}, session), nil, nil, false)
  if not response then return nil, message, err end
  if response.status >= 300 and response.status ~= 405 and response.status ~= 404 then
    return self:status_failure(response, session)
  end
  return true
end

return Transport
