--- Checker of fuzz/response_fuzz.c: a tools/call through the session
--- (lua/mcpclient/session.lua) over the HTTP channel (lua/mcpclient/channel/http.lua),
--- the way a connection makes one, with a fake leg answering.
--
-- Input: segments separated by "\30\30" (two ASCII record separators); the
-- first answers the tools/call POST, later ones what the client sends next
-- (the resumption GETs, or the initialize and the tools/call again after the
-- server said the session was gone). Each:
--   byte 1  status: STATUSES[b % #STATUSES + 1], or 0/1/600/999 for b >= 0xF0
--   byte 2  flags: bits 0-3 chunk size code (0: the body in one piece;
--           1-11: that many bytes; 12-15: 16, 64, 256, 4096), bit 4 truncated,
--           bit 5 the leg fails instead (see below),
--           bit 6 (first segment) a session is open, bit 7 (first) ordered
--   then header lines up to the first blank line, then the body.
-- A failing leg (bit 5) answers as csrc/net/http_leg.c's does: with bit 4, "timeout"
-- (the request left when bit 1 of byte 1 is set); without it, "transport"
-- with the request never sent (bit 0 of byte 1 clear) or "interrupted" after
-- it left (set).
-- The header lines pass through csrc/net/http_headers.c's header callback (fuzz_headers),
-- which decides streaming as the C leg does; streamed bodies are handed to
-- on_stream in chunks until it asks to stop. Notifications (the reply to a
-- server request, notifications/initialized, notifications/cancelled) are
-- answered 202 without taking a segment. Outcome: a reply whose result is a
-- table, or nil, a message, and an err of a kind a request can produce, whose
-- message is valid UTF-8 without control characters. No error escapes. A
-- request the leg says never left fails with a kind that says so, and is
-- never cancelled on the wire.
local core = require "mcpclient.core"
local Deadline = require "mcpclient.deadline"
local errors = require "mcpclient.errors"
local hostgate = require "mcpclient.hostgate"
local http = require "mcpclient.channel.http"
local session = require "mcpclient.session"

local headers_of = _G.fuzz_headers

core.sleep = function() end -- resumption waits are counted in slices; a fuzz run must not sleep

local STATUSES = {
  200, 200, 200, 200, 201, 202, 204, 299, 300, 301, 302, 304, 400, 401, 403, 404,
  405, 406, 409, 429, 500, 502, 503, 100, 199,
}
local ODD_STATUSES = { 0, 1, 600, 999 }
local CHUNKS = { [12] = 16, [13] = 64, [14] = 256, [15] = 4096 }
local REQUEST_KINDS = {
  transport = true, timeout = true, http_status = true, malformed = true, rpc_error = true,
  content_type = true, deadline = true, interrupted = true, protocol_version = true, missing_capability = true,
}
-- Kinds that say (or let a caller conclude) the server never had the request:
-- after a 2xx to the POST, none of them may appear.
local NEVER_SENT = { transport = true, http_status = true, deadline = true }
-- What a refused POST (status 300 or more) fails as: each names the status.
local REFUSALS = { http_status = true, protocol_version = true, missing_capability = true }

local check = require "check"

local function parse_segment(s)
  local b1, b2 = s:byte(1, 2)
  b1, b2 = b1 or 0, b2 or 0
  local rest = s:sub(3)
  local head, body
  local lead = rest:match("^\r?\n")
  if lead then
    head, body = "", rest:sub(#lead + 1)
  else
    head, body = rest:match("^(.-\n)\r?\n(.*)$")
    if not head then head, body = rest, "" end
  end
  local code = b2 & 15
  local fail, sent
  if b2 & 0x20 ~= 0 then
    if b2 & 0x10 ~= 0 then
      fail, sent = "timeout", b1 & 2 ~= 0
    elseif b1 & 1 ~= 0 then
      fail, sent = "interrupted", true
    else
      fail, sent = "transport", false
    end
  end
  return {
    status = b1 >= 0xF0 and ODD_STATUSES[(b1 & 3) + 1] or STATUSES[b1 % #STATUSES + 1],
    chunk = code == 0 and math.max(#body, 1) or CHUNKS[code] or code,
    truncated = b2 & 0x10 ~= 0,
    fail = fail,
    sent = sent,
    session = b2 & 0x40 ~= 0,
    ordered = b2 & 0x80 ~= 0,
    head = head,
    body = body,
  }
end

local function parse(input)
  local segments, at = {}, 1
  while #segments < 4 do
    local s, e = input:find("\30\30", at, true)
    segments[#segments + 1] = parse_segment(input:sub(at, (s or 0) - 1))
    if not s then break end
    at = e + 1
  end
  return segments
end

local NOTIFIED = { status = 202, headers = {}, body = "", media_type = "", duration_ms = 0.5,
  streamed = false, stopped = false, truncated = false }

-- The leg: what csrc/net/http_leg.c's send returns for these bytes. `sent` lists what
-- took a segment (the method, or "GET"), `notices` the notifications/cancelled.
local function fake_leg(segments)
  local leg = { sent = {}, notices = 0 }
  function leg.send(_, req)
    check(req.max_bytes == 2 * 1024 * 1024 and req.timeout_ms >= 1, "odd request limits")
    local message = req.body and core.json.decode(req.body)
    if type(message) == "table" and (message.method == nil or message.method:find("^notifications/")) then
      -- the reply to a server request found on the stream, or a notification
      check(req.method == "POST", "a notification as %s", req.method)
      if message.method == "notifications/cancelled" then leg.notices = leg.notices + 1 end
      return NOTIFIED
    end
    leg.sent[#leg.sent + 1] = type(message) == "table" and message.method or req.method
    local seg = table.remove(segments, 1)
    if not seg then
      return nil, "transport", "Failed to connect to 203.0.113.10 port 80: Connection refused", false
    end
    if seg.fail then return nil, seg.fail, "scripted " .. seg.fail .. " \27[31m\n" .. seg.body, seg.sent end
    local headers, event_stream, ok, media = headers_of(seg.head)
    if not ok then return nil, "transport", "the response headers are larger than 262144 bytes", false end
    local response = {
      status = seg.status, headers = headers, media_type = media, body = seg.body, duration_ms = 1.25,
      streamed = false, stopped = false, truncated = seg.truncated, session_id = headers["mcp-session-id"],
    }
    if event_stream and req.on_stream then
      response.streamed, response.body, seg.streamed = true, "", true
      for at = 1, #seg.body, seg.chunk do
        if req.on_stream(seg.body:sub(at, at + seg.chunk - 1)) then
          response.stopped = true
          break
        end
      end
    end
    return response
  end
  function leg.close() end
  function leg.resolve() return { "203.0.113.10" } end -- a documentation address: passes the default gate
  return leg
end

local function clean_message(message)
  check(utf8.len(message) ~= nil, "the message is not valid UTF-8: %q", message)
  check(not message:find("[%c\127]"), "the message holds a control character: %q", message)
end

-- Did the first answer say the session is gone (the channel's rule: a 404, or
-- a 400 whose kept body names the session)? Then the session opens a new one
-- and sends the call again: the server never ran it.
local function session_refused(first)
  local body = first.streamed and "" or first.body
  return first.session and not first.fail
    and (first.status == 404 or (first.status == 400 and body:lower():find("session", 1, true) ~= nil))
end

return function(input)
  local segments = parse(input)
  local first = segments[1]
  local leg = fake_leg(segments)
  local url = "http://fuzz.example/mcp"
  local clock = function() return 1000.0 end
  local channel = http.new {
    identifier = "fuzz", url = url, target = assert(hostgate.parse_url(url)), leg = leg,
    host_gate = hostgate.default, refuse_private = false, tls = {}, connect_timeout = 10, clock = clock,
  }
  local s = session.new(channel, { identifier = "fuzz", protocol = "auto" })
  -- the era is open: a 2025 session (with an id when the flag says so), as after initialize
  s.state = { version = "2025-11-25", id = first.session and "fuzz-session" or nil, server_info = {},
    capabilities = {} }
  local op = { deadline = Deadline.open(20, clock) }
  local reply, a, b = s:request(op, "tools/call", { name = "echo", arguments = {} },
    { decoding = first.ordered or nil })
  local calls, sent = 0, leg.sent
  for _, method in ipairs(sent) do
    if method == "tools/call" then calls = calls + 1 end
  end
  check(sent[1] == "tools/call", "the first exchange was %s", tostring(sent[1]))
  local renewed = sent[2] == "initialize"
  if renewed then
    -- the session was gone: initialize, then the call once more (or not, when the opening failed)
    check(session_refused(first), "initialize after a first answer that did not lose the session")
    check(calls <= 2 and #sent <= 3 + 2, "%d exchanges, %d tools/call after a lost session", #sent, calls)
  else
    check(calls == 1, "tools/call was sent %d times", calls)
    check(#sent <= 1 + 2, "%d legs sent for one request", #sent)
  end
  check(leg.notices <= 1, "%d cancel notices", leg.notices)
  if reply ~= nil then
    check(type(reply) == "table" and type(reply.result) == "table" and not core.json.is_array(reply.result),
      "the result is not an object table")
    check(math.type(reply.duration_ms) == "integer", "no duration with the result")
    check(reply.session_id == nil or (type(reply.session_id) == "string" and reply.session_id ~= ""),
      "odd session id")
    check(renewed or (not first.fail and first.status < 300), "a result from a failed first leg")
    check(leg.notices == 0, "a call that was answered was cancelled on the wire")
    return
  end
  check(type(a) == "string" and type(b) == "table", "not a failure triple: %s, %s", type(a), type(b))
  check(REQUEST_KINDS[b.kind] and errors.KINDS[b.kind], "failure kind %s", tostring(b.kind))
  check(b.server == "fuzz" and b.message == a, "the err table does not match the message")
  clean_message(a)
  if b.detail ~= nil then check(type(b.detail) == "string" and utf8.len(b.detail), "detail is not clean text") end
  check(leg.notices == 0 or b.kind == "timeout", "a %s failure was cancelled on the wire", b.kind)
  if renewed then return end
  if first.fail then
    check(b.kind == first.fail, "the leg failed with %s but the request says %s", first.fail, b.kind)
    if first.fail == "timeout" then
      -- abandoned after it left: the server is told; never when it did not leave
      check(leg.notices == (first.sent and 1 or 0), "a timeout with the request %s sent %d cancel notices",
        first.sent and "out" or "never out", leg.notices)
    end
  elseif first.status >= 200 and first.status < 300 then
    check(not NEVER_SENT[b.kind] and not b.session_lost, "after a 2xx the request failed as %s", b.kind)
  elseif first.status >= 300 then
    check(REFUSALS[b.kind] and b.status == first.status, "status %d gave %s", first.status, b.kind)
    -- a lost session is renewed, unless the refusal named a revision or a capability instead
    check(not session_refused(first) or b.kind ~= "http_status", "a lost session (status %d) was not renewed",
      first.status)
  elseif b.kind == "rpc_error" then
    check(math.type(b.rpc_code) == "integer", "rpc_error without an integer code")
  end
end
