--- Streamable HTTP: one JSON-RPC message per HTTP exchange.
--
-- A Transport belongs to one connection. It owns the HTTP leg (libcurl in C,
-- or a fake a spec injects), the pinned address, the credential reference and
-- the request ids. Every leg runs the same gauntlet, in this order: cancel
-- flag, operation budget, host gate, credential, send, status, media type,
-- body. Session state belongs to the caller and is passed in per request.
--
-- This is the one place where a failure of the leg becomes the library's
-- failure value (errors.fail); everything above passes that `err` on.
--
-- Nothing is sent twice once the server may have acted on it. A request is
-- "accepted" once the server answered its POST with a 2xx status or sent any
-- byte of an event stream; from then on every loss (a broken stream, a failed
-- resumption, a vanished session) is kind "interrupted", as is a connection
-- lost after the request had left. Only a refusal of the POST itself
-- (err.session_lost) lets the connection send it again.
local core = require "mcpclient.core"
local credentials = require "mcpclient.credentials"
local Deadline = require "mcpclient.deadline"
local errors = require "mcpclient.errors"
local hostgate = require "mcpclient.hostgate"

local json = core.json
local fail = errors.fail

local MAX_RESPONSE_BYTES = 2 * 1024 * 1024  -- the read cap of one exchange
-- Objects and arrays one response may open (each costs a few hundred bytes
-- once decoded): about 20 MiB at worst for a 2 MiB body of "{},".
local MAX_CONTAINERS = 65536
local MAX_RESUMPTIONS = 2             -- GET + Last-Event-ID after a stream ends early
local DEFAULT_RETRY_MS = 1000
local MAX_EVENT_ID_BYTES = 1024       -- an event id goes back as Last-Event-ID: printable ASCII only
-- notifications/cancelled is fire and forget: the leg stops once the notice
-- is sent, and this bounds even the connect (a kept-alive connection needs
-- none), so a stalling server never holds the caller for more than this.
local NOTICE_SECONDS = 0.25
local METHOD_NOT_FOUND = -32601
local ACCEPT_BOTH = "Accept: application/json, text/event-stream"
-- Where a stream that broke after an event id stands in for a response.
local BROKEN_STREAM = { stopped = false, truncated = false, duration_ms = 0 }

local Transport = {}
Transport.__index = Transport

-- The one rounding of a duration: whole milliseconds, never negative.
local function whole_ms(ms)
  return math.max(0, math.floor(ms + 0.5))
end

--- @param config { identifier, url, target (parsed url), leg, spawn_leg (makes a second leg, or nil
---   to reuse `leg`), auth, resolver, host_gate, refuse_private, connect_timeout, tls, clock }
function Transport.new(config)
  local self = setmetatable({}, Transport)
  for k, v in pairs(config) do self[k] = v end
  self.last_id = 0
  return self
end

function Transport:close()
  if self.side_leg and self.side_leg ~= self.leg then self.side_leg:close() end
  if self.leg then self.leg:close() end
end

function Transport:next_id()
  self.last_id = self.last_id + 1
  return self.last_id
end

-- The leg for answers to server requests that arrive while the main leg is
-- busy reading the stream they came on.
function Transport:side()
  if not self.side_leg then self.side_leg = self.spawn_leg and self.spawn_leg() or self.leg end
  return self.side_leg
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

---------------------------------------------------------------------------
-- One exchange
---------------------------------------------------------------------------

--[[
A Send describes one exchange: { method, headers, body, on_stream, leg,
cancellable, send_only, call }. Only the POST of a JSON-RPC request other
than initialize is "at most once" in the leg: nothing else can run a tool. `call` (the JSON-RPC request it belongs to,
if any) says whether a cancellation is in flight, who to notify, and
whether the server has already accepted the request.
]]

-- Has the server accepted the request? A 2xx status to its POST, or any
-- byte of an event stream, says it has.
local function accepted(call)
  return call ~= nil and (call.accepted or call.reader.bytes > 0)
end

-- The checks before the wire: cancel flag, budget, gate, credential.
-- Returns timeout_ms, connect_timeout_ms, secret_header | nil, message, err.
function Transport:before_send(op, call)
  if op.cancel and op.cancel() then
    if accepted(call) then return self:cancelled(call) end
    return fail("cancelled", { server = self.identifier, in_flight = false })
  end
  local timeout_ms, connect_timeout_ms = op.deadline:leg(self.connect_timeout)
  if not timeout_ms and accepted(call) then
    return fail("interrupted", { server = self.identifier,
      detail = "the operation budget ran out before the event stream could be resumed" })
  elseif not timeout_ms then
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
  local secret_header = false
  if self.oauth then
    local header, message, err = self.oauth:header(op)
    if header == nil then return nil, message, err end
    secret_header = header
  elseif self.auth then
    local secret, reason = credentials.resolve(self.auth.credential, self.resolver)
    if not secret then return fail("credential", { server = self.identifier, detail = reason }) end
    secret_header = credentials.header_line(self.auth, secret)
  end
  return timeout_ms, connect_timeout_ms, secret_header
end

--[[
The leg's failure (its C shape: nil, kind, detail) as the failure value,
made here once. A lost connection is "interrupted" when the exchange
carried a request that can act (any but initialize) and the request had
left (the leg says so) or the server had accepted it; a lost handshake or
notification is "transport": the operation itself was never sent. A
cancellation tells the server first, then returns.
]]
function Transport:leg_failure(op, send, kind, detail)
  local call = send.call
  if kind == "cancelled" then return self:cancelled(call) end
  if kind == "timeout" then
    return fail("timeout", { server = self.identifier, budget = errors.seconds(op.deadline.total), detail = detail })
  end
  local could_act = call ~= nil and call.method ~= "initialize"
  if could_act and (kind == "interrupted" or accepted(call)) then
    return fail("interrupted", { server = self.identifier, detail = detail })
  end
  return fail("transport", { server = self.identifier, detail = detail })
end

-- One HTTP exchange with every check that precedes the wire.
-- @return the leg's response table | nil, message, err
function Transport:exchange(op, send)
  local timeout_ms, connect_timeout_ms, secret_header = self:before_send(op, send.call)
  if not timeout_ms then return nil, connect_timeout_ms, secret_header end
  local response, kind, detail = (send.leg or self.leg):send {
    method = send.method,
    url = self.dial.url or self.url,
    headers = send.headers,
    secret_header = secret_header or nil,
    body = send.body,
    timeout_ms = timeout_ms,
    connect_timeout_ms = connect_timeout_ms,
    max_bytes = MAX_RESPONSE_BYTES,
    pin = self.dial.pin,
    cancel = send.cancellable and op.cancel or nil,
    on_stream = send.on_stream,
    send_only = send.send_only,
    -- libcurl may resend it on a fresh connection when a reused one died:
    -- only where a second copy can do no harm
    idempotent = send.method ~= "POST" or not send.call or send.call.method == "initialize",
    ca_file = self.tls.ca_file, client_cert = self.tls.client_cert, client_key = self.tls.client_key,
  }
  if response then return self:authorized(op, response, send) end
  return self:leg_failure(op, send, kind, detail)
end

-- A 401 (or 403) goes to the OAuth provider, if there is one; when it holds
-- a new token, the refused request, which the server never ran, is sent again.
function Transport:authorized(op, response, send)
  if not self.oauth or (response.status ~= 401 and response.status ~= 403) then return response end
  local again, message, err = self.oauth:refused(op, response.status, response.headers)
  if again == nil then return nil, message, err end
  if not again then return response end
  return self:exchange(op, send)
end

-- Did this refusal of a POST say that our session is gone? A 404, or a 400
-- that names the session (some servers answer so instead of 404).
local function session_lost(response, session)
  if not (session and session.id) then return false end
  if response.status == 404 then return true end
  return response.status == 400 and (response.body or ""):lower():find("session", 1, true) ~= nil
end

-- The server refused a POST with a non-2xx status: it did not act on it.
function Transport:refused(response, session)
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

---------------------------------------------------------------------------
-- Event streams
---------------------------------------------------------------------------

--[[
A Reader reads event streams until the message answering `id` arrives.
Its state survives a resumption: the decoder is new per stream, the last
event id and the retry interval carry over. `on_request` answers a server
request found on the stream (a message with a method and an id).
]]
local Reader = {}
Reader.__index = Reader

function Reader.new(id, ordered, on_request)
  return setmetatable({ id = id, ordered = ordered, on_request = on_request, messages = 0, bytes = 0 }, Reader)
end

-- A message that is not ours: a server request gets its answer at once,
-- notifications and anything unreadable are passed over.
function Reader:other(data)
  local message = json.decode(data)
  if type(message) ~= "table" or type(message.method) ~= "string" then return end
  local id = message.id
  if math.type(id) == "integer" or type(id) == "string" then self.on_request(id, message.method) end
end

-- Look at decoded events; true once the answer is among them.
function Reader:take(events)
  for _, event in ipairs(events) do
    self.messages = self.messages + 1
    local kind, a, b = core.rpc_classify(event.data, self.id, self.ordered, MAX_CONTAINERS)
    if kind == "result" or kind == "error" then
      self.answer = { kind, a, b }
      return true
    end
    if kind == "other" and self.on_request then self:other(event.data) end
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
    self.bytes = self.bytes + #chunk
    return self:take(decoder:feed(chunk))
  end
end

-- Did the stream that just broke give an event id to resume from?
function Reader:broke_after_event()
  local decoder = self.decoder
  if not decoder then return false end
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

---------------------------------------------------------------------------
-- A JSON-RPC request
---------------------------------------------------------------------------

--[[
A Call is one JSON-RPC request in flight: { op, session, id, method,
ordered, reader, accepted, resumptions }. `accepted` turns true once the
server answered the POST with a 2xx status or any byte of an event stream.
]]
function Transport:open_call(op, session, method, params, ordered)
  local encoded, why = json.try_encode(params)
  if not encoded then
    return fail("malformed", { server = self.identifier, detail = "the request could not be encoded: " .. why })
  end
  local call = { op = op, session = session, id = self:next_id(), method = method, ordered = ordered,
    resumptions = 0, accepted = false }
  call.body = '{"jsonrpc":"2.0","id":' .. call.id .. ',"method":' .. json.encode(method)
    .. ',"params":' .. encoded .. '}'
  call.reader = Reader.new(call.id, ordered, function(id, request_method)
    self:answer_server(call, id, request_method)
  end)
  return call
end

-- What the request returns with its result: the leg's time and what it learned.
local function info_of(call, response)
  local session_id = response.headers and response.headers["mcp-session-id"]
  return {
    duration_ms = whole_ms(response.duration_ms or 0),
    session_id = session_id ~= "" and session_id or nil,
    bytes = call.reader.bytes + #(response.body or ""),
  }
end

--- Send a JSON-RPC request and return its result (a table) and the leg's
--- info { duration_ms (integer), session_id, bytes, containers (objects and
--- arrays the answer opened) } | nil, message, err.
function Transport:request(op, session, method, params, ordered)
  local call, message, err = self:open_call(op, session, method, params, ordered)
  if not call then return nil, message, err end
  local response
  response, message, err = self:exchange(op, {
    method = "POST", body = call.body, call = call, cancellable = true, on_stream = call.reader:hook(),
    headers = session_headers({ "Content-Type: application/json", ACCEPT_BOTH }, session),
  })
  if not response then
    if err.kind == "interrupted" and method ~= "initialize" and call.reader:broke_after_event() then
      call.accepted = true
      return self:finish_stream(call, BROKEN_STREAM, info_of(call, BROKEN_STREAM))
    end
    return nil, message, err
  end
  if response.status >= 300 then return self:refused(response, session) end
  call.accepted = true
  local info = info_of(call, response)
  if response.streamed then return self:finish_stream(call, response, info) end
  return self:json_answer(call, response, info)
end

-- A kept body: application/json (or unlabelled) holding the answer.
function Transport:json_answer(call, response, info)
  local media = response.media_type or ""
  if media ~= "" and media ~= "application/json" then
    return fail("content_type", { server = self.identifier, media_type = media })
  end
  if not response.body:find("%S") then
    return fail("malformed", { server = self.identifier, detail = "empty body with status " .. response.status })
  end
  local kind, a, b = core.rpc_classify(response.body, call.id, call.ordered, MAX_CONTAINERS)
  local result, message, err = self:answer(kind, a, b)
  if not result then return nil, message, err end
  info.containers = b
  return result, info
end

-- A stream ended (or stopped at the answer): take the answer, or resume it.
function Transport:finish_stream(call, response, info)
  local reader = call.reader
  while true do
    if not reader.answer and not response.stopped then reader:finish() end
    if reader.answer then
      local kind, a, b = table.unpack(reader.answer, 1, 3)
      local result, message, err = self:answer(kind, a, b)
      if not result then return nil, message, err end
      info.duration_ms = whole_ms(response.duration_ms or 0)
      info.bytes, info.containers = reader.bytes, b
      return result, info
    end
    local ok, message, err = self:resumable(call, response)
    if not ok then return nil, message, err end
    response, message, err = self:resume(call)
    if not response then return nil, message, err end
  end
end

-- May this stream, over without the answer, be resumed? The server has
-- accepted the request, so whatever cannot be resumed is a loss.
function Transport:resumable(call, response)
  local reader = call.reader
  if response.truncated then
    return fail("malformed", { server = self.identifier,
      detail = "the event stream exceeded " .. MAX_RESPONSE_BYTES .. " bytes before the response" })
  end
  if not reader.last_event_id then
    local detail = reader.messages == 0 and "the event stream carried no message"
      or "the event stream carried no response to the request"
    return fail("malformed", { server = self.identifier, detail = detail })
  end
  if #reader.last_event_id > MAX_EVENT_ID_BYTES or reader.last_event_id:find("[^\32-\126]") then
    return fail("interrupted", { server = self.identifier,
      detail = "the event stream's id cannot be sent back in a header, so it cannot be resumed" })
  end
  if call.resumptions == MAX_RESUMPTIONS then
    return fail("interrupted", { server = self.identifier,
      detail = "the event stream ended " .. (MAX_RESUMPTIONS + 1) .. " times without the response" })
  end
  return true
end

-- Resume the stream: GET + Last-Event-ID after the server's retry interval.
-- Any failure of the resumption is a loss of an accepted request.
function Transport:resume(call)
  local op, reader = call.op, call.reader
  call.resumptions = call.resumptions + 1
  local delay = (reader.retry_ms or DEFAULT_RETRY_MS) / 1000
  if delay >= op.deadline:remaining() then
    return fail("interrupted", { server = self.identifier,
      detail = "the operation budget left no time to resume the event stream" })
  end
  if not wait(op, delay) then return self:cancelled(call) end
  local response, message, err = self:exchange(op, {
    method = "GET", call = call, cancellable = true, on_stream = reader:hook(),
    headers = session_headers({ "Accept: text/event-stream", "Last-Event-ID: " .. reader.last_event_id }, call.session),
  })
  if not response then
    if err.kind == "interrupted" and reader:broke_after_event() then return BROKEN_STREAM end
    return nil, message, err
  end
  if response.status >= 300 then
    return fail("interrupted", { server = self.identifier,
      detail = "the resumption of the event stream was answered with HTTP status " .. response.status })
  end
  if not response.streamed then
    return fail("interrupted", { server = self.identifier,
      detail = "the resumption of the event stream was not an event stream" })
  end
  return response
end

-- The cancel flag fired during a request: tell the server (never for the
-- handshake, fire and forget) and report the cancellation.
function Transport:cancelled(call)
  local method = call and call.method
  if method and method ~= "initialize" then
    local params = json.encode { requestId = call.id, reason = "cancelled by the client" }
    self:exchange({ deadline = Deadline.open(NOTICE_SECONDS, self.clock) }, {
      method = "POST", send_only = true,
      body = '{"jsonrpc":"2.0","method":"notifications/cancelled","params":' .. params .. '}',
      headers = session_headers({ "Content-Type: application/json", ACCEPT_BOTH }, call.session),
    })
  end
  return fail("cancelled", { server = self.identifier, in_flight = method == "tools/call" })
end

-- A server request arrived on the stream of `call`: a ping is answered with
-- {} at once, anything else with "method not found", so no server waits on
-- a handler this client does not have. Sent on the side leg (the main one
-- is busy reading the stream). The leg stops once the answer is sent (the
-- stream it was asked on must not wait for the server's reply); connecting
-- and sending may take what is left of the operation's budget, since a
-- server may wait for this answer before it answers the call.
function Transport:answer_server(call, id, method)
  local reply = method == "ping" and '"result":{}'
    or ('"error":{"code":' .. METHOD_NOT_FOUND .. ',"message":"Method not found"}')
  self:exchange({ deadline = call.op.deadline }, {
    method = "POST", leg = self:side(), send_only = true,
    body = '{"jsonrpc":"2.0","id":' .. json.encode(id) .. ',' .. reply .. '}',
    headers = session_headers({ "Content-Type: application/json", ACCEPT_BOTH }, call.session),
  })
end

--- Send a JSON-RPC notification. The reply body is never parsed.
function Transport:notify(op, session, method, params)
  local body = '{"jsonrpc":"2.0","method":' .. json.encode(method) .. ',"params":' .. json.encode(params) .. '}'
  local response, message, err = self:exchange(op, {
    method = "POST", body = body, headers = session_headers({ "Content-Type: application/json", ACCEPT_BOTH }, session),
  })
  if not response then return nil, message, err end
  if response.status >= 300 then return self:refused(response, session) end
  return true
end

--- End a session: DELETE; 405 means the server keeps no sessions.
function Transport:delete(op, session)
  local response, message, err = self:exchange(op, { method = "DELETE", headers = session_headers({}, session) })
  if not response then return nil, message, err end
  if response.status >= 300 and response.status ~= 405 and response.status ~= 404 then
    return self:refused(response, session)
  end
  return true
end

return Transport
