-- core.sse_decoder: the incremental text/event-stream decoder (WHATWG HTML
-- "interpretation of an event stream", plus the lenient final dispatch in finish()).
local core = require "mcpclient.core"

-- Feed every chunk, then finish; returns all events in order and the decoder.
local function decode(chunks)
  local dec = core.sse_decoder()
  local events = {}
  for _, chunk in ipairs(chunks) do
    for _, ev in ipairs(dec:feed(chunk)) do events[#events + 1] = ev end
  end
  for _, ev in ipairs(dec:finish()) do events[#events + 1] = ev end
  return events, dec
end

local function whole(s) return decode({ s }) end

local function bytewise(s)
  local chunks = {}
  for i = 1, #s do chunks[i] = s:sub(i, i) end
  return decode(chunks)
end

local MCP_STREAM = "id: abc\ndata:\n\n"
  .. "event: message\nid: e1\n"
  .. 'data: {"jsonrpc":"2.0","id":1,"result":{"tools":[]}}\n\n'

local MCP_EVENTS = {
  { event = "message", id = "e1", data = '{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}' },
}

describe("core.sse_decoder", function()
  describe("line endings", function()
    local expected = { { data = "a\nb" }, { data = "c" } }
    for name, nl in pairs({ LF = "\n", CR = "\r", CRLF = "\r\n" }) do
      it("splits lines at " .. name, function()
        local s = "data: a" .. nl .. "data: b" .. nl .. nl .. "data: c" .. nl .. nl
        assert.same(expected, (whole(s)))
        assert.same(expected, (bytewise(s)))
      end)
    end

    it("accepts mixed line endings", function()
      local s = "data: a\rdata: b\r\n\ndata: c\n\r"
      assert.same(expected, (whole(s)))
      assert.same(expected, (bytewise(s)))
    end)

    it("does not see a blank line in a CRLF split between CR and LF", function()
      local events = decode({ "data: a\r", "\ndata: b\r", "\n\r", "\n" })
      assert.same({ { data = "a\nb" } }, events)
    end)

    it("dispatches at a CR ending a chunk without waiting for the next chunk", function()
      local dec = core.sse_decoder()
      assert.same({}, dec:feed("data: x\r"))
      assert.same({ { data = "x" } }, dec:feed("\r"))
      assert.same({}, dec:feed("\n")) -- the LF belongs to the CR before it
      assert.same({}, dec:finish())
    end)

    it("treats CR CR as two line ends", function()
      local dec = core.sse_decoder()
      assert.same({ { data = "x" } }, dec:feed("data: x\r\r"))
    end)
  end)

  describe("a realistic MCP stream", function()
    it("decodes when fed whole", function()
      local events, dec = whole(MCP_STREAM)
      assert.same(MCP_EVENTS, events)
      assert.equal("e1", dec:last_event_id())
    end)

    it("decodes identically split into two chunks at every byte boundary", function()
      for cut = 0, #MCP_STREAM do
        local events, dec = decode({ MCP_STREAM:sub(1, cut), MCP_STREAM:sub(cut + 1) })
        assert.same(MCP_EVENTS, events, "cut at " .. cut)
        assert.equal("e1", dec:last_event_id(), "cut at " .. cut)
      end
    end)

    it("decodes identically fed byte by byte", function()
      local events, dec = bytewise(MCP_STREAM)
      assert.same(MCP_EVENTS, events)
      assert.equal("e1", dec:last_event_id())
    end)

    it("decodes identically with CRLF endings split at every byte boundary", function()
      local crlf = MCP_STREAM:gsub("\n", "\r\n")
      for cut = 0, #crlf do
        local events, dec = decode({ crlf:sub(1, cut), crlf:sub(cut + 1) })
        assert.same(MCP_EVENTS, events, "cut at " .. cut)
        assert.equal("e1", dec:last_event_id(), "cut at " .. cut)
      end
    end)

    it("reports events as soon as their blank line arrives", function()
      local dec = core.sse_decoder()
      local first = MCP_STREAM:find("event:", 1, true)
      assert.same({}, dec:feed(MCP_STREAM:sub(1, first - 1)))
      assert.equal("abc", dec:last_event_id()) -- the priming id counts at once
      assert.same({}, dec:feed(MCP_STREAM:sub(first, -2)))
      assert.same(MCP_EVENTS, dec:feed("\n"))
      assert.same({}, dec:finish())
    end)
  end)

  describe("fields", function()
    it("joins multi-line data with LF", function()
      assert.same({ { data = "one\ntwo\nthree" } }, (whole("data: one\ndata: two\ndata: three\n\n")))
    end)

    it("removes one leading space from a value and keeps a second", function()
      assert.same({ { data = " x" } }, (whole("data:  x\n\n")))
      assert.same({ { data = "x" } }, (whole("data:x\n\n")))
      assert.same({ { data = "x ", event = " e" } }, (whole("event:  e\ndata: x \n\n")))
    end)

    it("splits at the first colon only", function()
      assert.same({ { data = "a: b:c" } }, (whole("data: a: b:c\n\n")))
    end)

    it("ignores comment lines", function()
      local events = whole(": keep-alive\ndata: a\n:data: no\n: \ndata: b\n\n:\n\n")
      assert.same({ { data = "a\nb" } }, events)
    end)

    it("treats a line without a colon as a field with an empty value", function()
      assert.same({ { data = "\n" } }, (whole("data\ndata\n\n")))
      assert.same({ { data = "a\n" } }, (whole("data: a\ndata\n\n")))
      assert.same({ { data = "x" } }, (whole("event\ndata: x\n\n")))
    end)

    it("ignores unknown fields and field names that differ in case", function()
      assert.same({ { data = "x" } }, (whole("foo: bar\nDATA: no\nData: no\ndata: x\n\n")))
    end)

    it("reports the event type, nil by default and when empty", function()
      local events = whole("event: ping\ndata: 1\n\ndata: 2\n\nevent:\ndata: 3\n\n")
      assert.same({ { event = "ping", data = "1" }, { data = "2" }, { data = "3" } }, events)
      assert.is_nil(events[2].event)
    end)

    it("resets the event type after a dispatch without data", function()
      assert.same({ { data = "x" } }, (whole("event: e\n\ndata: x\n\n")))
    end)

    it("keeps empty data lines inside data, but does not dispatch an event whose data is empty", function()
      assert.same({ { data = "\n" } }, (whole("data:\ndata:\n\n")))
      assert.same({ { data = "\nx" } }, (whole("data:\ndata: x\n\n")))
      assert.same({}, (whole("data:\n\n")))
      assert.same({}, (whole("data\n\n")))
      assert.same({}, (whole("event: e\ndata:\n\n")))
    end)
  end)

  describe("byte order mark", function()
    local BOM = "\239\187\191"

    it("drops a BOM at the very start, however the chunks split it", function()
      assert.same({ { data = "x" } }, (whole(BOM .. "data: x\n\n")))
      assert.same({ { data = "x" } }, (bytewise(BOM .. "data: x\n\n")))
      assert.same({ { data = "x" } }, (decode({ "\239", "\187\191data", ": x\n\n" })))
    end)

    it("drops only one BOM; one after it makes the first line an unknown field", function()
      assert.same({}, (whole(BOM .. BOM .. "data: x\n\n")))
    end)

    it("keeps BOM bytes later in the stream", function()
      assert.same({ { data = BOM .. "x" } }, (whole("data: " .. BOM .. "x\n\n")))
      assert.same({ { data = "y" } }, (whole("\n" .. BOM .. "data: x\n\ndata: y\n\n")))
    end)

    it("passes on a partial BOM at the start as ordinary bytes", function()
      assert.same({}, (whole("\239\187data: x\n\n"))) -- the field name is not "data"
      local events = whole("\239\187")
      assert.same({}, events)
      local dec = core.sse_decoder()
      assert.same({}, dec:feed("\239"))
      assert.same({}, dec:feed("\187"))
      assert.same({}, dec:finish())
    end)
  end)

  describe("retry", function()
    it("takes a digits-only value in milliseconds", function()
      local _, dec = whole("retry: 1500\n\n")
      assert.equal(1500, dec:retry())
      assert.is_true(math.type(dec:retry()) == "integer")
    end)

    it("ignores values that are not only ASCII digits, keeping the last valid one", function()
      local _, dec = whole("retry: 250\nretry: 1.5\nretry: -1\nretry: 10s\nretry:  7\nretry:\n\n")
      assert.equal(250, dec:retry())
    end)

    it("is nil when never set", function()
      local _, dec = whole("retry: x\ndata: a\n\n")
      assert.is_nil(dec:retry())
    end)

    it("applies at once, without a blank line", function()
      local dec = core.sse_decoder()
      dec:feed("retry: 0\n")
      assert.equal(0, dec:retry())
    end)
  end)

  describe("last event id", function()
    it("is nil when never set", function()
      local _, dec = whole("data: a\n\n")
      assert.is_nil(dec:last_event_id())
    end)

    it("persists across events until changed", function()
      local events, dec = whole("id: 1\ndata: a\n\ndata: b\n\nid: 2\ndata: c\n\n")
      assert.same({ { id = "1", data = "a" }, { id = "1", data = "b" }, { id = "2", data = "c" } }, events)
      assert.equal("2", dec:last_event_id())
    end)

    it("ignores an id containing NUL", function()
      local events, dec = whole("id: good\ndata: a\n\nid: b\0ad\ndata: b\n\n")
      assert.same({ { id = "good", data = "a" }, { id = "good", data = "b" } }, events)
      assert.equal("good", dec:last_event_id())
    end)

    it("counts the id of an event without data, which is not dispatched", function()
      local events, dec = whole("id: prime\n\n")
      assert.same({}, events)
      assert.equal("prime", dec:last_event_id())
      events, dec = whole("id: 7\ndata:\n\ndata: x\n\n")
      assert.same({ { id = "7", data = "x" } }, events)
      assert.equal("7", dec:last_event_id())
    end)

    it("takes effect at the blank line, not at the id field", function()
      local dec = core.sse_decoder()
      dec:feed("id: 1\n\n")
      dec:feed("id: 2\ndata: x\n")
      assert.equal("1", dec:last_event_id())
      assert.same({ { id = "2", data = "x" } }, dec:feed("\n"))
      assert.equal("2", dec:last_event_id())
    end)

    it("can be set back to empty", function()
      local events, dec = whole("id: 1\ndata: a\n\nid\ndata: b\n\n")
      assert.same({ { id = "1", data = "a" }, { id = "", data = "b" } }, events)
      assert.equal("", dec:last_event_id())
    end)
  end)

  describe("finish", function()
    it("dispatches a pending event that lacks its blank line", function()
      local dec = core.sse_decoder()
      assert.same({}, dec:feed("id: 9\nevent: e\ndata: a\ndata: b\n"))
      assert.same({ { id = "9", event = "e", data = "a\nb" } }, dec:finish())
      assert.equal("9", dec:last_event_id())
    end)

    it("processes an unterminated last line first", function()
      local dec = core.sse_decoder()
      assert.same({}, dec:feed("data: a\ndata: b"))
      assert.same({ { data = "a\nb" } }, dec:finish())
    end)

    it("returns nothing when the stream ended cleanly", function()
      local dec = core.sse_decoder()
      assert.equal(1, #dec:feed("data: a\n\n"))
      assert.same({}, dec:finish())
    end)

    it("leaves the decoder finished: feed and finish raise, the readings stay", function()
      local dec = core.sse_decoder()
      dec:feed("retry: 5\nid: z\n\n")
      dec:finish()
      assert.has_error(function() dec:feed("data: x\n\n") end)
      assert.has_error(function() dec:finish() end)
      assert.equal("z", dec:last_event_id())
      assert.equal(5, dec:retry())
    end)
  end)

  describe("chunking", function()
    it("delivers a multibyte UTF-8 character split across chunks intact", function()
      local s = "data: h\195\169llo \226\130\172 \240\159\152\128\n\n"
      local expected = { { data = "h\195\169llo \226\130\172 \240\159\152\128" } }
      for cut = 0, #s do
        assert.same(expected, (decode({ s:sub(1, cut), s:sub(cut + 1) })), "cut at " .. cut)
      end
      assert.same(expected, (bytewise(s)))
    end)

    it("returns an empty array for a chunk that completes nothing", function()
      local dec = core.sse_decoder()
      assert.same({}, dec:feed(""))
      assert.same({}, dec:feed("data: partial"))
    end)

    it("returns several events from one chunk in order", function()
      local dec = core.sse_decoder()
      assert.same({ { data = "1" }, { data = "2" }, { data = "3" } },
        dec:feed("data: 1\n\ndata: 2\n\ndata: 3\n\ndata: 4"))
    end)

    it("keeps NUL bytes in data", function()
      assert.same({ { data = "a\0b" } }, (whole("data: a\0b\n\n")))
    end)

    it("decodes a 2 MiB data line fed byte by byte", function()
      local size = 2 * 1024 * 1024
      local dec = core.sse_decoder()
      local prefix = "data: "
      for i = 1, #prefix do dec:feed(prefix:sub(i, i)) end
      for _ = 1, size do dec:feed("x") end
      assert.same({}, dec:feed("\n"))
      local events = dec:feed("\n")
      assert.equal(1, #events)
      assert.equal(size, #events[1].data)
      assert.equal(string.rep("x", size), events[1].data)
      dec:close()
    end)
  end)

  describe("lifetime", function()
    it("raises on every use after close, and close is idempotent", function()
      local dec = core.sse_decoder()
      dec:feed("data: a\n")
      dec:close()
      dec:close()
      assert.has_error(function() dec:feed("\n") end)
      assert.has_error(function() dec:finish() end)
      assert.has_error(function() dec:last_event_id() end)
      assert.has_error(function() dec:retry() end)
      assert.matches("closed", tostring(dec))
    end)

    it("closes as a to-be-closed variable", function()
      local outer
      do
        local dec <close> = core.sse_decoder()
        outer = dec
        dec:feed("data: a")
      end
      assert.has_error(function() outer:feed("x") end)
    end)

    it("raises on misuse", function()
      local dec = core.sse_decoder()
      assert.has_error(function() dec:feed() end)
      assert.has_error(function() dec:feed(12) end)
      assert.has_error(function() dec:feed({}) end)
      assert.has_error(function() dec.feed({}, "x") end)
    end)

    it("gives independent decoders", function()
      local a, b = core.sse_decoder(), core.sse_decoder()
      a:feed("id: a\ndata: 1")
      b:feed("id: b\n\n")
      assert.same({ { id = "a", data = "1" } }, a:feed("\n\n"))
      assert.equal("b", b:last_event_id())
    end)

    it("is collected without being closed", function()
      -- each decoder holds a partial line and is dropped unclosed; a watcher marked for
      -- finalization before it (so finalized after it) reads it once the collector has run its
      -- __gc, which must have closed it
      local alive = setmetatable({}, { __mode = "k" })
      local seen = {}
      for _ = 1, 100 do
        local watcher = setmetatable({}, { __gc = function(w) seen[#seen + 1] = tostring(w.decoder) end })
        local dec = core.sse_decoder()
        dec:feed("data: " .. string.rep("y", 1000))
        assert.is_not.matches("closed", tostring(dec))
        watcher.decoder, alive[dec] = dec, true
      end
      collectgarbage()
      collectgarbage()
      collectgarbage()
      assert.equal(100, #seen)
      for _, text in ipairs(seen) do assert.equal("sse_decoder (closed)", text) end
      assert.is_nil(next(alive))  -- and then gone
    end)
  end)
end)
