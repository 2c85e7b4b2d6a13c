--- Checker of fuzz/stdio_fuzz.c: the stdio channel's line reader (csrc/core/process.c),
--- a child's stdout read into lines under the read cap.
--
-- Input: byte 1 seeds the chunking; the rest is the stream, where 0xFF is an
-- escape: 0xFF 0x00 is the byte 0xFF itself, and 0xFF k c (k > 0) is the byte
-- c repeated k * 16 KiB times (k = 128: exactly the 2 MiB read cap), so a
-- short input can hold lines at, under and over the cap. The stream is cut
-- at 3 MiB.
--
-- The stream is written into a pipe whose read end a handle without a child
-- reads (fuzz_reader: the engine owns it as it owns a child's stdout), in
-- pseudo-random chunks (1 byte to 1 MiB, or up to just before, just after or
-- one byte past the next CR or LF; after 512, 4 KiB to 1 MiB; a full pipe
-- takes less), with the
-- engine's turns and the reads of lines interleaved pseudo-randomly, then the
-- write end is closed. The lines read, and how the reading ended ("closed",
-- or "malformed" at a line over the cap), must equal the model below, whatever
-- the chunking: lines end at LF; one CR before the LF is not part of the line;
-- empty lines are passed over; a line of more than 2 MiB is refused and
-- nothing after it is read; at end of file, the bytes after the last LF are
-- one more line, as they are (refused over the cap). NUL bytes are bytes.
local core = require "mcpclient.core"
local check = require "check"

local reader_of = _G.fuzz_reader

local CAP = core.process_line_cap
local UNIT = 16 * 1024
local MAX_STREAM = 3 * 1024 * 1024
local MALFORMED = "a line longer than the read cap of " .. CAP .. " bytes"

-- The stream the input describes.
local function expand(input)
  local parts, size, at = {}, 0, 2
  while at <= #input and size < MAX_STREAM do
    local s = input:find("\255", at, true)
    local plain = input:sub(at, (s or #input + 1) - 1)
    parts[#parts + 1], size = plain, size + #plain
    if not s then break end
    local k, c = input:byte(s + 1, s + 2)
    if k == nil then break end
    if k == 0 then
      parts[#parts + 1], size, at = "\255", size + 1, s + 2
    elseif c == nil then
      break
    else
      local run = string.rep(string.char(c), math.min(k * UNIT, MAX_STREAM))
      parts[#parts + 1], size, at = run, size + #run, s + 3
    end
  end
  return table.concat(parts):sub(1, MAX_STREAM)
end

-- The splitting rule: the lines, and how the reading ends.
local function model(stream)
  local lines, at = {}, 1
  while true do
    at = stream:match("^\n*()", at) -- empty lines, passed over (a run of them at once)
    local nl = stream:find("\n", at, true)
    if not nl then
      local rest = stream:sub(at)
      if #rest > CAP then return lines, "malformed" end
      if #rest > 0 then lines[#lines + 1] = rest end
      return lines, "closed"
    end
    local line = stream:sub(at, nl - 1)
    if line:sub(-1) == "\r" then line = line:sub(1, -2) end
    if #line > CAP then return lines, "malformed" end
    if #line > 0 then lines[#lines + 1] = line end
    at = nl + 1
  end
end

-- A small deterministic generator (xorshift32) seeded by the input.
local function generator(seed)
  local x = (seed * 2654435761 + 0x9E3779B9) & 0xFFFFFFFF
  if x == 0 then x = 1 end
  return function(n)
    x = x ~ ((x << 13) & 0xFFFFFFFF)
    x = x ~ (x >> 17)
    x = x ~ ((x << 5) & 0xFFFFFFFF)
    return x % n
  end
end

local SIZES = { 1, 2, 3, 7, 16, 100, 4095, 4096, 65536, 65537, 1024 * 1024 }

-- The sizes of the chunks of `stream`: each a size from SIZES, a small one,
-- or a cut next to the next line end (so a CR and its LF, or a line and its
-- end, arrive apart) without writing a long line a few bytes at a time.
-- After FINE_CHUNKS chunks only large ones: a stream of a million line ends
-- is not written a byte at a time.
local FINE_CHUNKS = 512
local PIPE = 65536 -- what a pipe holds (Linux's default)
local LARGE = { 4096, 65536, 1024 * 1024 }
local function chunker(stream, random)
  local line_end = 0 -- the next CR or LF at or after the last position asked about, or false
  local count = 0
  return function(at)
    count = count + 1
    if count > FINE_CHUNKS then return LARGE[random(#LARGE) + 1] end
    local pick = random(4)
    if pick == 0 then return SIZES[random(#SIZES) + 1] end
    if pick == 1 then return random(64) + 1 end
    if line_end and line_end < at then line_end = stream:find("[\r\n]", at) or false end
    if not line_end then return #stream - at + 1 end
    return math.max(1, line_end - at + random(3))
  end
end

-- Where two lists of lines first differ, for the report.
local function first_difference(got, want)
  for i = 1, math.max(#got, #want) do
    if got[i] ~= want[i] then
      local function show(s) return s and string.format("%d bytes %q", #s, s:sub(1, 40)) or "none" end
      return string.format("line %d: got %s, want %s", i, show(got[i]), show(want[i]))
    end
  end
end

return function(input)
  local seed = input:byte(1) or 0
  local stream = expand(input)
  local want, want_end = model(stream)
  local random = generator(seed)
  local r, w = core.pipe()
  local reader <close> = reader_of(r)
  local open = true
  local function close_writer()
    if open then core.fd_close(w) end
    open = false
  end
  local _ <close> = setmetatable({}, { __close = close_writer })
  local got, ended, detail = {}, nil, nil

  -- every line there is now, as the channel reads them (no wait: the engine's turns read stdout)
  local function take()
    while not ended do
      local line, kind, why = reader:read_line(0)
      if line then
        check(#line > 0 and #line <= CAP, "a line of %d bytes", #line)
        got[#got + 1] = line
      elseif kind == "timeout" then
        return
      else
        ended, detail = kind, why
      end
    end
  end

  local at, turns, chunk_size = 1, 0, chunker(stream, random)
  while at <= #stream and not ended do
    -- a pipe takes at most PIPE bytes at once: no longer piece is copied out of the stream
    local size = math.min(chunk_size(at), PIPE)
    local n, why = core.fd_write(w, stream:sub(at, at + size - 1))
    check(n or why == "again", "the write failed: %s", tostring(why))
    at = at + (n or 0)
    -- a full pipe is emptied only by a turn; otherwise turn or not, at random
    if not n or random(4) ~= 0 then core.engine_step(0) end
    if random(8) ~= 0 then take() end
    turns = turns + 1
    check(turns < 1000000, "the reader stopped reading")
  end
  close_writer()
  while not ended do
    core.engine_step(0)
    take()
    turns = turns + 1
    check(turns < 1000000, "the reader never saw the end of the stream")
  end

  check(#got == #want, "%d lines read, the model has %d (%s)", #got, #want, first_difference(got, want) or "")
  local diff = first_difference(got, want)
  check(diff == nil, "the lines differ from the model's: %s", diff)
  check(ended == want_end, "the reading ended %s (%s), the model says %s", ended, tostring(detail), want_end)
  if ended == "malformed" then
    check(detail == MALFORMED, "the refusal says %q", tostring(detail))
  else
    check(detail == "was never started", "the end says %q", tostring(detail))
  end
  -- nothing more once the reading ended
  local line, kind = reader:read_line(0)
  check(line == nil and kind == "closed", "a read after the end gave %s, %s", tostring(line), tostring(kind))
end
