--- Streamable HTTP, the first channel: one JSON-RPC message per HTTP exchange.
--
-- A channel moves the messages of one connection's session and knows nothing
-- of MCP's own rules (the era, ids, what a request means); the methods it
-- offers the session are the channel contract of docs/ARCHITECTURE.md:
-- request, notify, cancel, drain, end_session, close. Everything else here is local.
--
-- It owns the HTTP legs (libcurl in C, or a fake a spec injects), the pinned
-- address and the credential reference. Each exchange takes a free leg of the
-- connection's pool, so inside mcp.gather several requests are in flight at
-- once, each on its own kept-alive connection; outside gather every exchange
-- blocks. Every exchange runs the same gauntlet, in this order: cancel flag,
-- operation budget, host gate, credential, send, status, media type, body.
--
-- This is where a failure of the leg becomes the library's failure value
-- (errors.fail); the session and the connection pass that `err` on.
--
-- A request is "accepted" once the server answered its POST with a 2xx status
-- or sent any byte of an event stream; from then on every loss (a broken
-- stream, a failed resumption, a vanished session) is kind "interrupted", as
-- is a connection lost after the request had left. `call.written` tells the
-- session whether the request may have reached the server at all.
--
-- Nothing here is closed under an exchange that runs. The connection's
-- close ends the session first (end_session, its DELETE) and then closes the
-- channel; from the first of the two the channel is closing: the cancel hook
-- of every exchange in flight (another coroutine's, or a blocking one whose
-- own hook closed the connection) fires, a request that fails from then on
-- fails "closed" (a stream the DELETE ended too), and no other exchange
-- begins. close() then closes the free legs and the pool at once, and each
-- lent leg when its exchange gives it back.
--
-- Every POST is an exchange of its own (its own leg, its own response
-- stream): no two requests share a stream in either direction, so nothing
-- one writes can land inside another's bytes; the only stream several
-- requests read is a 2025 session's GET stream, which one request holds at
-- a time and whose messages are routed by id and progress token.
local core = require "mcpclient.core"
local credentials = require "mcpclient.credentials"
local Deadline = require "mcpclient.deadline"
local engine = require "mcpclient.engine"
local era = require "mcpclient.era"
local errors = require "mcpclient.errors"
local event_stream = require "mcpclient.channel.event_stream"
local hostgate = require "mcpclient.hostgate"
local proxy = require "mcpclient.proxy"

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
-- A cancellation notice is fire and forget: the leg stops once it is sent,
-- and this bounds even the connect (a kept-alive connection needs none), so
-- a stalling server never holds the caller for more than this.
local NOTICE_SECONDS = 0.25
local ACCEPT_BOTH = "Accept: application/json, text/event-stream"
local CONTENT_JSON = "Content-Type: application/json"
-- Requests that cannot act on anything: the opening of either era. Losing
-- one is a failure to reach the server, never "the server may have acted".
local NEVER_ACTS = { initialize = true, ["server/discover"] = true }

-- Where a stream that broke after an event id stands in for a response.
local BROKEN_STREAM = { stopped = false, truncated = false, duration_ms = 0 }

local http = {}

local Channel = {}
Channel.__index = Channel

-- The one rounding of a duration: whole milliseconds, never negative.
local function whole_ms(ms)
  if ms <= 0 then return 0 end
  return floor(ms + 0.5)
end

--- A channel to one server.
-- @param config { identifier, url, target (parsed url), leg, pool, spawn_leg (makes another leg on
--   the same pool, or nil to reuse `leg`), auth, resolver, host_gate, refuse_private,
--   connect_timeout, tls, clock, versions (every revision the client speaks, named when the server
--   refuses the one asked for) }. It is also what the OAuth provider is given.
-- @return the channel; `channel.oauth` may be set to an OAuth provider before the first request
function http.new(config)
  return setmetatable({
    config = config,
    spare = {},       -- legs free for the next exchange besides config.leg
    spawned = {},     -- every leg made here, closed with the channel
    free_sends = {},  -- request tables for the legs, kept for the next exchange
    free_posts = {},  -- the send descriptions of requests' POSTs, kept likewise (see post_send)
    headers_of = false,  -- the state whose POST header lines are kept (see post_headers)
    lent = {},        -- leg -> how many exchanges hold it now
    stop_hooks = setmetatable({}, { __mode = "k" }),  -- an operation's cancel hook -> it, or the close
    closing = false,  -- the connection is closing: its session ends, then the channel is closed
    closed = false,   -- the channel is closed
  }, Channel)
end

---------------------------------------------------------------------------
-- Legs and the checks before the wire
---------------------------------------------------------------------------

-- A free leg for one exchange. Exchanges run at once inside gather, each on
-- its own leg (and so on its own kept-alive connection of the same pool);
-- without spawn_leg (an injected fake) the one leg serves them all.
local function free_leg(self)
  local config = self.config
  if not self.leg_busy then
    self.leg_busy = true
    return config.leg
  end
  local leg = table.remove(self.spare)
  if leg then return leg end
  if not config.spawn_leg then return config.leg end
  leg = config.spawn_leg()
  self.spawned[#self.spawned + 1] = leg
  return leg
end

-- A leg is lent to an exchange until it comes back; a channel closed
-- meanwhile closes it when the last exchange that held it gives it back.
local function take_leg(self)
  local leg = free_leg(self)
  self.lent[leg] = (self.lent[leg] or 0) + 1
  return leg
end

local function give_leg(self, leg)
  local holders = (self.lent[leg] or 1) - 1
  self.lent[leg] = holders > 0 and holders or nil
  if self.closed then
    if holders <= 0 then leg:close() end
    return
  end
  if leg == self.config.leg then
    self.leg_busy = false
  else
    self.spare[#self.spare + 1] = leg
  end
end

-- Headers every exchange after the opening carries, and the host's own
-- lines (`own`: config.headers, checked at connect), which every exchange
-- with the server carries, the opening included.
local function state_headers(list, state, own)
  if state then
    if state.id then list[#list + 1] = "Mcp-Session-Id: " .. state.id end
    if state.version then list[#list + 1] = "MCP-Protocol-Version: " .. state.version end
  end
  if own then table.move(own, 1, #own, #list + 1, list) end
  return list
end

-- Has the server accepted the request? A 2xx status to its POST, or any
-- byte of an event stream, says it has.
local function accepted(call)
  return call ~= nil and (call.accepted or (call.reader ~= nil and call.reader.bytes > 0))
end

-- The failure of an operation the host's close ended: in flight when a
-- tools/call may have reached the server.
local function closed(self, call)
  local in_flight = call ~= nil and call.method == "tools/call" and call.written == true
  return fail("closed", { server = self.config.identifier, in_flight = in_flight })
end

-- The leg's cancel hook for an exchange of `op`: the operation's own, or the
-- channel's close (made once per hook, not per exchange).
local NO_CANCEL = {}
local function stop_hook(self, cancel)
  local key = cancel or NO_CANCEL
  local hook = self.stop_hooks[key]
  if not hook then
    if cancel then
      hook = function() return self.closing or cancel() end
    else
      hook = function() return self.closing end
    end
    self.stop_hooks[key] = hook
  end
  return hook
end

local function out_of_budget(self, op)
  return fail("deadline", { server = self.config.identifier, budget = errors.seconds(op.deadline.total) })
end

-- The cancellation of a request, as the failure value: in flight when a
-- tools/call may have reached the server.
local function cancelled(self, call)
  local in_flight = call ~= nil and call.method == "tools/call" and call.written ~= false
  return fail("cancelled", { server = self.config.identifier, in_flight = in_flight })
end

-- The credential header line for one exchange: false when the connection
-- has none | nil, message, err when it cannot be had (nothing is then sent).
local function credential(self, op)
  local config = self.config
  if self.oauth then
    local header, message, err = self.oauth:header(op)
    if header == nil then return nil, message, err end
    return header
  end
  if not config.auth then return false end
  local secret, reason = credentials.resolve(config.auth.credential, config.resolver)
  if not secret then return fail("credential", { server = config.identifier, detail = reason }) end
  return credentials.header_line(config.auth, secret)
end

-- The checks before the wire: cancel flag, budget, gate (once: the address
-- is then pinned), credential.
-- @return timeout_ms, connect_timeout_ms, secret_header (false for none) | nil, message, err
local function before_send(self, op, call)
  local config = self.config
  if op.cancel and op.cancel() then
    if accepted(call) then return cancelled(self, call) end
    return fail("cancelled", { server = config.identifier, in_flight = false })
  end
  local timeout_ms, connect_timeout_ms = op.deadline:leg(config.connect_timeout)
  if not timeout_ms and accepted(call) then
    return fail("interrupted", { server = config.identifier,
      detail = "the operation budget ran out before the event stream could be resumed" })
  elseif not timeout_ms then
    return out_of_budget(self, op)
  end
  if not self.dial then
    local dial, message, err = hostgate.admit(config.target, op, config)
    if not dial then return nil, message, err end
    self.dial = dial
    timeout_ms, connect_timeout_ms = op.deadline:leg(config.connect_timeout)  -- what the lookup left
    if not timeout_ms then return out_of_budget(self, op) end
  end
  local secret_header, message, err = credential(self, op)
  if secret_header == nil then return nil, message, err end
  return timeout_ms, connect_timeout_ms, secret_header
end

---------------------------------------------------------------------------
-- One exchange
---------------------------------------------------------------------------

--[[
A send describes one exchange: { method, headers, body, on_stream, leg,
cancellable, send_only, hold_body, call, writes (this exchange writes the
call's request), on_open (called once the response head is in, inside a
task only) }. Only the POST of a JSON-RPC request other
than the opening is "at most once" in the leg: nothing else can run a tool.
`call` (the request it belongs to, if any) says whether the server has
accepted it.
]]

--[[
The leg's failure (its C shape: nil, kind, detail [, sent]) as the failure
value, made here once. A lost connection is "interrupted" when the exchange
carried a request that can act (any but the opening) and the request had
left (the leg says so) or the server had accepted it; a lost opening or
notification is "transport": the operation itself was never sent. `sent`
false says the request never left: the call was not written.
]]
local function leg_failure(self, op, send, kind, detail, sent)
  local call, server = send.call, self.config.identifier
  if call and sent == false and not accepted(call) then call.written = false end
  if self.closing then return closed(self, call) end
  if kind == "cancelled" then return cancelled(self, call) end
  if kind == "tls" then  -- refused at the TLS layer: the leg says nothing was sent
    return fail("tls", { server = server, host = self.config.target.host, detail = detail })
  end
  if kind == "timeout" then
    return fail("timeout", { server = server, budget = errors.seconds(op.deadline.total), detail = detail })
  end
  local could_act = call ~= nil and not NEVER_ACTS[call.method]
  if could_act and (kind == "interrupted" or accepted(call)) then
    return fail("interrupted", { server = server, detail = detail })
  end
  return fail("transport", { server = server, detail = detail })
end

--[[
What the leg is asked to send. The tables are kept on the channel's free
list: what every exchange of the connection shares (the pinned address, the
read cap, the TLS files; the address is pinned before any exchange begins
and never changes) is written when a table is made, the rest for each
exchange, so nothing of an earlier one is left in it. An exchange started
while another runs (a hook's) gets a table of its own.
]]
local function new_request(self)
  local dial, tls = self.dial, self.config.tls
  return { url = dial.url or self.config.url, pin = dial.pin, proxy = dial.proxy, max_bytes = MAX_RESPONSE_BYTES,
    ca_file = tls.ca_file, client_cert = tls.client_cert, client_key = tls.client_key }
end

local function fill_request(self, req, op, send, timeout_ms, connect_timeout_ms, secret_header)
  local method, call = send.method, send.call
  req.method = method
  req.headers = send.headers
  req.secret_header = secret_header or nil
  req.body = send.body
  req.timeout_ms = timeout_ms
  req.connect_timeout_ms = connect_timeout_ms
  req.cancel = send.cancellable and stop_hook(self, op.cancel) or nil
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
  req.proxy_password = nil
  free[#free + 1] = req
end

local authorized

-- One HTTP exchange with every check that precedes the wire.
-- @return the leg's response table | nil, message, err
local function exchange(self, op, send)
  if self.closing and not send.ends_session then return closed(self, send.call) end
  local timeout_ms, connect_timeout_ms, secret_header = before_send(self, op, send.call)
  if not timeout_ms then return nil, connect_timeout_ms, secret_header end  -- nil, message, err
  local proof = false
  if secret_header and self.oauth then
    -- A DPoP-bound token goes with a proof for this method and URL, made afresh for every exchange.
    local message, err
    proof, message, err = self.oauth:proof(send.method, self.config.url)
    if proof == nil then return nil, message, err end
  end
  -- the proxy's password before anything is taken or marked: a reference that does not resolve
  -- fails the exchange with nothing sent
  local config = self.config
  local proxy_password, refused, failure = proxy.password(config.proxy_auth, self.dial, config.resolver,
    config.identifier)
  if proxy_password == nil then return nil, refused, failure end
  -- from here the request may reach the server (the leg says afterwards if it did not)
  if send.writes then send.call.written = true end
  local leg = send.leg or take_leg(self)
  local free = self.free_sends
  local req = free[#free]
  if req then free[#free] = nil else req = new_request(self) end
  fill_request(self, req, op, send, timeout_ms, connect_timeout_ms, secret_header)
  if proof then req.headers = table.move(req.headers or {}, 1, #(req.headers or {}), 2, { proof }) end
  req.proxy_user = proxy_password and self.config.proxy_auth.username or nil
  req.proxy_password = proxy_password or nil
  local ok, response, kind, detail, sent = pcall(engine.send, leg, req, send.on_open)
  release_request(free, req)
  if not send.leg then give_leg(self, leg) end
  if not ok then error(response, 0) end  -- a hook raised: the leg is free again, the raise goes on
  if response then return authorized(self, op, response, send) end
  return leg_failure(self, op, send, kind, detail, sent)
end

-- A 401 (or 403) goes to the OAuth provider, if there is one; when it holds
-- a new token, the refused request, which the server never ran, is sent again.
function authorized(self, op, response, send)
  if not self.oauth or (response.status ~= 401 and response.status ~= 403) then return response end
  local again, message, err = self.oauth:refused(op, response.status, response.headers)
  if again == nil then return nil, message, err end
  if not again then return response end
  return exchange(self, op, send)
end

---------------------------------------------------------------------------
-- Refusals and answers
---------------------------------------------------------------------------

-- Did this refusal of a POST say that our session is gone? A 404, or a 400
-- that names the session (some servers answer so instead of 404).
local function session_lost(response, state)
  if not (state and state.id) then return false end
  if response.status == 404 then return true end
  return response.status == 400 and (response.body or ""):lower():find("session", 1, true) ~= nil
end

-- The JSON-RPC error a refusal carries in its body, if it is one: { code,
-- message (clipped where the failure value is made), offered (the revisions
-- an unsupported-version error names), requested, required (the capabilities
-- a missing-capability error names) }. Only a kept JSON body is read.
local function error_body(response)
  local media = response.media_type or ""
  if response.streamed or (media ~= "" and media ~= "application/json") then return nil end
  local body = json.decode(response.body or "")
  local e = type(body) == "table" and body.error
  if type(e) ~= "table" or math.type(e.code) ~= "integer" then return nil end
  local data = type(e.data) == "table" and e.data or {}
  return { code = e.code, message = type(e.message) == "string" and e.message or nil,
    offered = era.versions_of(data.supported),
    requested = type(data.requested) == "string" and data.requested or nil,
    required = data.requiredCapabilities }
end

-- The names of the capabilities a -32021 error lists ({ elicitation =
-- { form = {} } }): sorted, each under the text rule, at most 8; the
-- second list spells out the parts asked for ("elicitation.form").
local function capability_names(required)
  local names, parts = {}, {}
  if type(required) ~= "table" or json.is_array(required) then return names, parts end
  for name in pairs(required) do
    if type(name) == "string" then names[#names + 1] = name end
  end
  table.sort(names)
  while #names > 8 do names[#names] = nil end
  for i, name in ipairs(names) do
    local label, sub = core.label(name), required[name]
    local subs = {}
    if type(sub) == "table" and not json.is_array(sub) then
      for part in pairs(sub) do
        if type(part) == "string" then subs[#subs + 1] = label .. "." .. core.label(part) end
      end
    end
    table.sort(subs)
    if #subs == 0 then subs[1] = label end
    for j = 1, math.min(#subs, 8) do parts[#parts + 1] = subs[j] end
    names[i] = label
  end
  return names, parts
end

-- A refusal for a capability the client did not declare (-32021): its own
-- kind, naming what the server listed, so the host sees which handler (or
-- which part of it) is missing.
local function missing_capability(self, rpc_code, detail, required, status)
  local names, parts = capability_names(required)
  return fail("missing_capability", { server = self.config.identifier, status = status, rpc_code = rpc_code,
    detail = detail or "no message", capability = names[1],
    capabilities = #parts > 0 and table.concat(parts, ", ") or nil })
end

-- The server refused a POST with a non-2xx status: it did not act on it.
-- An unsupported revision is its own kind, naming what the server speaks;
-- so is a capability the client did not declare.
local function refused(self, response, state)
  local server = self.config.identifier
  local body = error_body(response)
  if body and body.code == era.MISSING_CAPABILITY then
    return missing_capability(self, body.code, body.message, body.required, response.status)
  end
  if body and body.code == era.UNSUPPORTED_VERSION then
    local offered = body.offered
    return fail("protocol_version", { server = server, status = response.status, rpc_code = body.code,
      requested = core.label(body.requested or (state and state.version) or "?"),
      offered = table.concat(offered, ", "), offered_list = offered,
      supported = table.concat(self.config.versions or era.ERAS[1].versions, ", ") })
  end
  local _, message, err = fail("http_status", { server = server, status = response.status,
    rpc_code = body and body.code, detail = body and (body.message or "no message") or nil })
  err.session_lost = session_lost(response, state) or nil
  return nil, message, err
end

-- The capabilities a -32021 error answer lists, read from its text (the
-- classifier keeps only the code and the message); nil when it lists none
-- or the text is not at hand.
local function required_of(raw)
  if type(raw) ~= "string" then return nil end
  local answer = json.decode(raw)
  local e = type(answer) == "table" and answer.error
  local data = type(e) == "table" and e.data
  return type(data) == "table" and data.requiredCapabilities or nil
end

-- The answer rpc_classify read, as a result or a failure. `raw` is the
-- answer's text, read again only for a -32021 error, to name what it lists.
local function answer_of(self, kind, a, b, raw)
  local server = self.config.identifier
  if kind == "result" then return a end
  if kind == "error" and a == era.MISSING_CAPABILITY then return missing_capability(self, a, b, required_of(raw)) end
  if kind == "error" then return fail("rpc_error", { server = server, rpc_code = a, detail = b }) end
  if kind == "other" then return fail("malformed", { server = server, detail = "the body is " .. a }) end
  return fail("malformed", { server = server, detail = a })
end

-- What request returns: the result, the exchange's time and what it learned.
local function reply_of(call, response, result, containers)
  local session_id = response.session_id  -- the leg's field: reading response.headers would build its table
  return {
    result = result,
    duration_ms = whole_ms(response.duration_ms or 0),
    session_id = session_id ~= "" and session_id or nil,
    bytes = (call.reader and call.reader.bytes or 0) + #(response.body or ""),
    containers = containers,
  }
end

-- A kept body: application/json (or unlabelled) holding the answer. A large
-- one comes as a held body (the leg's buffer itself, read once by
-- rpc_classify), so a catalogue page never exists twice in memory. A body
-- of blanks only is named as empty; only a body the classifier refuses can
-- be one, so an answer is not searched for them first.
local function json_answer(self, call, response)
  local media = response.media_type or ""
  if media ~= "" and media ~= "application/json" then
    return fail("content_type", { server = self.config.identifier, media_type = media })
  end
  local kind, a, b = core.rpc_classify(response.body, call.id, call.decoding, MAX_CONTAINERS)
  if kind == "malformed" and type(response.body) == "string" and not response.body:find("%S") then
    return fail("malformed", { server = self.config.identifier, detail = "empty body with status " .. response.status })
  end
  local result, message, err = answer_of(self, kind, a, b, response.body)
  if not result then return nil, message, err end
  return reply_of(call, response, result, b)
end

---------------------------------------------------------------------------
-- Event streams and their resumption
---------------------------------------------------------------------------

-- The call's stream reader, made on first use (a JSON answer, the warm
-- path, never needs one).
local function reader_of(call)
  local reader = call.reader
  if not reader then
    reader = event_stream.reader(call, MAX_CONTAINERS)
    call.reader = reader
  end
  return reader
end

-- May this stream, over without the answer, be resumed? The server has
-- accepted the request, so whatever cannot be resumed is a loss.
local function resumable(self, call, response)
  local reader, server = call.reader, self.config.identifier
  if response.truncated then
    return fail("malformed", { server = server,
      detail = "the event stream exceeded " .. MAX_RESPONSE_BYTES .. " bytes before the response" })
  end
  if not reader.last_event_id then
    local detail = reader.messages == 0 and "the event stream carried no message"
      or "the event stream carried no response to the request"
    return fail("malformed", { server = server, detail = detail })
  end
  if call.state and not era.of(call.state).resumable then
    return fail("interrupted", { server = server,
      detail = "the event stream ended before the response, and streams of this revision cannot be resumed" })
  end
  if #reader.last_event_id > MAX_EVENT_ID_BYTES or reader.last_event_id:find("[^\32-\126]") then
    return fail("interrupted", { server = server,
      detail = "the event stream's id cannot be sent back in a header, so it cannot be resumed" })
  end
  if call.resumptions == MAX_RESUMPTIONS then
    return fail("interrupted", { server = server,
      detail = "the event stream ended " .. (MAX_RESUMPTIONS + 1) .. " times without the response" })
  end
  return true
end

-- Resume the stream: GET + Last-Event-ID after the server's retry interval
-- (waited so the cancel flag is still honoured and, inside gather, the other
-- tasks run). Any failure of the resumption is a loss of an accepted request.
local function resume(self, op, call)
  local reader, server = call.reader, self.config.identifier
  call.resumptions = call.resumptions + 1
  local delay = (reader.retry_ms or DEFAULT_RETRY_MS) / 1000
  if delay >= op.deadline:remaining() then
    return fail("interrupted",
      { server = server, detail = "the operation budget left no time to resume the event stream" })
  end
  if not engine.sleep(delay, op.cancel) then return cancelled(self, call) end
  local response, message, err = exchange(self, op, {
    method = "GET", call = call, cancellable = true, on_stream = reader:restart(),
    headers = state_headers({ "Accept: text/event-stream", "Last-Event-ID: " .. reader.last_event_id }, call.state,
      self.config.headers),
  })
  if not response then
    if err.kind == "interrupted" and reader:broke_after_event() then return BROKEN_STREAM end
    return nil, message, err
  end
  if response.status >= 300 then
    return fail("interrupted", { server = server,
      detail = "the resumption of the event stream was answered with HTTP status " .. response.status })
  end
  if not response.streamed then
    return fail("interrupted",
      { server = server, detail = "the resumption of the event stream was not an event stream" })
  end
  return response
end

-- A stream ended (or stopped at the answer): take the answer, or resume it.
local function finish_stream(self, op, call, response)
  local reader = reader_of(call)
  while true do
    if not reader.answer and not response.stopped then reader:finish() end
    local answer = reader.answer
    if answer then
      local result, message, err = answer_of(self, answer.kind, answer.a, answer.b, answer.raw)
      if not result then return nil, message, err end
      local reply = reply_of(call, response, result, answer.b)
      reply.bytes = reader.bytes
      return reply
    end
    -- the budget ran out while the stream was read (a server that floods
    -- it with messages, or trickles it): a timeout, whatever the stream did
    -- once the time was gone
    if op.deadline:remaining() <= 0 then
      return fail("timeout", { server = self.config.identifier, budget = errors.seconds(op.deadline.total),
        detail = "the operation budget ran out while the event stream was read" })
    end
    local ok, message, err = resumable(self, call, response)
    if not ok then return nil, message, err end
    response, message, err = resume(self, op, call)
    if not response then return nil, message, err end
  end
end

---------------------------------------------------------------------------
-- A JSON-RPC request
---------------------------------------------------------------------------

-- The header lines of a request's POST. A session of an era without
-- headers of its own per request (2025) sends the same lines with every
-- request, so they are made once per state and kept (nothing edits a list
-- once made); in an era with them (2026-07-28: the method, the tool, the
-- arguments its tool marks) its request_headers adds them to each request's.
-- @return lines | nil, message, err (an argument no header can carry: nothing is sent)
local function post_headers(self, call)
  local state = call.state
  local e = state and (state.era or era.of(state))
  if e and e.headers_per_request then
    local lines, why = e.request_headers(state_headers({ CONTENT_JSON, ACCEPT_BOTH }, state, self.config.headers),
      call)
    if not lines then
      return fail("malformed", { server = self.config.identifier, detail = "the tool call was not sent: " .. why })
    end
    return lines
  end
  if self.headers_of ~= state then
    self.post_lines = state_headers({ CONTENT_JSON, ACCEPT_BOTH }, state, self.config.headers)
    self.headers_of = state
  end
  return self.post_lines
end

-- The send description of a request's POST, from the channel's free list: its
-- stream hook reads the call and the operation from it, so a warm call makes
-- neither the table nor the closure. Each exchange takes one of its own (one
-- started while another runs gets another) and gives it back once it is over.
local function post_send(self, op, call, headers)
  local free = self.free_posts
  local send = free[#free]
  if send then
    free[#free] = nil
  else
    send = { method = "POST", writes = true, cancellable = true, hold_body = true }
    -- a stream is read only while the budget lasts: what a server floods it with after that is
    -- not read (the answer is then a timeout, see finish_stream)
    send.on_stream = function(chunk)
      return reader_of(send.call):feed(chunk) or send.op.deadline:remaining() <= 0
    end
  end
  send.call, send.op, send.body, send.headers = call, op, call.body, headers
  return send
end

-- The POST of a request and its answer (a JSON body or an event stream).
local function post(self, op, call)
  local headers, message, err = post_headers(self, call)
  if not headers then return nil, message, err end
  call.resumptions, call.accepted, call.written = 0, false, false
  local send = post_send(self, op, call, headers)
  local response
  response, message, err = exchange(self, op, send)
  -- back to the free list holding no call, operation, body or header lines (a raise above leaves it out)
  send.call, send.op, send.body, send.headers = nil, nil, nil, nil
  local free = self.free_posts
  free[#free + 1] = send
  if not response then
    local reader = call.reader
    if err.kind == "interrupted" and not NEVER_ACTS[call.method] and reader and reader:broke_after_event() then
      call.accepted = true
      return finish_stream(self, op, call, BROKEN_STREAM)
    end
    return nil, message, err
  end
  if response.status >= 300 then return refused(self, response, call.state) end
  call.accepted = true
  if response.streamed then return finish_stream(self, op, call, response) end
  return json_answer(self, call, response)
end

-- How long a request waits for the standalone GET stream to open before it
-- is sent anyway (a server that never answers the GET delays nothing more).
local LISTEN_OPEN_SECONDS = 1
local LISTEN_RETRY_SECONDS = 0.02

-- The standalone GET stream of a 2025 session, held open while a request
-- that listens is in flight: what arrives on it (an elicitation the server
-- could not tie to a request, progress sent apart from its request, log
-- notices) goes to the call's on_message like what arrives on its POST
-- stream. A session has one such stream at a time (servers allow one): while
-- another request's listener holds it, this one waits — the session routes
-- what that stream carries by progress token, so it serves this request
-- meanwhile — and takes over if its request is still in flight when the
-- holder's ends. The stream is read under the read cap like every other;
-- past it, it ends and is not opened again for this request. It ends when
-- `watch.done` turns true; whatever ends it is no failure of the request.
local function listen(self, op, call, watch)
  if self.get_holder then watch.open = true end
  engine.wait_until(function() return watch.done or not self.get_holder end)
  if watch.done then return end
  self.get_holder = watch
  local _ <close> = setmetatable({}, { __close = function()
    if self.get_holder == watch then self.get_holder = nil end
  end })
  local on_stream, close = event_stream.listener(call.on_message)
  local listening = { deadline = op.deadline, cancel = function() return watch.done end }
  local limit = core.monotonic_ns() + LISTEN_OPEN_SECONDS * 1e9
  repeat
    local response = exchange(self, listening, {
      method = "GET", cancellable = true, on_stream = on_stream,
      headers = state_headers({ "Accept: text/event-stream" }, call.state, self.config.headers),
      on_open = function(status) if status < 300 then watch.open = true end end,
    })
    -- 409: the server still holds the stream of our previous request (it has
    -- not yet seen it close), and allows one per session: ask again shortly.
    local again = response and response.status == 409 and not watch.done and core.monotonic_ns() < limit
  until not (again and engine.sleep(LISTEN_RETRY_SECONDS, listening.cancel))
  close()
  watch.open = true
end

-- A request sent while the standalone GET stream is open: the two run as
-- tasks of one gather (inside an outer gather they are its tasks' tasks).
local function post_listening(self, op, call)
  local watch = { open = false, done = false }
  local results = engine.gather {
    function()
      local limit = core.monotonic_ns() + LISTEN_OPEN_SECONDS * 1e9
      engine.wait_until(function() return watch.open or core.monotonic_ns() > limit end)
      local answer = table.pack(pcall(post, self, op, call))
      watch.done = true
      if not answer[1] then error(answer[2], 0) end
      return table.unpack(answer, 2, answer.n)
    end,
    function() listen(self, op, call, watch) end,
  }
  local posted, listened = results[1], results[2]
  if posted.n == 0 and posted.error ~= nil then error(posted.error, 0) end
  if listened.n == 0 and listened.error ~= nil then error(listened.error, 0) end  -- the host's handler raised
  return table.unpack(posted, 1, posted.n)
end

--- Write one JSON-RPC request and read until its answer (the channel
--- contract). With `call.listen` and a session, the session's GET stream is
--- open meanwhile.
-- @return reply { result, duration_ms, bytes, containers, session_id } | nil, message, err
function Channel:request(op, call)
  local reply, message, err
  if call.listen and call.state and call.state.id and self.config.spawn_leg then
    reply, message, err = post_listening(self, op, call)
  else
    reply, message, err = post(self, op, call)
  end
  -- whatever ended it once the connection is closing (its stream ended by the DELETE) is the close
  if not reply and self.closing then return closed(self, call) end
  return reply, message, err
end

--- Write a message that has no answer: a notification (the status is read,
--- so a refusal is seen) or the reply to a server request (written and not
--- waited on: the server may hold it until the call that asked ends).
-- @return true | nil, message, err
function Channel:notify(op, state, message)
  local reply = message.method == nil
  local response, text, err = exchange(self, op, { method = "POST", body = message.body, send_only = reply or nil,
    headers = state_headers({ CONTENT_JSON, ACCEPT_BOTH }, state, self.config.headers) })
  if not response and self.closing then return closed(self, nil) end
  if not response then return nil, text, err end
  if not reply and response.status >= 300 then return refused(self, response, state) end
  return true
end

--- Tell the server a written request is abandoned. In the 2026-07-28 era the
--- response stream the leg closed when it stopped is the signal, and nothing
--- more is written; in the 2025 era the notice is POSTed, bounded by 0.25 s.
function Channel:cancel(call, notice)
  if call.state and not era.of(call.state).cancel_notice then return end
  pcall(exchange, self, { deadline = Deadline.open(NOTICE_SECONDS, self.config.clock) }, {
    method = "POST", send_only = true, body = notice.body,
    headers = state_headers({ CONTENT_JSON, ACCEPT_BOTH }, call.state, self.config.headers),
  })
end

--- End a 2025 session: DELETE; 405 means the server keeps no sessions, 404
--- that it forgot this one already. Asked only as the connection closes:
--- from here the channel is closing (see the top of this file).
-- @return true | nil, message, err
function Channel:end_session(op, state)
  self.closing = true
  if not (state and state.id) then return true end
  local response, message, err = exchange(self, op, { method = "DELETE",
    headers = state_headers({}, state, self.config.headers),
    ends_session = true })
  if not response then return nil, message, err end
  if response.status >= 300 and response.status ~= 405 and response.status ~= 404 then
    return refused(self, response, state)
  end
  return true
end

--- Nothing waits between requests: every message arrives on a request's
--- own stream, or on the GET stream, which is open while a request is in
--- flight and read by it. Between operations (mcp.engine.step, which sets
--- `op.hold_until`, seconds on core.now()) a 2025 session's GET stream is
--- held until then, or until a message has come on it (handed to
--- `call.on_message`), whichever is first, when no request holds it; a
--- server that refuses the GET (405) is not asked again on that session.
function Channel:drain(op, call)
  local state = call.state
  if not (op.hold_until and state and state.id and self.config.spawn_leg) or self.get_holder
      or self.get_refused == state or self.closing then
    return true
  end
  local seconds = op.hold_until - core.now()
  if seconds <= 0 then return true end
  local watch = { done = false }
  self.get_holder = watch
  local _ <close> = setmetatable({}, { __close = function()
    if self.get_holder == watch then self.get_holder = nil end
  end })
  local came = false
  local on_stream, close = event_stream.listener(function(message)
    came = true
    call.on_message(message)
  end)
  local holding = { deadline = Deadline.open(seconds, core.now),
    cancel = function() return came or (op.cancel ~= nil and op.cancel()) end }
  local response = exchange(self, holding, { method = "GET", cancellable = true, on_stream = on_stream,
    headers = state_headers({ "Accept: text/event-stream" }, state, self.config.headers) })
  close()
  if response and response.status == 405 then self.get_refused = state end
  return true
end

--- Close every free leg, then the pool: its kept-alive connections close
--- now, not whenever the collector runs. A leg an exchange holds is closed
--- when it comes back (that exchange ends "closed" at once). Idempotent.
function Channel:close()
  self.closing, self.closed = true, true
  for _, leg in ipairs(self.spawned) do
    if not self.lent[leg] then leg:close() end
  end
  self.spawned, self.spare = {}, {}
  local leg = self.config.leg
  if leg and not self.lent[leg] then leg:close() end
  if self.config.pool then self.config.pool:close() end
  return true
end

--- The methods every channel offers the session (docs/ARCHITECTURE.md, "The channel contract").
http.CONTRACT = { "request", "notify", "cancel", "drain", "end_session", "close" }

return http
