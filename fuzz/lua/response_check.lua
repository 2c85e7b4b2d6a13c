--- Checker of fuzz/response_fuzz.c: Transport:request's classification of a
--- response (lua/mcpclient/transport.lua), through a fake leg.
--
-- Input: segments separated by "\30\30" (two ASCII record separators); the
-- first answers the tools/call POST, later ones the resumption GETs. Each:
--   byte 1  status: STATUSES[b % #STATUSES + 1], or 0/1/600/999 for b >= 0xF0
--   byte 2  flags: bits 0-3 chunk size code (0: the body in one piece;
--           1-11: that many bytes; 12-15: 16, 64, 256, 4096), bit 4 truncated,
--           bit 5 the leg fails instead (transport; with bit 4, timeout),
--           bit 6 (first segment) a session is open, bit 7 (first) ordered
--   then header lines up to the first blank line, then the body.
-- The header lines pass through csrc/http.c's header callback (fuzz_headers),
-- which decides streaming as the C leg does; streamed bodies are handed to
-- on_stream in chunks until it asks to stop. Outcome: a result table and an
-- info table, or nil, a message, and an err of a kind a request can produce,
-- whose message is valid UTF-8 without control characters. No error escapes.
local core = require "mcpclient.core"
local Transport = require "mcpclient.transport"
local Deadline = require "mcpclient.deadline"
local errors = require "mcpclient.errors"
local hostgate = require "mcpclient.hostgate"

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
  content_type = true, deadline = true, interrupted = true,
}
-- Kinds that say (or let a caller conclude) the server never had the request:
-- after a 2xx to the POST, none of them may appear.
local NEVER_SENT = { transport = true, http_status = true, deadline = true }

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
  return {
    status = b1 >= 0xF0 and ODD_STATUSES[(b1 & 3) + 1] or STATUSES[b1 % #STATUSES + 1],
    chunk = code == 0 and math.max(#body, 1) or CHUNKS[code] or code,
    truncated = b2 & 0x10 ~= 0,
    fail = b2 & 0x20 ~= 0 and (b2 & 0x10 ~= 0 and "timeout" or "transport") or nil,
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

-- The leg: what csrc/http.c's send returns for these bytes.
local function fake_leg(segments)
  local leg = { sent = 0, calls = 0 }
  function leg.send(_, req)
    local message = req.body and core.json.decode(req.body)
    if type(message) == "table" and message.method == nil then
      -- the client answers a server request found on the stream
      return { status = 202, headers = {}, body = "", media_type = "", duration_ms = 0.5,
        streamed = false, stopped = false, truncated = false }
    end
    if type(message) == "table" and message.method == "tools/call" then leg.calls = leg.calls + 1 end
    leg.sent = leg.sent + 1
    check(req.max_bytes == 2 * 1024 * 1024 and req.timeout_ms >= 1, "odd request limits")
    local seg = table.remove(segments, 1)
    if not seg then return nil, "transport", "Failed to connect to 203.0.113.10 port 80: Connection refused" end
    if seg.fail then return nil, seg.fail, "scripted " .. seg.fail .. " \27[31m\n" .. seg.body end
    local headers, event_stream, ok, media = headers_of(seg.head)
    if not ok then return nil, "transport", "the response headers are larger than 262144 bytes" end
    local response = {
      status = seg.status, headers = headers, media_type = media, body = seg.body, duration_ms = 1.25,
      streamed = false, stopped = false, truncated = seg.truncated,
    }
    if event_stream and req.on_stream then
      response.streamed, response.body = true, ""
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

return function(input)
  local segments = parse(input)
  local first = segments[1]
  local leg = fake_leg(segments)
  local url = "http://fuzz.example/mcp"
  local transport = Transport.new {
    identifier = "fuzz", url = url, target = assert(hostgate.parse_url(url)), leg = leg,
    host_gate = hostgate.default, refuse_private = false, tls = {}, connect_timeout = 10,
  }
  local op = { deadline = Deadline.open(20, function() return 1000.0 end) }
  local session = first.session and { id = "fuzz-session", version = "2025-11-25" } or nil
  local result, a, b = transport:request(op, session, "tools/call", { name = "echo", arguments = {} }, first.ordered)
  check(leg.sent >= 1 and leg.sent <= 1 + 2, "%d legs sent for one request", leg.sent)
  check(leg.calls == 1, "tools/call was sent %d times", leg.calls)
  if result ~= nil then
    check(type(result) == "table" and not core.json.is_array(result), "the result is not an object table")
    check(type(a) == "table" and math.type(a.duration_ms) == "integer", "no leg info with the result")
    check(a.session_id == nil or (type(a.session_id) == "string" and a.session_id ~= ""), "odd session id")
    check(not first.fail and first.status < 300, "a result from a failed first leg")
    return
  end
  check(type(a) == "string" and type(b) == "table", "not a failure triple: %s, %s", type(a), type(b))
  check(REQUEST_KINDS[b.kind] and errors.KINDS[b.kind], "failure kind %s", tostring(b.kind))
  check(b.server == "fuzz" and b.message == a, "the err table does not match the message")
  clean_message(a)
  if b.detail ~= nil then check(type(b.detail) == "string" and utf8.len(b.detail), "detail is not clean text") end
  if first.fail then
    check(b.kind == first.fail, "the leg failed with %s but the request says %s", first.fail, b.kind)
  elseif first.status >= 200 and first.status < 300 then
    check(not NEVER_SENT[b.kind] and not b.session_lost, "after a 2xx the request failed as %s", b.kind)
  elseif first.status >= 300 then
    check(b.kind == "http_status" and b.status == first.status, "status %d gave %s", first.status, b.kind)
    check(b.session_lost == nil or b.session_lost == true, "session_lost is %s", tostring(b.session_lost))
    if b.session_lost then check(session and (first.status == 404 or first.status == 400), "session lost on %d",
      first.status) end
  elseif b.kind == "rpc_error" then
    check(math.type(b.code) == "integer", "rpc_error without an integer code")
  end
end
