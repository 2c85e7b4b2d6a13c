--- The protocol session: MCP over one channel, whatever moves the bytes.
--
-- The session owns what the protocol says and nothing of how messages
-- travel: the request ids, the era (found once per connection by
-- era.negotiate and kept as the object its state names, `state.era`: what a
-- request carries, how an answer reads, whether server requests are answered
-- and how notices are listened for are that object's, never a branch here),
-- the opening, the answers to server requests, progress, cancellation, and
-- the rule that nothing is sent twice once the server may have acted on it.
-- The channel (channel/http.lua, channel/stdio.lua; the contract is in
-- docs/ARCHITECTURE.md) moves the messages and says whether a request was
-- written. A failure of any leg arrives as `nil, message, err` and is handed
-- on unchanged.
local answers = require "mcpclient.answers"
local core = require "mcpclient.core"
local Deadline = require "mcpclient.deadline"
local engine = require "mcpclient.engine"
local errors = require "mcpclient.errors"
local era = require "mcpclient.era"

local json = core.json
local fail = errors.fail

local session = {}

session.PROTOCOL_VERSION = "2025-11-25"
session.SUPPORTED_VERSIONS = { "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05" }

local METHOD_NOT_FOUND = -32601
local hold_listen  -- (defined with the listening of the 2026-07-28 era, below)
-- The requests that open an era: they cannot act on anything, so abandoning
-- one needs no notice.
local OPENING = { initialize = true, ["server/discover"] = true }
-- The requests about a task: abandoning one abandons the asking, never the
-- task (a notice would be taken for the task's cancellation, which only
-- tasks/cancel asks for).
local TASK_METHODS = { ["tasks/get"] = true, ["tasks/result"] = true, ["tasks/list"] = true,
  ["tasks/update"] = true, ["tasks/cancel"] = true }
-- The failures after which a written request is abandoned, and the server told.
local ABANDONED = { cancelled = true, timeout = true }

local Session = {}
Session.__index = Session

--- A session over `channel`.
-- @param options { identifier, protocol ("auto" | a revision of era.ERAS), on_elicitation, on_sampling,
--   roots (a list answers.roots checked),
--   max_input_rounds (default session.MAX_INPUT_ROUNDS), on_log, on_notice = function(kind, uri) (a
--   change notice arrived: "tools", "resources", "prompts" or "resource"), listening = { off (the
--   host said listen = false), always (notices are listened for while the connection lives: a
--   handler or a cache), subscribed (the host's own set: uri -> true, the resources subscribed to,
--   read as it is now) } (data, never a function: the session calls nothing of its host to learn
--   it; nil: nothing is listened for),
--   concurrent (the channel carries several requests at once: in the 2026-07-28 era a
--   subscriptions/listen request then runs beside each request while notices are listened for),
--   standing (the channel is one long-lived pipe both ways and can leave a request open, as stdio
--   does: in the 2026-07-28 era one subscriptions/listen then stands open while notices are
--   listened for, opened again when what is listened for changes or the server was replaced) }
function session.new(channel, options)
  return setmetatable({
    channel = channel,
    identifier = options.identifier,
    protocol = options.protocol,
    on_elicitation = options.on_elicitation,
    -- what the client answers when a server asks, declared as capabilities only when given:
    -- { elicitation (handler), sampling (handler), roots (the checked list, replaced by set_roots) }
    answers = { elicitation = options.on_elicitation, sampling = options.on_sampling, roots = options.roots },
    max_input_rounds = options.max_input_rounds or session.MAX_INPUT_ROUNDS,
    -- the host's functions, kept apart so none reads as a method of the session
    host = { on_notice = options.on_notice, on_notification = options.on_notification, warn = options.warn },
    -- what the host set for every request: { log_level, client_info } (each nil when not set)
    settings = options.settings or {},
    listening = options.listening,
    concurrent = options.concurrent == true,
    standing = options.standing == true,
    last_id = 0,
    -- the era's state once open: { era (its object), version, id, server_info, capabilities, instructions,
    -- hint }
    state = nil,

    on_log = options.on_log,
    -- requests in flight whose operation listens for progress: progress token (the request id) ->
    -- on_progress, so a notice reaches the request it names on whichever stream it arrives
    progress_to = {},
  }, Session)
end

-- Is anything listened for now (`l`: the host's listening data)?
local function listens(l)
  return l ~= nil and not l.off and (l.always or next(l.subscribed) ~= nil)
end

-- What is listened for now: nil, or { uris } (the resources subscribed to, sorted).
local function listened_for(self)
  if not listens(self.listening) then return nil end
  local uris = {}
  for uri in pairs(self.listening.subscribed) do uris[#uris + 1] = uri end
  table.sort(uris)
  return { uris = uris }
end

---------------------------------------------------------------------------
-- Messages the server sends while a request is in flight
---------------------------------------------------------------------------

local ACTIONS = { accept = true, decline = true, cancel = true }

-- The host's answer to an elicitation request, as the result to send back.
-- The request's message is far-side text: the handler gets it under the text
-- rule. A handler that returns no valid answer is a host bug: it raises.
function session.elicited(handler, params)
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
  -- accepting a URL is consent to open it: there is nothing to send back
  if answer.action == "accept" and request.mode ~= "url" then result.content = answer.content or {} end
  return result
end

-- A sampling request through the host's handler (answers.sampled): the
-- result, or nil and the error for the server; a handler that raised or
-- answered out of shape is also told to the host's warning hook.
local function sampled(self, params)
  local result, refusal = answers.sampled(self.answers.sampling, params, self.identifier)
  if not result and refusal.fault and self.host.warn then
    pcall(self.host.warn, refusal.fault)
  end
  return result, refusal
end

-- The answer to a server request: a ping gets {}, an elicitation, a
-- sampling request or roots/list what the host gave for it (the handler's
-- answer, the roots), anything else "method not found", so no server ever
-- waits on a handler this client does not have.
local function reply_to(self, method, params)
  if method == "ping" then return '"result":{}' end
  local given = self.answers
  if method == "elicitation/create" and self.on_elicitation then
    return '"result":' .. json.encode(session.elicited(self.on_elicitation, params))
  elseif method == "roots/list" and given.roots then
    return '"result":' .. json.encode(answers.roots_result(given.roots))
  elseif method == "sampling/createMessage" and given.sampling then
    local result, refusal = sampled(self, params)
    if not result then return '"error":' .. json.encode { code = refusal.code, message = refusal.message } end
    return '"result":' .. json.encode(result)
  end
  return '"error":{"code":' .. METHOD_NOT_FOUND .. ',"message":"Method not found"}'
end

-- A number a progress notification may carry, or nil.
local function finite(value)
  if math.type(value) == "integer" then return value end
  if type(value) == "number" and value == value and value ~= math.huge and value ~= -math.huge then return value end
  return nil
end

-- A progress notification: its numbers, and its message under the text rule
-- (a server wrote it), for the request in flight its token names, if that
-- request's operation listens. A notice may arrive on the request's own
-- stream or on another the session holds (the standalone GET stream).
local function progress(self, params)
  if type(params) ~= "table" then return end
  local token = params.progressToken
  local on_progress = (type(token) == "number" or type(token) == "string") and self.progress_to[token]
  if not on_progress then return end
  local done = finite(params.progress)
  if done == nil then return end
  local message = type(params.message) == "string" and core.clip(params.message, 500) or nil
  on_progress(done, finite(params.total), message)
end

-- The text rule over a log notice's data (any JSON value): every string is
-- clipped (object keys too) and loses its control and bidi characters, and
-- nesting and width are bounded, so what reaches the host is inert and small.
local LOG_TEXT, LOG_KEY, LOG_LEVEL = 2000, 200, 40
local LOG_DEPTH, LOG_ENTRIES = 8, 64
local LOG_LEVELS = { debug = true, info = true, notice = true, warning = true, error = true, critical = true,
  alert = true, emergency = true }

local function inert(value, depth)
  if type(value) == "string" then return core.clip(value, LOG_TEXT) end
  if type(value) ~= "table" then return value end -- numbers, booleans, null
  if depth >= LOG_DEPTH then return "…" end
  if json.is_array(value) then
    local out = json.array {}
    for i = 1, math.min(#value, LOG_ENTRIES) do out[i] = inert(value[i], depth + 1) end
    return out
  end
  local keys = {}
  for k in pairs(value) do
    if type(k) == "string" then keys[#keys + 1] = k end
  end
  table.sort(keys)
  local out = {}
  for i = 1, math.min(#keys, LOG_ENTRIES) do out[core.clip(keys[i], LOG_KEY)] = inert(value[keys[i]], depth + 1) end
  return out
end

-- A log notice (notifications/message) a server sent, on any of its
-- streams, handed to the host's on_log(level, logger, data) under the text
-- rule: level one of the eight syslog levels when the server named one
-- (else its text, clipped; nil when it sent none), logger clipped or nil,
-- data with every string clipped (see inert).
local function log_notice(self, params)
  if type(params) ~= "table" then return end
  local level = params.level
  if type(level) == "string" then
    level = LOG_LEVELS[level] and level or core.clip(level, LOG_LEVEL)
  else
    level = nil
  end
  local logger = type(params.logger) == "string" and core.clip(params.logger, LOG_KEY) or nil
  self.on_log(level, logger, inert(params.data, 0))
end

-- The change notices, by method, and the kind each reports.
local NOTICES = {
  ["notifications/tools/list_changed"] = "tools",
  ["notifications/resources/list_changed"] = "resources",
  ["notifications/prompts/list_changed"] = "prompts",
  ["notifications/resources/updated"] = "resource",
}
session.NOTICES = NOTICES

-- A change notice for the host: its kind, and for "resource" the URI it
-- names (a string, or the notice is passed over). The URI is handed on as
-- the server wrote it: it is what the host compares with the URI it
-- subscribed to, never shown as it is.
local function notice(self, message)
  local kind = NOTICES[message.method]
  if not kind or not self.host.on_notice then return end
  local uri = nil
  if kind == "resource" then
    uri = type(message.params) == "table" and message.params.uri or nil
    if type(uri) ~= "string" then return end
  end
  self.host.on_notice(kind, uri)
end

-- Every notification the server sends, after the library's own handling,
-- to the host's on_notification(method, params): the method clipped, the
-- params under the text rule as a log notice's data. A handler that raises
-- is told through the warning hook, never fails the operation reading.
local function host_notification(self, message)
  local ok, why = pcall(self.host.on_notification, core.clip(message.method, LOG_KEY), inert(message.params, 0))
  if not ok and self.host.warn then
    self.host.warn(string.format("the on_notification handler raised: %s", core.clip(tostring(why))))
  end
end

-- A message of the server that is not the answer to `call`: a server request
-- is answered at once (where the era answers them: answers_server_requests;
-- a 2026-07-28 server sends none of its own on a response stream, and one
-- that does gets no answer), a progress
-- notification goes to the operation its token names, a log notice to the
-- host's on_log, anything else is passed over. The answer's write may take
-- what is left of the operation's budget, since a server may wait for it
-- before it answers.
local function on_message(self, op, call, message)
  local id = message.id
  if math.type(id) == "integer" or type(id) == "string" then
    -- no answer once the budget is spent: the call itself is over
    if (call.state and not era.of(call.state).answers_server_requests) or op.deadline:remaining() <= 0 then
      return
    end
    local reply = reply_to(self, message.method, message.params)
    local body = '{"jsonrpc":"2.0","id":' .. json.encode(id) .. ',' .. reply .. '}'
    self.channel:notify({ deadline = op.deadline }, call.state, { body = body })
  elseif message.method == "notifications/progress" then
    progress(self, message.params)
  elseif message.method == "notifications/message" and self.on_log then
    log_notice(self, message.params)
  elseif (message.method == "notifications/tasks/status" or message.method == "notifications/tasks")
    and op.on_task_notice and type(message.params) == "table" then
    op.on_task_notice(message.params)
  elseif NOTICES[message.method] then
    notice(self, message)
    if op.noticed then op.noticed() end
  elseif message.method == "notifications/subscriptions/acknowledged" and op.acknowledged then
    op.acknowledged(message.params)
  end
  if self.host.on_notification and id == nil and type(message.method) == "string" then
    host_notification(self, message)
  end
end

---------------------------------------------------------------------------
-- One request
---------------------------------------------------------------------------

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

-- The notice that abandons `call`.
local function cancel_notice(call)
  local params = json.encode { requestId = call.id, reason = "cancelled by the client" }
  return { method = "notifications/cancelled",
    body = '{"jsonrpc":"2.0","method":"notifications/cancelled","params":' .. params .. '}' }
end

-- A call's on_message (every message of its streams that is not its answer,
-- to on_message above) is made when a channel first asks for it: only a
-- stream, the GET stream or a stdio read meets such messages, and a plain
-- JSON answer, the warm path, makes no closure.
local Call = {
  __index = function(call, key)
    if key ~= "on_message" then return nil end
    local self, op = call.session, call.op
    local handler = function(message) on_message(self, op, call, message) end
    call.on_message = handler
    return handler
  end,
}

-- One request on the channel under `state` (nil before the opening), with
-- what its era has every request carry (the 2026-07-28 envelope: what the
-- client can answer, elicitation only when the host gave a handler, and what
-- the request itself asks to declare; nothing in the 2025 era). A
-- written request abandoned by the cancel hook or the budget is cancelled on
-- the wire at once, before the failure is returned.
-- @return reply | nil, message, err
local function send(self, op, state, method, params, how)
  local id = self.last_id + 1
  self.last_id = id
  if op.on_progress then params = with_progress_token(params, id) end
  if state then
    local e = state.era or era.of(state)
    params = e.envelope(params, state.version, self.answers, how and how.capabilities)
    local settings = self.settings
    if settings.log_level or settings.client_info then params = e.with_settings(params, settings) end
  end
  local body, why = core.rpc_request(id, method, params)
  if not body then
    return fail("malformed", { server = self.identifier, detail = "the request could not be encoded: " .. why })
  end
  -- the GET stream is held while something listens for what may arrive there (listens, inline)
  local listening = self.listening
  local listen = self.on_elicitation ~= nil or self.on_log ~= nil or op.on_progress ~= nil
    or self.answers.sampling ~= nil or self.answers.roots ~= nil or self.host.on_notification ~= nil
  local call = setmetatable({ id = id, method = method, params = params, body = body, state = state,
    decoding = how and how.decoding, mirror = how and how.mirror,
    standing = how and how.standing, settle_seconds = how and how.settle_seconds,
    -- also for the change notices the host listens to (the GET stream is where a server sends them)
    listen = listen or listening ~= nil and not listening.off
      and (listening.always or next(listening.subscribed) ~= nil),
    session = self, op = op }, Call)
  if how and how.standing then how.call = call end
  local reply, message, err
  if op.on_progress then
    self.progress_to[id] = op.on_progress
    local _ <close> = setmetatable({}, { __close = function() self.progress_to[id] = nil end })
    reply, message, err = self.channel:request(op, call)
  else
    reply, message, err = self.channel:request(op, call)
  end
  if not reply and call.written and ABANDONED[err.kind] and not OPENING[method] and not TASK_METHODS[method] then
    self.channel:cancel(call, cancel_notice(call))
  end
  if not reply then return nil, message, err end
  return reply
end

---------------------------------------------------------------------------
-- The era: found once per connection (era.negotiate)
---------------------------------------------------------------------------

-- What negotiation and an era's opening may use of the session: its send
-- and notify, and what the host gave (made once per session).
local function opener(self)
  local host = self.opener
  if host then return host end
  host = {
    identifier = self.identifier,
    protocol = self.protocol,
    answers = self.answers,
    settings = self.settings,
    warn = self.host.warn,
    send = function(op, state, method, params) return send(self, op, state, method, params) end,
    notify = function(op, state, message) return self.channel:notify(op, state, message) end,
  }
  self.opener = host
  return host
end

-- Open the era: negotiated (era.negotiate), or, when `known` is an era
-- opened by a handshake whose session was lost, that handshake again.
-- @return reply (of the opening) | nil, message, err
local function establish(self, op, known)
  local reply, state, err
  if known and not known.discovered then
    reply, state, err = known.open(opener(self), op)
  else
    reply, state, err = era.negotiate(opener(self), op)
  end
  if not reply then return nil, state, err end
  self.state = state
  return reply
end

-- The era and its state, found once per connection even when several tasks
-- of gather need it at once: the first opens it, the others wait for it and
-- use its state (or, if it failed, try their own). `known`: the era of a
-- state that was lost (see establish).
-- @return opened { reply (of the opening, when this call ran it) } | nil, message, err
local function ensure(self, op, known)
  engine.wait_until(function() return not self.opening end)
  if self.state then return {} end
  self.opening = true
  local ok, reply, message, err = pcall(establish, self, op, known)
  self.opening = nil
  if not ok then error(reply, 0) end
  if not reply then return nil, message, err end
  return { reply = reply }
end

--- Open the era if it is not open yet (the first operation does).
-- @return true | nil, message, err
function Session:open(op)
  if self.state then return true end
  local opened, message, err = ensure(self, op)
  if not opened then return nil, message, err end
  return true
end

---------------------------------------------------------------------------
-- Input the server asks for (2026-07-28: an InputRequiredResult)
---------------------------------------------------------------------------

session.MAX_INPUT_ROUNDS = 4     -- answers to input requests per request, at most
local MAX_INPUT_REQUESTS = 16    -- input requests in one round, at most
-- the requests a server may answer with input_required
local ASKS_INPUT = { ["tools/call"] = true, ["prompts/get"] = true, ["resources/read"] = true }

--- The answer to one input request of the 2026-07-28 era (an inputRequests
--- entry: { method, params }) through what the host gave: an ElicitResult,
--- a ListRootsResult or a CreateMessageResult. nil when no handler of this
--- client answers it; nil, refusal { code, message } when the sampling
--- handler refused or failed (the request cannot complete: an input
--- request has no error answer).
function Session:input_answer(request)
  local given, method = self.answers, type(request) == "table" and request.method or nil
  if method == "elicitation/create" and given.elicitation then
    return session.elicited(given.elicitation, request.params)
  elseif method == "roots/list" and given.roots then
    return answers.roots_result(given.roots)
  elseif method == "sampling/createMessage" and given.sampling then
    local result, refusal = sampled(self, request.params)
    if not result then return nil, refusal end
    return result
  end
  return nil
end

-- Does the host answer any input a server may ask for?
local function answers_input(self)
  local given = self.answers
  return given.elicitation ~= nil or given.sampling ~= nil or given.roots ~= nil
end

-- The answers to a round's inputRequests (key -> result), or nil when one
-- asks for input no handler of this client gives (the result then fails
-- input_required, naming what it asked), or nil, message, err when the
-- sampling handler refused one (input_required, naming the refusal).
local function input_responses(self, requests, method)
  local responses, count = {}, 0
  for key, request in pairs(requests) do
    count = count + 1
    if count > MAX_INPUT_REQUESTS or type(key) ~= "string" then return nil end
    local answer, refusal = self:input_answer(request)
    if refusal then
      return fail("input_required", { server = self.identifier, method = method, asked = request.method,
        refused = refusal.message })
    end
    if answer == nil then return nil end
    responses[key] = answer
  end
  return responses
end

--[[
Answer the server's input requests and send the request again, as long as it
asks and a handler can answer: each retry is a new request (a new id) with
the same method and params plus `inputResponses`, and `requestState` echoed
exactly when the server sent one (never otherwise). The server ran nothing it
has not asked about: a retry is the same request completed, not a second
execution. At most max_input_rounds rounds, inside the operation's budget.
@return reply (whose result is the last one: complete, or an input request
left for the era's complete to refuse) | nil, message, err
]]
local function answer_input(self, op, state, method, params, how, reply)
  local rounds = 0
  while ASKS_INPUT[method] and reply.result.resultType == "input_required" and answers_input(self) do
    local result = reply.result
    local requests, request_state = result.inputRequests, result.requestState
    if (requests ~= nil and (type(requests) ~= "table" or json.is_array(requests)))
        or (request_state ~= nil and type(request_state) ~= "string") or (requests == nil and request_state == nil) then
      return fail("malformed", { server = self.identifier,
        detail = "the input_required result carries no usable inputRequests or requestState" })
    end
    -- the bound first: a person is never asked for an answer that would not be sent
    if rounds >= self.max_input_rounds then
      return fail("input_required", { server = self.identifier, method = method, rounds = rounds })
    end
    local responses
    if requests ~= nil then
      local message, err
      responses, message, err = input_responses(self, requests, method)
      if err then return nil, message, err end
      if not responses then return reply end
    end
    rounds = rounds + 1
    if op.on_input then
      -- what was asked and answered, never the answers' content
      local answered = {}
      -- (an elicitation's action; "roots" or "sampled" for the other inputs)
      for key, response in pairs(responses or {}) do
        answered[key] = response.action or (requests[key].method == "roots/list" and "roots" or "sampled")
      end
      op.on_input { round = rounds, answers = answered, state = request_state ~= nil }
    end
    local retry = {}
    for k, v in pairs(params or {}) do retry[k] = v end
    retry.inputResponses, retry.requestState = responses, request_state
    local message, err
    reply, message, err = send(self, op, state, method, retry, how)
    if not reply then return nil, message, err end
  end
  return reply
end

---------------------------------------------------------------------------
-- Listening in the 2026-07-28 era: subscriptions/listen beside a request
---------------------------------------------------------------------------

-- How long a request waits for its listen request to be acknowledged before
-- it is sent anyway (a server that never acknowledges delays nothing more).
local LISTEN_ACK_SECONDS = 1
-- How long the listen stays open once the request is answered: a notice the
-- server sent before its answer travels on another stream and may arrive
-- just after it.
local LISTEN_DRAIN_SECONDS = 0.02

-- The notices to ask for: each list the server says it announces, and the
-- resources subscribed to. nil when there is nothing to ask for.
local function listen_params(state, wanted)
  local caps = state.capabilities or {}
  local function announces(cap) return type(caps[cap]) == "table" and caps[cap].listChanged == true end
  local asked = {}
  if announces("tools") then asked.toolsListChanged = true end
  if announces("prompts") then asked.promptsListChanged = true end
  if announces("resources") then asked.resourcesListChanged = true end
  if wanted.uris and #wanted.uris > 0 then asked.resourceSubscriptions = json.array(wanted.uris) end
  if next(asked) == nil then return nil end
  return { notifications = asked }
end

-- Run `send_it` (one request) while a subscriptions/listen request of the
-- same operation is open: the request goes once the listen is acknowledged
-- (or after a second), and when it is answered the listen ends (its stream
-- closed; over a line channel the cancel notice), which is no failure.
local function beside_listen(self, op, params, send_it)
  local watch = { open = false, done = false }
  local listening = { deadline = op.deadline, cancel = function() return watch.done end,
    acknowledged = function() watch.open = true end }
  local results = engine.gather {
    function()
      local limit = core.monotonic_ns() + LISTEN_ACK_SECONDS * 1e9
      engine.wait_until(function() return watch.open or watch.done or core.monotonic_ns() > limit end)
      local answer = table.pack(pcall(send_it))
      if not watch.ended then engine.sleep(LISTEN_DRAIN_SECONDS, function() return watch.ended end) end
      watch.done = true
      if not answer[1] then error(answer[2], 0) end
      return table.unpack(answer, 2, answer.n)
    end,
    function()
      send(self, listening, self.state, "subscriptions/listen", params)
      watch.open, watch.ended = true, true  -- a listen refused or ended holds the request back no longer
    end,
  }
  local sent, listened = results[1], results[2]
  if sent.n == 0 and sent.error ~= nil then error(sent.error, 0) end
  if listened.n == 0 and listened.error ~= nil then error(listened.error, 0) end  -- the host's handler raised
  return table.unpack(sent, 1, sent.n)
end

---------------------------------------------------------------------------
-- Listening in the 2026-07-28 era over one long-lived pipe: a standing listen
---------------------------------------------------------------------------

local FLAGS = { "promptsListChanged", "resourcesListChanged", "toolsListChanged" }

-- What a listen asks for, as one text two filters can be compared by.
local function filter_key(asked)
  local flags = {}
  for _, flag in ipairs(FLAGS) do
    if asked[flag] then flags[#flags + 1] = flag end
  end
  return table.concat(flags, ",") .. " " .. json.encode(asked.resourceSubscriptions or json.array {})
end

--[[
Over a channel that leaves a request open (stdio), one subscriptions/listen
stands on the era's state while the host listens, and the server may write
its notices at any time: they wait in the pipe and are read by the next
operation. This makes the standing listen match what the host listens for
now: the one standing when it asks for the same and is still open; else the
old one cancelled (notifications/cancelled for its id, as the stdio binding
ends a subscription) and, when anything is listened for, a new one opened,
at most once per operation and state, waiting at most LISTEN_ACK_SECONDS for
its acknowledgment. A server that ended the listen, or a child that was
replaced (a new child means a new state), gets a new one. A refusal is kept
for its filter on the state, so it is not asked again request after request.
@return entry { key, call, granted (the acknowledged filter, once it came) } | true (nothing to
  listen for, or listened for already in this operation) | nil, message, err
]]
local function settle_listen(self, op, state)
  local listened = listened_for(self)
  local asked = listened and listen_params(state, listened)
  local key = asked and filter_key(asked.notifications)
  local standing = state.standing
  -- (another task of gather may be opening it right now: it has no call yet)
  if standing and standing.key == key and not (standing.call and standing.call.ended) then return standing end
  if standing and standing.call and not standing.call.ended then
    self.channel:cancel(standing.call, cancel_notice(standing.call))
  end
  state.standing = nil
  if not asked or op.relistened == state then return true end
  local refused = state.refused and state.refused[key]
  if refused then return errors.pass(refused) end
  op.relistened = state
  -- the entry is also send's `how`: send puts the call in it before anything is written, and it
  -- stands on the state at once, so another task of gather finds it instead of opening a second
  local entry = { key = key, settle_seconds = LISTEN_ACK_SECONDS }
  entry.standing = function() return entry.granted ~= nil end
  local listening = { deadline = op.deadline, cancel = op.cancel, acknowledged = function(params)
    local granted = type(params) == "table" and params.notifications
    entry.granted = type(granted) == "table" and granted or {}
  end }
  state.standing = entry
  local reply, message, err = send(self, listening, state, "subscriptions/listen", asked, entry)
  if not reply then
    if state.standing == entry then state.standing = nil end
    -- refused: kept, so the same filter is not asked again on this state
    if err.kind == "rpc_error" then
      state.refused = state.refused or {}
      state.refused[key] = err
    end
    return nil, message, err
  end
  return entry
end

-- One request of the era, beside a listen request when the host listens
-- for notices in the 2026-07-28 era over a channel that carries several
-- requests at once; after the standing listen is settled over a channel
-- that leaves one open (a listen that fails holds the request back no
-- longer: the request goes all the same).
local function send_listening(self, op, state, method, params, how)
  if (state.era or era.of(state)).listens ~= "listen" then return send(self, op, state, method, params, how) end
  if self.standing and not (how and how.state) then
    settle_listen(self, op, state)
    return send(self, op, state, method, params, how)
  end
  local listened = self.concurrent and not op.listening and listened_for(self)
  local asked = listened and listen_params(state, listened)
  if not asked then return send(self, op, state, method, params, how) end
  op.listening = true
  local ok, reply, message, err = pcall(beside_listen, self, op, asked,
    function() return send(self, op, state, method, params, how) end)
  op.listening = nil
  if not ok then error(reply, 0) end
  return reply, message, err
end

--- A request inside an operation, opening the era first when it is not
--- open. When the server refused the request itself because its session is
--- gone, it never ran it: the era is opened again (initialize in the 2025
--- era; server/discover in the 2026-07-28 era, for a channel whose server
--- was replaced) and the request sent once more. Any other failure — above all one after the request was written —
--- is returned as it is, never sent again.
-- A request under a state of its own (`how.state`: a task's 2025 session,
-- kept by a handle that outlived the connection that made it) opens nothing
-- and is never sent again: a session the server lost took its tasks with it.
-- @param how nil or { decoding (rpc_classify's: true, "text" or "kept"), mirror (the tool's
--   x-mcp-header parameters, for a tools/call in the 2026-07-28 era), capabilities (what the
--   client declares in the 2026-07-28 envelope), task (a task is a final answer), state }
-- @return reply { result, duration_ms, bytes, containers } | nil, message, err
function Session:request(op, method, params, how)
  local ok, message, err = true, nil, nil
  -- (an operation that opened the era already goes straight on)
  if not (how and how.state) and not self.state then ok, message, err = self:open(op) end
  if not ok then return nil, message, err end
  local state = how and how.state or self.state
  local e = state.era or era.of(state)
  local reply
  if e.listens == "listen" then
    reply, message, err = send_listening(self, op, state, method, params, how)
  else
    reply, message, err = send(self, op, state, method, params, how)
  end
  if reply and e.asks_input then
    reply, message, err = answer_input(self, op, state, method, params, how, reply)
    if not reply then return nil, message, err end
    ok, message, err = e.complete(reply.result, self.identifier, method, how and how.task)
    if not ok then return nil, message, err end
  end
  if not reply and how and how.state then return nil, message, err end
  if not reply and err.session_lost and not op.reinitialized then
    op.reinitialized = true
    if self.state == state then self.state = nil end  -- another task may have renewed it already
    local opened
    opened, message, err = ensure(self, op, e)
    if not opened then return nil, message, err end
    -- a new server: in the 2026-07-28 era its listen is opened again first
    return send_listening(self, op, self.state, method, params, how)
  end
  if not reply then return nil, message, err end
  return reply
end

-- Between operations (mcp.engine.step: `op.hold_until`, seconds on
-- core.now()) in an era that listens with subscriptions/listen, over a
-- channel that carries several requests at once (HTTP): one listen, for
-- what the host listens for now, held until then or until a change notice
-- came on it; ending it is no failure.
function hold_listen(self, op, state)
  local listened = listened_for(self)
  local asked = listened and listen_params(state, listened)
  local seconds = op.hold_until - core.now()
  if not asked or seconds <= 0 then return end
  local came = false
  local holding = { deadline = Deadline.open(seconds, core.now), noticed = function() came = true end,
    cancel = function() return came or (op.cancel ~= nil and op.cancel()) end }
  send(self, holding, state, "subscriptions/listen", asked)
end

--- Over a channel that leaves a listen standing (stdio), in the 2026-07-28
--- era: make the standing subscriptions/listen match what the host listens
--- for now, at once (subscribe and unsubscribe ask for this: the server
--- learns of the change when it is made, not at the next request). Opens the
--- era first; a server that was replaced is opened again, once. Nothing to
--- do over other channels or in the 2025 era.
-- @return true | nil, message, err
function Session:listen(op)
  if not self.standing then return true end
  for _ = 1, 2 do
    local ok, message, err = self:open(op)
    if not ok then return nil, message, err end
    local state = self.state
    if (state.era or era.of(state)).listens ~= "listen" then return true end
    ok, message, err = settle_listen(self, op, state)
    if ok then return true end
    if not err.session_lost or op.reinitialized then return nil, message, err end
    op.reinitialized = true
    if self.state == state then self.state = nil end
  end
  return fail("transport", { server = self.identifier, detail = "the server process was replaced twice" })
end

--- Ask for log notices at `level` and above from now on (the settings'
--- log_level is changed first): the era's set_level once the era is open
--- (2025: logging/setLevel; 2026-07-28: each request names the level, so
--- nothing is sent); before that, the opening asks for it.
-- @return true | nil, message, err
function Session:set_log_level(op, level)
  self.settings.log_level = level
  if not self.state then return true end
  local e = era.of(self.state)
  return e.set_level(opener(self), op, self.state, level)
end

--- Is the server there? The opening when the era is not open yet, else the
--- era's ping_method: an MCP ping (2025 era) or server/discover (the
--- 2026-07-28 era has no ping: discovery is the cheapest request a modern
--- server must answer, and the era's `refreshed` reads what it learned).
-- @return reply | nil, message, err
function Session:ping(op)
  if not self.state then
    local opened, message, err = ensure(self, op)
    if not opened then return nil, message, err end
    if opened.reply then return opened.reply end
  end
  local e = era.of(self.state)
  local reply, message, err = self:request(op, e.ping_method, {})
  if not reply then return nil, message, err end
  local state = e.refreshed(self.state, reply.result)
  if not state then return fail("malformed", { server = self.identifier, detail = era.NO_VERSIONS }) end
  self.state = state
  return reply
end

--- Take what the server has sent already and nobody read yet, waiting for
--- nothing (over stdio: what sits in the child's line buffer and pipe; over
--- HTTP there is none): its change notices reach the connection now, the
--- way they would during a request, so a cached answer is not given past
--- one. Nothing before the era is open.
function Session:drain(op)
  local state = self.state
  if not state then return end
  local reading = { state = state }  -- no request of its own: what arrives is the session's
  reading.on_message = function(message) on_message(self, op, reading, message) end
  self.channel:drain(op, reading)
  if op.hold_until and self.concurrent and (state.era or era.of(state)).listens == "listen" then
    hold_listen(self, op, state)
  end
end

local ROOTS_CHANGED = { method = "notifications/roots/list_changed",
  body = '{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}' }

--- Answer with `roots` (a list answers.roots checked) from now on, and tell
--- the server where its era announces a change (roots_notice) and the era is
--- open; where it does not, the server's next roots/list input request gets
--- them.
-- @return true | nil, message, err
function Session:set_roots(op, roots)
  self.answers.roots = roots
  local state = self.state
  if not state or not era.of(state).roots_notice then return true end
  return self.channel:notify(op, state, ROOTS_CHANGED)
end

--- End the era's state on the server (bounded by `op`) and close the channel.
function Session:close(op)
  local state = self.state
  self.state = nil
  if state and state.id then pcall(self.channel.end_session, self.channel, op, state) end
  self.channel:close()
  return true
end

session.Session = Session
return session
