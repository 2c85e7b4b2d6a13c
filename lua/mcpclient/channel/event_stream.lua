--- The event-stream reader of the HTTP channel: the streams of one request,
--- read until the message that answers it.
--
-- A reader belongs to one request. Its state survives a resumption: the
-- decoder is new for each stream, the last event id and the retry interval
-- carry over. Every message on the stream that is not the answer (a server
-- request, a notification) is decoded and handed to `on_message`, which the
-- session gave with the request; bytes that are no JSON-RPC message are
-- passed over. The stream listener does the same for a stream that answers
-- no request (the GET stream of a 2025 session).
local core = require "mcpclient.core"

local json = core.json

local event_stream = {}

local Reader = {}
Reader.__index = Reader

-- A message that is not the answer goes to on_message when it is one (a
-- table with a method); anything unreadable is passed over.
local function deliver(on_message, data)
  local ok, message = pcall(json.decode, data)
  if ok and type(message) == "table" and type(message.method) == "string" then on_message(message) end
end

-- Look at decoded events; true once the answer is among them.
local function take(self, events)
  local call = self.call
  for _, event in ipairs(events) do
    self.messages = self.messages + 1
    local kind, a, b = core.rpc_classify(event.data, call.id, call.decoding, self.max_containers)
    if kind == "result" or kind == "error" then
      -- an error's text is kept (it is small) for what the classifier does not read: its data
      self.answer = { kind = kind, a = a, b = b, raw = kind == "error" and event.data or nil }
      return true
    end
    if kind == "other" then
      local on_message = call.on_message -- read only now: a call may make it on first use
      if on_message then deliver(on_message, event.data) end
    end
  end
  return false
end

--- A reader for the answer to the request `call`.
-- @param call { id, decoding (what rpc_classify applies), on_message (or nil: other messages are
--   passed over; read when such a message arrives) }
-- @param max_containers rpc_classify's cap on the answer's objects and arrays
-- @return reader: `answer` ({ kind, a, b } of rpc_classify, and for an error its text, raw; once in), `bytes`,
--   `messages`, `last_event_id`, `retry_ms`; methods feed, restart, broke_after_event, finish
function event_stream.reader(call, max_containers)
  return setmetatable({ call = call, max_containers = max_containers, messages = 0, bytes = 0 }, Reader)
end

--- Bytes of the stream: decode them; true once the answer is in. The
--- decoder is made on the first byte of each stream.
function Reader:feed(chunk)
  local decoder = self.decoder
  if not decoder then
    decoder = core.sse_decoder()
    self.decoder = decoder
  end
  self.bytes = self.bytes + #chunk
  return take(self, decoder:feed(chunk))
end

--- The leg's on_stream hook for one more stream of the same request.
function Reader:restart()
  self.decoder = nil
  return function(chunk) return self:feed(chunk) end
end

--- Did the stream that just broke give an event id to resume from?
function Reader:broke_after_event()
  local decoder = self.decoder
  if not decoder then return false end
  local event_id = decoder:last_event_id()
  return event_id ~= nil and event_id ~= ""
end

--- The stream is over: take what was pending and remember where it stood.
function Reader:finish()
  local decoder = self.decoder
  if not decoder then return end
  take(self, decoder:finish())
  local event_id = decoder:last_event_id()
  if event_id and event_id ~= "" then self.last_event_id = event_id end
  self.retry_ms = decoder:retry() or self.retry_ms
  decoder:close()
  self.decoder = nil
end

--- A stream that answers no request: every message goes to on_message.
-- @return on_stream (the leg's hook; never stops the stream), close (frees the decoder)
function event_stream.listener(on_message)
  local decoder = core.sse_decoder()
  local function on_stream(chunk)
    for _, event in ipairs(decoder:feed(chunk)) do deliver(on_message, event.data) end
    return false
  end
  return on_stream, function() decoder:close() end
end

return event_stream
