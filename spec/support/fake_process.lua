--- A scripted server process for the conformance suite's "stdio" profile: what core.spawn
--- gives, played from the same script as the fake HTTP leg (support/fake_server.lua), so the
--- real stdio channel (lua/mcpclient/channel/stdio.lua) runs every check that is not about
--- HTTP's own mechanics.
--
-- A line the client writes is a message: a request takes the next scripted answer, whose text
-- (or each `data:` line of an event stream) comes back as lines on stdout; a notification or an
-- answer to a server request is recorded and takes nothing. Every message is recorded in
-- `fake.requests`, as the HTTP leg records its requests (with no HTTP fields). A 2025-era script
-- answers the era probe by itself (method not found, unrecorded), as a 2025 stdio server does; a
-- 2026-07-28 script acknowledges a subscriptions/listen by itself (recorded, granting what it asks,
-- the listen left open), as a 2026-07-28 stdio server does, so its notices can name the listen.
-- A scripted hang writes nothing while the script's clock moves on; a scripted "transport"
-- failure is a child that died before reading the request; any other failure, and an answer with
-- nothing more to read, one that died after (its output ends). Read while no request waits for its
-- answer, it has nothing to say yet, as a live child.
-- Injected with mcp.connect{ command = ..., transport = { spawn = ... } }.
local core = require "mcpclient.core"

local json = core.json

local Process = {}
Process.__index = Process

local M = {}

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

-- One message the client wrote, recorded as the HTTP fake records a request.
local function record(self, body, decoded)
  self.fake.requests[#self.fake.requests + 1] = { method = decoded.method, id = decoded.id, body = decoded,
    raw = body, session = "" }
end

-- The child's answer to one request line.
function Process:answer(body, message)
  local fake = self.fake
  if not fake.modern and message.method == "server/discover" then
    fake.probes = fake.probes + 1
    self.out[#self.out + 1] = json.encode { jsonrpc = "2.0", id = message.id,
      error = { code = -32601, message = "Method not found" } }
    return true
  end
  if fake.modern and message.method == "subscriptions/listen" then
    record(self, body, message)
    local asked = type(message.params) == "table" and message.params.notifications or {}
    self.out[#self.out + 1] = json.encode { jsonrpc = "2.0", method = "notifications/subscriptions/acknowledged",
      params = { notifications = asked, _meta = { ["io.modelcontextprotocol/subscriptionId"] = message.id } } }
    return true
  end
  local entry = table.remove(fake.queue, 1)
  record(self, body, message)  -- the attempt, as the HTTP fake records one (a retry would show twice)
  if entry and entry.fail == "transport" then  -- died before it read the line
    self.dead = true
    return false
  end
  local duration = table.remove(fake.durations, 1) or 0
  self.unanswered[message.id] = true
  if not entry then
    self.dead = true
    return true
  end
  if entry.custom then error("the stdio profile plays message scripts only, not will(fn)", 3) end
  if entry.hang then
    self.hang = entry.hang
    return true
  end
  fake:advance(duration)
  if entry.fail then
    self.dead = true
    return true
  end
  for _, text in ipairs(messages_of(entry, entry.build(message.id))) do self.out[#self.out + 1] = text end
  return true
end

--- write(text, ms, from): each whole line is a message; true | nil, "closed", ending.
function Process:write(text, _, from)
  if self.dead or self.closed then return nil, "closed", "exited with status 1" end
  for line in text:sub((from or 0) + 1):gmatch("([^\n]*)\n") do
    local message = json.decode(line)
    if type(message) == "table" and type(message.method) == "string" and message.id ~= nil then
      if not self:answer(line, message) then return nil, "closed", "exited with status 1" end
    elseif type(message) == "table" then
      record(self, line, message)
      if type(message.method) == "string" and message.method ~= "notifications/cancelled" then
        self.fake:advance(table.remove(self.fake.durations, 1) or 0)
      end
    end
  end
  return true
end

--- read_line(ms): the next line | nil, "timeout" (a hang moves the script's clock on) |
--- nil, "closed", ending.
function Process:read_line()
  local line = table.remove(self.out, 1)
  if line then
    local message = json.decode(line)
    if type(message) == "table" and message.method == nil and message.id ~= nil then
      self.unanswered[message.id] = nil
    end
    return line
  end
  if not self.dead and next(self.unanswered) == nil then return nil, "timeout" end  -- nothing asked: nothing to say
  if self.hang then
    self.fake:advance(self.hang)
    return nil, "timeout"
  end
  -- nothing scripted is left to say: the child ends its output (and exits)
  self.dead = true
  return nil, "closed", "exited with status 1"
end

function Process.stderr() return "" end
function Process.pid() return 4242 end
function Process.fds() return -1, -1, -1 end

function Process:status()
  if self.dead or self.closed then return "exited", 1 end
  return "running"
end

function Process:close()
  self.closed = true
  self.fake.closed = true
  return "exited with status 0"
end

--- The spawn function for connect's transport seam: each child plays the same script.
function M.spawner(fake)
  return function()
    return setmetatable({ fake = fake, out = {}, unanswered = {} }, Process)
  end
end

return M
