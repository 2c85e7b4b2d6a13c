--- Checker of fuzz/sse_fuzz.c: the event-stream decoder (csrc/core/sse.c).
--
-- Input: 4 bytes that seed the chunking, then the stream. The same stream is
-- decoded three ways that must agree exactly (events, last event id, retry):
-- one feed, a feed per chunk of pseudo-random sizes (empty feeds included),
-- and a plain Lua transcription of the WHATWG "interpreting an event stream"
-- rules with the decoder's two documented choices (lenient dispatch at end of
-- stream, no event for empty data; the last event id is still updated).
local core = require "mcpclient.core"

local function decode(stream, chunks)
  local dec = core.sse_decoder()
  local events = {}
  local function take(list)
    for _, e in ipairs(list) do events[#events + 1] = e end
  end
  if chunks then
    for _, c in ipairs(chunks) do take(dec:feed(c)) end
  else
    take(dec:feed(stream))
  end
  take(dec:finish())
  local result = { events = events, last_id = dec:last_event_id(), retry = dec:retry() }
  -- finished: no more input, but the id and retry stay readable until close
  assert(not pcall(dec.feed, dec, "x"), "feed after finish did not raise")
  assert(dec:last_event_id() == result.last_id)
  dec:close()
  dec:close()
  assert(not pcall(dec.last_event_id, dec), "use after close did not raise")
  return result
end

-- The reference: the whole stream at once, line by line.
local function reference(stream)
  if stream:sub(1, 3) == "\239\187\191" then stream = stream:sub(4) end
  local events, data, etype, id_buf, id_seen, last_id, retry = {}, {}, "", "", false, nil, nil
  local id_dirty = false
  local function dispatch()
    if id_dirty then
      last_id, id_dirty = id_buf, false
    end
    local d = table.concat(data, "\n")
    if #data > 0 and d ~= "" then
      events[#events + 1] = { data = d, event = etype ~= "" and etype or nil, id = id_seen and last_id or nil }
    end
    data, etype = {}, ""
  end
  local function line(l)
    if l == "" then return dispatch() end
    if l:sub(1, 1) == ":" then return end
    local field, value = l:match("^([^:]*):(.*)$")
    if not field then field, value = l, "" end
    if value:sub(1, 1) == " " then value = value:sub(2) end
    if field == "data" then
      data[#data + 1] = value
    elseif field == "event" then
      etype = value
    elseif field == "id" then
      if not value:find("\0", 1, true) then id_buf, id_seen, id_dirty = value, true, true end
    elseif field == "retry" then
      if value:match("^%d+$") then
        local ms = 0
        for digit in value:gmatch("%d") do
          if ms > (math.maxinteger - tonumber(digit)) // 10 then
            ms = math.maxinteger
            break
          end
          ms = ms * 10 + tonumber(digit)
        end
        retry = ms
      end
    end
  end
  local at = 1
  while true do
    local stop = stream:find("[\r\n]", at)
    if not stop then break end
    line(stream:sub(at, stop - 1))
    at = stop + 1
    if stream:sub(stop, stop + 1) == "\r\n" then at = at + 1 end
  end
  if at <= #stream then line(stream:sub(at)) end
  dispatch()
  return { events = events, last_id = id_seen and last_id or nil, retry = retry }
end

local function show(v)
  if v == nil then return "nil" end
  return string.format("%q", v)
end

local function same(a, b, what)
  if #a.events ~= #b.events then
    error(string.format("%s: %d events versus %d", what, #a.events, #b.events))
  end
  for i, x in ipairs(a.events) do
    local y = b.events[i]
    for _, f in ipairs { "data", "event", "id" } do
      if x[f] ~= y[f] then
        error(string.format("%s: event %d field %s: %s versus %s", what, i, f, show(x[f]), show(y[f])))
      end
    end
  end
  if a.last_id ~= b.last_id then
    error(string.format("%s: last event id %s versus %s", what, show(a.last_id), show(b.last_id)))
  end
  if a.retry ~= b.retry then
    error(string.format("%s: retry %s versus %s", what, tostring(a.retry), tostring(b.retry)))
  end
end

-- Chunk sizes from the seed: xorshift32, sizes 0..max with max itself seeded.
local function chunking(seed, stream)
  local x = seed ~= 0 and seed or 0x9E3779B9
  local function rand()
    x = x ~ ((x << 13) & 0xFFFFFFFF)
    x = x ~ (x >> 17)
    x = x ~ ((x << 5) & 0xFFFFFFFF)
    return x
  end
  local caps = { 1, 2, 3, 4, 7, 16, 64, 512 }
  local cap = caps[(seed & 7) + 1]
  local chunks, at = {}, 1
  while at <= #stream do
    local n = rand() % (cap + 1)  -- 0 sometimes: an empty feed must change nothing
    chunks[#chunks + 1] = stream:sub(at, at + n - 1)
    at = at + n
  end
  return chunks
end

return function(input, oom)
  if #input < 4 then return end
  local seed = string.unpack("<I4", input)
  local stream = input:sub(5)
  local whole = decode(stream)
  if oom then
    decode(stream, chunking(seed, stream))
    return
  end
  for _, e in ipairs(whole.events) do
    assert(e.data ~= "" and not e.data:find("\r", 1, true), "event data holds a CR or is empty")
    assert(not (e.event or ""):find("[\r\n]"), "event type holds a line break")
    assert(not (e.id or ""):find("[\r\n%z]"), "event id holds a line break or NUL")
  end
  same(whole, decode(stream, chunking(seed, stream)), "one feed versus chunks")
  same(whole, reference(stream), "decoder versus the WHATWG reference")
end
