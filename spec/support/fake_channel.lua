--- A scripted channel that is not HTTP, for the conformance suite's "lines" profile.
--
-- It speaks the channel contract of docs/ARCHITECTURE.md (request, notify, cancel, drain,
-- end_session, close) the way a line-based channel (stdio) does: a request is written whole or not at all, the
-- server's messages come back one by one, there is no status, no header, no session id and no
-- stream to close, so a cancellation is always a notice. It plays the same script as the fake
-- HTTP leg (support/fake_server.lua: will_return, will_stream, will_fail, will_hang, take), read at
-- the message level: an answer's text is one message, an event stream's `data:` lines are one
-- message each. Every message the client writes is recorded in `fake.requests`, like the HTTP
-- leg's, with no HTTP fields. Injected with mcp.connect{ channel = FakeChannel.new(fake) }.
local core = require "mcpclient.core"
local errors = require "mcpclient.errors"

local json = core.json
local fail = errors.fail

local FakeChannel = {}
FakeChannel.__index = FakeChannel

local M = {}

--- A channel over the script of `fake` (a support/fake_server.lua object).
function M.new(fake, identifier)
  return setmetatable({ fake = fake, identifier = identifier or "lines" }, FakeChannel)
end

-- One message the client wrote, recorded as the HTTP fake records a request.
local function record(self, body)
  local decoded = json.decode(body)
  local entry = { method = decoded.method, id = decoded.id, body = decoded, raw = body, session = "" }
  self.fake.requests[#self.fake.requests + 1] = entry
  return entry
end

-- The messages of one scripted answer: the whole text, or each data line of an event stream.
local function messages_of(entry, text)
  if entry.content_type ~= "text/event-stream" then return { text } end
  local list = {}
  for line in text:gmatch("[^\n]+") do
    local data = line:match("^data:%s?(.*)$")
    if data and data ~= "" then list[#list + 1] = data end
  end
  return list
end

-- A scripted hang: the child never answers; the cancel hook or the budget ends the wait.
local function hang(self, op, call, step)
  while true do
    if op.cancel and op.cancel() then
      return fail("cancelled", { server = self.identifier, in_flight = call.method == "tools/call" })
    end
    self.fake:advance(step)
    if op.deadline:remaining() <= 0 then
      return fail("timeout", { server = self.identifier, budget = errors.seconds(op.deadline.total),
        detail = "the server wrote nothing within the budget" })
    end
  end
end

function FakeChannel:request(op, call)
  if op.cancel and op.cancel() then return fail("cancelled", { server = self.identifier, in_flight = false }) end
  if op.deadline:remaining() <= 0 then
    return fail("deadline", { server = self.identifier, budget = errors.seconds(op.deadline.total) })
  end
  call.written = true
  local fake = self.fake
  if not fake.modern and call.method == "server/discover" then
    -- a 2025-era server answers the era probe by itself, as the HTTP fake does: unrecorded, no
    -- script entry, no time (here as a 2025 stdio server would: method not found)
    fake.probes = fake.probes + 1
    return fail("rpc_error", { server = self.identifier, rpc_code = -32601, detail = "Method not found" })
  end
  record(self, call.body)
  local duration = table.remove(fake.durations, 1) or 0
  local entry = table.remove(fake.queue, 1)
  if not entry then
    return fail("malformed", { server = self.identifier, detail = "the server wrote no answer" })
  end
  if entry.custom then error("the lines channel plays message scripts only, not will(fn)", 2) end
  if entry.hang then return hang(self, op, call, entry.hang) end
  fake:advance(duration)
  if entry.fail then
    call.written = entry.fail ~= "transport"  -- a pipe that broke before the line went out
    return fail(entry.fail, { server = self.identifier, budget = errors.seconds(op.deadline.total),
      detail = entry.detail or "scripted failure" })
  end
  local bytes = 0
  for _, text in ipairs(messages_of(entry, entry.build(call.id))) do
    bytes = bytes + #text
    local kind, a, b = core.rpc_classify(text, call.id, call.decoding)
    if kind == "result" then
      return { result = a, duration_ms = math.floor(duration * 1000 + 0.5), bytes = bytes, containers = b }
    elseif kind == "error" then
      return fail("rpc_error", { server = self.identifier, rpc_code = a, detail = b })
    elseif kind == "other" and call.on_message then
      local ok, message = pcall(json.decode, text)
      if ok and type(message) == "table" and type(message.method) == "string" then call.on_message(message) end
    elseif kind == "malformed" then
      return fail("malformed", { server = self.identifier, detail = a })
    end
  end
  return fail("malformed",
    { server = self.identifier, detail = "the server's messages carried no answer to the request" })
end

function FakeChannel:notify(_, _, message)
  record(self, message.body)
  self.fake:advance(table.remove(self.fake.durations, 1) or 0)
  return true
end

-- No stream to close: the notice is written in both eras.
function FakeChannel:cancel(_, notice)
  record(self, notice.body)
end

-- Every scripted message is handed out by the request it belongs to: nothing waits between them.
function FakeChannel.drain() return true end

function FakeChannel.end_session() return true end

function FakeChannel:close()
  self.fake.closed = true
  return true
end

return M
