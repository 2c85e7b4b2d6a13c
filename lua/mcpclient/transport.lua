--- Streamable HTTP: one JSON-RPC message per HTTP exchange.
--
-- A Transport belongs to one connection. It owns the HTTP legs (libcurl in C,
-- or a fake a spec injects), the pinned address, the credential reference and
-- the request ids. Each exchange takes a free leg of the connection's pool,
-- so inside mcp.gather several requests are in flight at once, each on its
-- own kept-alive connection; outside gather every exchange blocks. Every
-- leg runs the same gauntlet, in this order: cancel flag, operation budget,
-- host gate, credential, send, status, media type, body. Session state
-- belongs to the caller and is passed in per request.
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
local engine = require "mcpclient.engine"
local errors = require "mcpclient.errors"
local hostgate = require "mcpclient.hostgate"
local modern = require "mcpclient.modern"

local json = core.json
local fail = errors.fail
local floor = math.floor

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
local CONTENT_JSON = "Content-Type: application/json"
-- Requests that cannot act on anything: the opening of either era. Losing
-- one is a failure to reach the server, never "the server may have acted".
local NEVER_ACTS = { initialize = true, ["server/discover"] = true }

-- Where a stream that broke after an event id stands in for a response.
local BROKEN_STREAM = { stopped = false, truncated = false, duration_ms = 0 }

local Transport = {}
Transport.__index = Transport

-- The one rounding of a duration: whole milliseconds, never negative.
local function whole_ms(ms)
  if ms <= 0 then return 0 end
  return floor(ms + 0.5)
end

--- @param config { identifier, url, target (parsed url), leg, spawn_leg (makes another leg on the
---   same connection pool, or nil to reuse `leg`), auth, resolver, host_gate, refuse_private,
---   connect_timeout, tls, clock, on_elicitation }
function Transport.new(config)
  local self = setmetatable({}, Transport)
  for k, v in pairs(config) do self[k] = v end
  self.last_id = 0
  self.spare = {}       -- legs free for the next exchange besides `leg`
  self.spawned = {}     -- every leg made here, closed with the transport
  self.free_sends = {}  -- send requests for the legs, kept for the next exchange
  self.headers_of = false  -- the session whose POST header lines are kept (see post_headers)
  return self
end

-- Close every leg, then the pool: its kept-alive connections close now, not
-- whenever the collector runs.
function Transport:close()
  for _, leg in ipairs(self.spawned) do leg:close() end
  if self.leg then self.leg:close() end
  if self.pool then self.pool:close() end
end

-- A free leg for one exchange. Exchanges run at once inside gather, each on
-- its own leg (and so on its own kept-alive connection of the same pool);
-- without spawn_leg (an injected fake) the one leg serves them all.
function Transport:take_leg()
  if not self.leg_busy then
    self.leg_busy = true
    return self.leg
  end
  local leg = table.remove(self.spare)
  if leg then return leg end
  if not self.spawn_leg then return self.leg end
  leg = self.spawn_leg()
  self.spawned[#self.spawned + 1] = leg
  return leg
end

function Transport:give_leg(leg)
  if leg == self.leg then
    self.leg_busy = false
  else
    self.spare[#self.spare + 1] = leg
  end
end

function Transport:next_id()
  self.last_id = self.last_id + 1
  return self.last_id
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
cancellable, send_only, call, on_open (called once the response head is in,
inside a task only) }. Only the POST of a JSON-RPC request other
than initialize is "at most once" in the leg: nothing else can run a tool. `call` (the JSON-RPC request it belongs to,
if any) says whether a cancellation is in flight, who to notify, and
whether the server has already accepted the request.
]]

-- Has the server accepted the request? A 2xx status to its POST, or any
-- byte of an event stream, says it has.
local function accepted(call)
  return call ~= nil and (call.accepted or (call.reader ~= nil and call.reader.bytes > 0))
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
  local could_act = call ~= nil and not NEVER_ACTS[call.method]
  if could_act and (kind == "interrupted" or accepted(call)) then
    return fail("interrupted", { server = self.identifier, detail = detail })
  end
  return fail("transport", { server = self.identifier, detail = detail })
end

--[[
What the leg is asked to send. The tables are kept on the transport's free
list: what every exchange of the connection shares (the pinned address,
the read cap, the TLS files; the address is pinned before any exchange
begins and never changes) is written when a table is made, the rest for
each exchange, so nothing of an earlier one is left in it. An exchange
started while another runs (a hook's) gets a table of its own.
]]
local function new_request(self)
  local dial, tls = self.dial, self.tls
  return { url = dial.url or self.url, pin = dial.pin, max_bytes = MAX_RESPONSE_BYTES,
    ca_file = tls.ca_file, client_cert = tls.client_cert, client_key = tls.client_key }
end

local function fill_request(req, op, send, timeout_ms, connect_timeout_ms, secret_header)
  local method, call = send.method, send.call
  req.method = method
  req.headers = send.headers
  req.secret_header = secret_header or nil
  req.body = send.body
  req.timeout_ms = timeout_ms
  req.connect_timeout_ms = connect_timeout_ms
  req.cancel = send.cancellable and op.cancel or nil
  req.on_stream = send.on_stream
  req.send_only = send.send_only
  req.hold_body = send.hold_body
  -- libcurl may resend it on a fresh connection when a reused one died:
  -- only where a second copy can do no harm
  req.idempotent = method ~= "POST" or not call or NEVER_ACTS[call.method] == true
  return req
end

-- Back to the free list, holding no body, credential or hook until next time.
local function release_request(free, req)
  req.secret_header, req.body, req.headers, req.cancel, req.on_stream = nil, nil, nil, nil, nil
  free[#free + 1] = req
end

-- One HTTP exchange with every check that precedes the wire.
-- @return the leg's response table | nil, message, err
function Transport:exchange(op, send)
  local timeout_ms, connect_timeout_ms, secret_header = self:before_send(op, send.call)
  if not timeout_ms then return nil, connect_timeout_ms, secret_header end
  local leg = send.leg or self:take_leg()
  local free = self.free_sends
  local req = free[#free]
  if req then free[#free] = nil else req = new_request(self) end
  fill_request(req, op, send, timeout_ms, connect_timeout_ms, secret_header)
  local ok, response, kind, detail = pcall(engine.send, leg, req, send.on_open)
  release_request(free, req)
  if not send.leg then self:give_leg(leg) end
  if not ok then error(response, 0) end  -- a hook raised: the leg is free again, the raise goes on
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

-- The JSON-RPC error a refusal carries in its body, if it is one: its code,
-- its message (clipped where the failure value is made) and the revisions
-- an unsupported-version error names. Only a kept JSON body is read.
local function error_body(response)
  local media = response.media_type or ""
  if response.streamed or (media ~= "" and media ~= "application/json") then return nil end
  local body = json.decode(response.body or "")
  local e = type(body) == "table" and body.error
  if type(e) ~= "table" or math.type(e.code) ~= "integer" then return nil end
  local data = type(e.data) == "table" and e.data or {}
  return e.code, type(e.message) == "string" and e.message or nil, modern.versions_of(data.supported),
    type(data.requested) == "string" and data.requested or nil
end

-- The server refused a POST with a non-2xx status: it did not act on it.
-- An unsupported revision is its own kind, naming what the server speaks.
function Transport:refused(response, session)
  local code, detail, offered, requested = error_body(response)
  if code == modern.UNSUPPORTED_VERSION then
    local ours = {}
    for _, v in ipairs(modern.VERSIONS) do ours[#ours + 1] = v end
    for _, v in ipairs(self.legacy_versions or {}) do ours[#ours + 1] = v end
    return fail("protocol_version", { server = self.identifier, status = response.status, code = code,
      requested = core.label(requested or (session and session.version) or "?"),
      offered = table.concat(offered, ", "), offered_list = offered, supported = table.concat(ours, ", ") })
  end
  local _, message, err = fail("http_status", { server = self.identifier, status = response.status,
    code = code, detail = code and (detail or "no message") or nil })
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

function Reader.new(id, ordered, on_request, on_progress)
  return setmetatable({ id = id, ordered = ordered, on_request = on_request, on_progress = on_progress,
    messages = 0, bytes = 0 }, Reader)
end

-- A number a progress notification may carry, or nil.
local function finite(value)
  if math.type(value) == "integer" then return value end
  if type(value) == "number" and value == value and value ~= math.huge and value ~= -math.huge then return value end
  return nil
end

-- A progress notification for this request: its numbers, and its message
-- under the text rule (a server wrote it).
function Reader:progress(params)
  if type(params) ~= "table" or params.progressToken ~= self.id then return end
  local progress = finite(params.progress)
  if progress == nil then return end
  local message = type(params.message) == "string" and core.clip(params.message, 500) or nil
  self.on_progress(progress, finite(params.total), message)
end

-- A message that is not ours: a server request gets its answer at once, a
-- progress notification for this request goes to the operation's callback,
-- other notifications and anything unreadable are passed over.
function Reader:other(data)
  local ok, message = pcall(json.decode, data)
  if not ok or type(message) ~= "table" or type(message.method) ~= "string" then return end
  local id = message.id
  if math.type(id) == "integer" or type(id) == "string" then
    self.on_request(id, message.method, message.params)
  elseif message.method == "notifications/progress" and self.on_progress then
    self:progress(message.params)
  end
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
    if kind == "other" and (self.on_request or self.on_progress) then self:other(event.data) end
  end
  return false
end

-- Bytes of the stream: decode them; true once the answer is in. The
-- decoder is made on the first byte of each stream.
function Reader:feed(chunk)
  local decoder = self.decoder
  if not decoder then
    decoder = core.sse_decoder()
    self.decoder = decoder
  end
  self.bytes = self.bytes + #chunk
  return self:take(decoder:feed(chunk))
end

-- The leg's on_stream hook for one more stream of the same request.
function Reader:hook()
  self.decoder = nil
  return function(chunk) return self:feed(chunk) end
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

-- Wait before a resumption so a cancel flag is still honoured (and, inside
-- gather, the other tasks run). Timed by the process's monotonic clock rather
-- than the connection's clock, which a host (or a spec) may drive by hand.
local function wait(op, seconds)
  return engine.sleep(seconds, op.cancel)
end

---------------------------------------------------------------------------
-- A JSON-RPC request
---------------------------------------------------------------------------

--[[
A Call is one JSON-RPC request in flight: { op, session, id, method,
ordered, reader, accepted, resumptions }. `accepted` turns true once the
server answered the POST with a 2xx status or any byte of an event stream.
The reader is made when an event stream first needs one (a JSON answer,
the warm path, never does).
]]
-- The params with a progress token in _meta: the token is the request id
-- (unique per connection), sent only when someone listens for progress.
local function with_progress_token(params, id)
  local copy, meta = {}, {}
  for k, v in pairs(params) do copy[k] = v end
  if type(params._meta) == "table" then
    for k, v in pairs(params._meta) do meta[k] = v end
  end
  meta.progressToken = id
  copy._meta = meta
  return copy
end

-- A server request found on the stream of `call`, answered at once.
local function answerer(self, call)
  return function(id, request_method, request_params)
    self:answer_server(call, id, request_method, request_params)
  end
end

function Transport:open_call(op, session, method, params, ordered)
  local is_modern = session ~= nil and session.modern
  local id = self:next_id()
  if op.on_progress then params = with_progress_token(params, id) end
  local body, why = core.rpc_request(id, method, is_modern and modern.envelope(params, session.version) or params)
  if not body then
    return fail("malformed", { server = self.identifier, detail = "the request could not be encoded: " .. why })
  end
  return { op = op, session = session, id = id, method = method, ordered = ordered, resumptions = 0, accepted = false,
    body = body }
end

-- The call's stream reader, made on first use. A modern server sends no
-- requests of its own on a response stream; one that does gets no answer.
function Transport:reader_of(call)
  local reader = call.reader
  if not reader then
    local is_modern = call.session ~= nil and call.session.modern
    reader = Reader.new(call.id, call.ordered, not is_modern and answerer(self, call) or nil, call.op.on_progress)
    call.reader = reader
  end
  return reader
end

-- The on_stream hook of the request's POST: its first byte makes the reader.
local function first_stream(self, call)
  return function(chunk) return self:reader_of(call):feed(chunk) end
end

-- What the request returns with its result: the leg's time and what it learned.
local function info_of(call, response)
  local session_id = response.headers and response.headers["mcp-session-id"]
  return {
    duration_ms = whole_ms(response.duration_ms or 0),
    session_id = session_id ~= "" and session_id or nil,
    bytes = (call.reader and call.reader.bytes or 0) + #(response.body or ""),
  }
end

-- How long a request waits for the standalone GET stream to open before it
-- is sent anyway (a server that never answers the GET delays nothing more).
local LISTEN_OPEN_SECONDS = 1
local LISTEN_RETRY_SECONDS = 0.02

-- The standalone GET stream of a session, held open while one request is in
-- flight: server requests that arrive on it (an elicitation the server could
-- not tie to a request) are answered like those on a POST stream. It ends
-- when `state.done` turns true; whatever ends it is no failure of the request.
function Transport:listen(op, session, state)
  local call = { op = op, session = session }
  local decoder = core.sse_decoder()
  local listener = { on_request = function(id, method, params) self:answer_server(call, id, method, params) end }
  local on_stream = function(chunk)
    for _, event in ipairs(decoder:feed(chunk)) do Reader.other(listener, event.data) end
    return false
  end
  local listening = { deadline = op.deadline, cancel = function() return state.done end }
  local limit = core.monotonic_ns() + LISTEN_OPEN_SECONDS * 1e9
  repeat
    local response = self:exchange(listening, {
      method = "GET", cancellable = true, on_stream = on_stream,
      headers = session_headers({ "Accept: text/event-stream" }, session),
      on_open = function(status) if status < 300 then state.open = true end end,
    })
    -- 409: the server still holds the stream of our previous request (it has
    -- not yet seen it close), and allows one per session: ask again shortly.
    local again = response and response.status == 409 and not state.done and core.monotonic_ns() < limit
  until not (again and engine.sleep(LISTEN_RETRY_SECONDS, listening.cancel))
  decoder:close()
  state.open = true
end

-- A request sent while the standalone GET stream is open: the two run as
-- tasks of one gather (inside an outer gather they are its tasks' tasks).
function Transport:request_listening(op, session, method, params, ordered)
  local state = { open = false, done = false }
  local results = engine.gather {
    function()
      local limit = core.monotonic_ns() + LISTEN_OPEN_SECONDS * 1e9
      engine.wait_until(function() return state.open or core.monotonic_ns() > limit end)
      local answer = table.pack(pcall(self.post_request, self, op, session, method, params, ordered))
      state.done = true
      if not answer[1] then error(answer[2], 0) end
      return table.unpack(answer, 2, answer.n)
    end,
    function() self:listen(op, session, state) end,
  }
  local posted, listened = results[1], results[2]
  if posted.n == 0 and posted.error ~= nil then error(posted.error, 0) end
  if listened.n == 0 and listened.error ~= nil then error(listened.error, 0) end  -- the host's handler raised
  return table.unpack(posted, 1, posted.n)
end

--- Send a JSON-RPC request and return its result (a table) and the leg's
--- info { duration_ms (integer), session_id, bytes, containers (objects and
--- arrays the answer opened) } | nil, message, err. With an elicitation
--- handler and a session, the session's GET stream is open meanwhile.
function Transport:request(op, session, method, params, ordered)
  if self.on_elicitation and session and session.id and self.spawn_leg then
    return self:request_listening(op, session, method, params, ordered)
  end
  return self:post_request(op, session, method, params, ordered)
end

-- The header lines of a request's POST. A 2025-era session sends the same
-- lines with every request, so they are made once per session and kept
-- (nothing edits a list once made); a modern request names its method (and
-- tool) in its own.
function Transport:post_headers(op, session, method, params)
  if session and session.modern then
    return modern.headers(session_headers({ CONTENT_JSON, ACCEPT_BOTH }, session), method, params, op.mirrored)
  end
  if self.headers_of ~= session then
    self.post_lines = session_headers({ CONTENT_JSON, ACCEPT_BOTH }, session)
    self.headers_of = session
  end
  return self.post_lines
end

function Transport:post_request(op, session, method, params, ordered)
  local call, message, err = self:open_call(op, session, method, params, ordered)
  if not call then return nil, message, err end
  local response
  response, message, err = self:exchange(op, {
    method = "POST", body = call.body, call = call, cancellable = true, on_stream = first_stream(self, call),
    headers = self:post_headers(op, session, method, params), hold_body = true,
  })
  if not response then
    if err.kind == "interrupted" and not NEVER_ACTS[method] and call.reader and call.reader:broke_after_event() then
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

-- A kept body: application/json (or unlabelled) holding the answer. A large
-- one comes as a held body (the leg's buffer itself, read once by
-- rpc_classify), so a catalogue page never exists twice in memory. A body
-- of blanks only is named as empty; only a body the classifier refuses can
-- be one, so an answer is not searched for them first.
function Transport:json_answer(call, response, info)
  local media = response.media_type or ""
  if media ~= "" and media ~= "application/json" then
    return fail("content_type", { server = self.identifier, media_type = media })
  end
  local kind, a, b = core.rpc_classify(response.body, call.id, call.ordered, MAX_CONTAINERS)
  if kind == "malformed" and type(response.body) == "string" and not response.body:find("%S") then
    return fail("malformed", { server = self.identifier, detail = "empty body with status " .. response.status })
  end
  local result, message, err = self:answer(kind, a, b)
  if not result then return nil, message, err end
  info.containers = b
  return result, info
end

-- A stream ended (or stopped at the answer): take the answer, or resume it.
function Transport:finish_stream(call, response, info)
  local reader = self:reader_of(call)
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
  if call.session and call.session.modern then
    return fail("interrupted", { server = self.identifier,
      detail = "the event stream ended before the response, and streams of this revision cannot be resumed" })
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
-- handshake, fire and forget) and report the cancellation. In the modern
-- era the closed response stream is the signal and no notice is sent.
function Transport:cancelled(call)
  local method = call and call.method
  local notice = method and not NEVER_ACTS[method] and not (call.session and call.session.modern)
  if notice then
    local params = json.encode { requestId = call.id, reason = "cancelled by the client" }
    self:exchange({ deadline = Deadline.open(NOTICE_SECONDS, self.clock) }, {
      method = "POST", send_only = true,
      body = '{"jsonrpc":"2.0","method":"notifications/cancelled","params":' .. params .. '}',
      headers = session_headers({ "Content-Type: application/json", ACCEPT_BOTH }, call.session),
    })
  end
  return fail("cancelled", { server = self.identifier, in_flight = method == "tools/call" })
end

local ACTIONS = { accept = true, decline = true, cancel = true }

-- The host's answer to an elicitation request, as the result to send back.
-- The request's message is far-side text: the handler gets it under the text
-- rule. A handler that returns no valid answer is a host bug: it raises.
local function elicited(handler, params)
  local request = {}
  for k, v in pairs(type(params) == "table" and params or {}) do request[k] = v end
  if type(request.message) == "string" then request.message = core.clip(request.message, 2000) end
  local answer = handler(request)
  if type(answer) ~= "table" or not ACTIONS[answer.action] then
    error("on_elicitation must return { action = \"accept\"|\"decline\"|\"cancel\", content = ... }", 0)
  end
  if answer.content ~= nil and (type(answer.content) ~= "table" or json.is_array(answer.content)) then
    error("on_elicitation: content must be a table of named values", 0)
  end
  local result = { action = answer.action }
  if answer.action == "accept" then result.content = answer.content or {} end
  return result
end

--- The host's answer to an elicitation request's params, as the result the
--- server gets ({ action [, content] }); nil when the host gave no handler.
--- Any era that carries elicitation (a request on a stream, or a retry that
--- supplies the answers) asks here.
function Transport:elicit(params)
  if not self.on_elicitation then return nil end
  return elicited(self.on_elicitation, params)
end

-- The answer body to a server request: a ping gets {}, an elicitation the
-- host's handler's answer when there is one, anything else "method not
-- found", so no server ever waits on a handler this client does not have.
function Transport:reply_to(method, params)
  if method == "ping" then return '"result":{}' end
  local elicitation = method == "elicitation/create" and self:elicit(params)
  if elicitation then return '"result":' .. json.encode(elicitation) end
  return '"error":{"code":' .. METHOD_NOT_FOUND .. ',"message":"Method not found"}'
end

-- A server request arrived on a stream of `call` (its POST stream or the
-- standalone GET stream): answer it on another leg (the one it came on is
-- busy reading). The leg stops once the answer is sent (the stream it was
-- asked on must not wait for the server's reply); connecting and sending may
-- take what is left of the operation's budget, since a server may wait for
-- this answer before it answers the call.
function Transport:answer_server(call, id, method, params)
  local reply = self:reply_to(method, params)
  self:exchange({ deadline = call.op.deadline }, {
    method = "POST", send_only = true,
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
