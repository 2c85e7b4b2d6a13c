--- Checker of fuzz/text_fuzz.c: clip, label, flatten, bound, inert, repair_utf8 (csrc/core/text.c).
--
-- The raw input is remote text as it is (any bytes). When it decodes as JSON
-- it is also a content array (or a result holding one): flatten must join
-- exactly the non-empty text blocks and count every other block under one of
-- the five labels, in the note's fixed form; the note, a newline and the
-- joined text (what a model reads) then go through bound like any result.
-- Every output must be valid UTF-8 (Lua's strict utf8.len: no overlongs,
-- surrogates or code points past U+10FFFF); bound stays within its limit,
-- marker included, and keeps a prefix of the repaired text; clip has no
-- control characters, no edge spaces and at most limit code points plus the
-- ellipsis, and is idempotent. "Control" is the text rule's: C0, DEL, C1 and
-- the bidi/invisible formatting characters (U+061C, U+200B-200F, U+202A-202E,
-- U+2060-2069, U+FEFF). inert (the body rule) equals its model below, written once more in Lua
-- over the repaired text's code points, and is bounded as bound is.
local core = require "mcpclient.core"

local json = core.json

local ELLIPSIS = "\226\128\166"
local LABELS = { audio = true, image = true, resource = true, resource_link = true }
local LABEL_ORDER = { "audio", "image", "other", "resource", "resource_link" }

local check = require "check"

local function valid(s) return utf8.len(s) ~= nil end

-- The text rule's controls: C0, DEL, C1 and the bidi/invisible formatting characters.
local function control(cp)
  return cp < 0x20 or cp == 0x7F or (cp >= 0x80 and cp <= 0x9F) or cp == 0x61C
    or (cp >= 0x200B and cp <= 0x200F) or (cp >= 0x202A and cp <= 0x202E)
    or (cp >= 0x2060 and cp <= 0x2069) or cp == 0xFEFF
end

local function marker(limit)
  return "\n" .. ELLIPSIS .. "[tool result truncated at " .. limit .. " bytes]"
end

local function check_bound(text, limit, note)
  local repaired = core.repair_utf8(text)
  local out, cut = core.bound(text, limit)
  check(type(out) == "string" and type(cut) == "boolean", "bound returned %s, %s", type(out), type(cut))
  check(#out <= limit, "bound(%d) returned %d bytes", limit, #out)
  check(valid(out), "bound(%d) returned invalid UTF-8", limit)
  if not cut then
    check(out == repaired, "bound(%d) without a cut is not the repaired text", limit)
    return
  end
  local m = marker(limit)
  check(#repaired > limit, "bound(%d) cut a text that fits (%d bytes repaired)", limit, #repaired)
  check(out:sub(-#m) == m, "bound(%d) cut without the marker", limit)
  local kept = out:sub(1, #out - #m)
  check(repaired:sub(1, #kept) == kept, "bound(%d) kept bytes that are not a prefix of the repaired text", limit)
  check(#kept >= limit - #m - 3, "bound(%d) kept %d bytes: more cut than a character boundary needs", limit, #kept)
  if note and #note <= limit - #m then
    check(out:sub(1, #note) == note, "bound(%d) lost the leading note", limit)
  end
end

local STRING_OPENERS = { [0x5D] = true, [0x50] = true, [0x58] = true, [0x5E] = true, [0x5F] = true }
local C1_STRING_OPENERS = { [0x9D] = true, [0x90] = true, [0x98] = true, [0x9E] = true, [0x9F] = true }

-- The body rule: tabs and line feeds kept; CR LF, a lone CR, U+2028 and U+2029 one line feed;
-- escape sequences (CSI; OSC/DCS/SOS/PM/APC to BEL, ST, another ESC or the line's end; any other
-- ESC with intermediates and a final byte; the C1 forms) and every other control character out.
local function model_inert(text)
  local cps = {}
  for _, c in utf8.codes(core.repair_utf8(text)) do cps[#cps + 1] = c end
  local n, out, i = #cps, {}, 1
  local function between(k, lo, hi) return k <= n and cps[k] >= lo and cps[k] <= hi end
  local function csi(k)
    while between(k, 0x30, 0x3F) do k = k + 1 end
    while between(k, 0x20, 0x2F) do k = k + 1 end
    if between(k, 0x40, 0x7E) then k = k + 1 end
    return k
  end
  local function control_string(k)
    while k <= n do
      local c = cps[k]
      if c == 7 or c == 0x9C then return k + 1 end
      if c == 10 or c == 13 then return k end
      if c == 27 then return cps[k + 1] == 0x5C and k + 2 or k end
      k = k + 1
    end
    return k
  end
  while i <= n do
    local c = cps[i]
    if c == 13 then
      out[#out + 1] = "\n"
      i = i + (cps[i + 1] == 10 and 2 or 1)
    elseif c == 0x2028 or c == 0x2029 then
      out[#out + 1] = "\n"
      i = i + 1
    elseif c == 27 then
      local d = cps[i + 1]
      if d == 0x5B then
        i = csi(i + 2)
      elseif d and STRING_OPENERS[d] then
        i = control_string(i + 2)
      else
        i = i + 1
        while between(i, 0x20, 0x2F) do i = i + 1 end
        if between(i, 0x30, 0x7E) then i = i + 1 end
      end
    elseif c == 0x9B then
      i = csi(i + 1)
    elseif C1_STRING_OPENERS[c] then
      i = control_string(i + 1)
    elseif c == 9 or c == 10 or not control(c) then
      out[#out + 1] = utf8.char(c)
      i = i + 1
    else
      i = i + 1
    end
  end
  return table.concat(out)
end

local function check_inert(text, want, limit)
  local out, cut = core.inert(text, limit)
  check(type(out) == "string" and type(cut) == "boolean", "inert returned %s, %s", type(out), type(cut))
  check(#out <= limit, "inert(%d) returned %d bytes", limit, #out)
  check(valid(out), "inert(%d) returned invalid UTF-8", limit)
  if #want <= limit then
    check(not cut and out == want, "inert(%d):\n%q\nwanted\n%q", limit, out, want)
  else
    local m = marker(limit)
    check(cut and out:sub(-#m) == m, "inert(%d) cut without the marker", limit)
    local kept = out:sub(1, #out - #m)
    check(want:sub(1, #kept) == kept, "inert(%d) kept what is not a prefix of the rule's text", limit)
    check(#kept >= limit - #m - 3, "inert(%d) kept %d bytes: more cut than a character boundary needs", limit, #kept)
  end
  local again, again_cut = core.inert(out, limit)
  check(again == out and not again_cut, "inert(%d) is not idempotent", limit)
end

local function check_clip(text, limit)
  local out = limit and core.clip(text, limit) or core.clip(text)
  limit = limit or 200
  check(valid(out), "clip(%d) returned invalid UTF-8", limit)
  local n, ellipsis = 0, false
  for _, cp in utf8.codes(out) do
    check(not control(cp), "clip(%d) kept control U+%04X", limit, cp)
    n = n + 1
  end
  if out:sub(-3) == ELLIPSIS and n == limit + 1 then ellipsis = true end
  check(n <= limit or ellipsis, "clip(%d) returned %d code points", limit, n)
  check(out:sub(1, 1) ~= " ", "clip(%d) starts with a space", limit)
  check(ellipsis or out:sub(-1) ~= " ", "clip(%d) ends with a space", limit)
  local again = core.clip(out, limit)
  check(again == out, "clip(%d) is not idempotent:\n%q\n%q", limit, out, again)
  return out
end

local function check_text(text, note)
  local repaired = core.repair_utf8(text)
  check(valid(repaired), "repair_utf8 returned invalid UTF-8")
  if valid(text) then check(repaired == text, "repair_utf8 changed valid text") end
  check(core.repair_utf8(repaired) == repaired, "repair_utf8 is not idempotent")
  local m = #marker(1) -- the shortest marker, for limit 1..9 it has the fewest digits
  for _, limit in ipairs { m + 2, 64, 100 + #text % 157, 50000 } do
    if limit >= #marker(limit) then check_bound(text, limit, note) end
  end
  check_bound(text, #marker(100), note) -- a limit of exactly the marker: nothing but the marker fits
  check(core.bound(text) == core.bound(text, 50000), "bound's default limit is not 50000")
  local body = model_inert(text)
  check_inert(text, body, 50000)
  check_inert(text, body, #marker(64) + 7)
  check_inert(text, body, 64 + #text % 97)
  check_clip(text)
  check_clip(text, 0)
  check_clip(text, 1)
  check_clip(text, 7)
  check(core.label(text) == core.clip(text, 100), "label differs from clip at 100")
end

-- The flattening rule once more, in Lua: what flatten must return (text blocks
-- joined by "\n", every other block counted under its label in the note).
local function expected_flatten(content)
  local list = type(content) == "table" and (json.is_array(content) or (#content > 0 and (function()
    local count = 0
    for k in pairs(content) do
      if math.type(k) ~= "integer" or k < 1 or k > #content then return false end
      count = count + 1
    end
    return count == #content
  end)()))
  if not list then return "", nil end
  local texts, dropped, seen = {}, 0, {}
  for i = 1, #content do
    local block = content[i]
    local btype = type(block) == "table" and rawget(block, "type") or nil
    if btype == "text" then
      local t = rawget(block, "text")
      if type(t) == "string" and t ~= "" then texts[#texts + 1] = t end
    else
      dropped = dropped + 1
      seen[(type(btype) == "string" and LABELS[btype]) and btype or "other"] = true
    end
  end
  if dropped == 0 then return table.concat(texts, "\n"), nil end
  local names = {}
  for _, label in ipairs(LABEL_ORDER) do if seen[label] then names[#names + 1] = label end end
  local note = string.format("[mcpclient reads text only and dropped %d non-text content %s (%s).]",
    dropped, dropped == 1 and "block" or "blocks", table.concat(names, ", "))
  return table.concat(texts, "\n"), note
end

return function(input)
  check_text(input)
  local value = json.decode(input)
  if type(value) ~= "table" then
    check(core.label(value) == (type(value) == "string" and core.clip(value, 100) or ""), "label of a non-table")
    return
  end
  check(core.label(value) == "", "label of a table is not empty")
  local content = value
  if not json.is_array(value) then
    content = type(value.result) == "table" and value.result.content or value.content
  end
  local text, note = core.flatten(content)
  local want_text, want_note = expected_flatten(content)
  check(text == want_text, "flatten text:\n%q\nwanted\n%q", text, want_text)
  check(note == want_note, "flatten note %s, wanted %s", tostring(note), tostring(want_note))
  check_text(text)
  if note then check_text(note .. "\n" .. text, note) end
end
