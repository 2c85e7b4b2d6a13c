--- Checker of fuzz/decode_fuzz.c: the single-pass decoder (csrc/core/decode.c)
--- against jansson (csrc/core/json_reference.c), the reference.
--
-- Both must accept or both refuse, plain and key-ordered; what they accept
-- must be the same value: the same Lua types, integers as integers with the
-- same value, reals bit for bit (-0.0 included), the same strings, arrays
-- marked as arrays and objects not, the same keys, and the same recorded key
-- order (or none) on every object. The fast rpc_classify (core.rpc_classify)
-- must answer exactly what the jansson one (core.json_reference.classify)
-- answers, for the id the body carries and for another, with and without a
-- cap on the objects and arrays a body may open; a refusal in its own words.
local core = require "mcpclient.core"

local check = require "check"

local json = core.json
local fast_decode, slow_decode = _G.fuzz_fast_decode, _G.fuzz_slow_decode
local fast_classify = core.rpc_classify
local slow_classify = core.json_reference.classify
check(type(slow_classify) == "function" and slow_classify ~= fast_classify, "no jansson classifier behind rpc_classify")

-- values compared with their key-order records
local same = require("same")(true)

local function differential(body, ordered)
  local fok, fv = fast_decode(body, ordered)
  local sok, sv = slow_decode(body, ordered)
  check(fok == sok, "verdicts differ (ordered %s): fast %s, jansson %s (%s)", tostring(ordered), tostring(fok),
    tostring(sok), tostring(not sok and sv or ""))
  if fok then same(fv, sv, "$") end
  -- the Lua entry point gives the same answer, a refusal worded by the decoder
  local lv, lm = json.decode(body, ordered)
  if sok then
    same(lv, sv, "json.decode")
  else
    check(lv == nil and type(lm) == "string" and lm:find("^invalid JSON: ") ~= nil, "json.decode's refusal: %s", lm)
  end
  return fok and fv or nil
end

-- The schema measure's model: what it must call clean.
local REFUSED = {}
for _, k in ipairs { "$ref", "$dynamicRef", "$defs", "definitions", "if", "then", "else", "patternProperties",
  "propertyNames", "dependentSchemas", "dependentRequired", "unevaluatedProperties" } do REFUSED[k] = true end

local function clean(v, level)
  local t = type(v)
  if t == "number" then return math.type(v) == "integer" or (v == v and v ~= math.huge and v ~= -math.huge) end
  if t == "string" then return utf8.len(v) ~= nil end
  if t ~= "table" then return t == "boolean" or v == json.null end
  if level > 12 then return false end
  local marked, n = json.is_array(v), 0
  for k, x in pairs(v) do
    n = n + 1
    if marked then
      if math.type(k) ~= "integer" or k < 1 or k > #v then return false end
    elseif type(k) ~= "string" or REFUSED[k] or utf8.len(k) == nil then
      return false
    end
    if not clean(x, level + 1) then return false end
  end
  return not marked or n == #v
end

-- Every table in v (at most 64): the measure agrees with the model and the ASCII encoding.
local function measured(v)
  local seen = 0
  local function visit(t)
    if seen >= 64 then return end
    seen = seen + 1
    local size = _G.fuzz_measure(t)
    local want = clean(t, 1)
    check((size > 0) == want, "measure says %s, the model %s", size > 0 and "clean" or "not clean",
      want and "clean" or "not clean")
    if want then
      local text = _G.fuzz_ascii_encode(t)
      check(text and #text == size, "measured %d bytes, the ASCII encoding has %s", size, text and #text or "none")
    end
    for _, x in pairs(t) do if type(x) == "table" then visit(x) end end
  end
  if type(v) == "table" then visit(v) end
end

local function classify(body, id, ordered, max_containers)
  local f = table.pack(fast_classify(body, id, ordered, max_containers))
  local s = table.pack(slow_classify(body, id, ordered, max_containers))
  check(f.n == s.n, "rpc_classify: %d values against %d", f.n, s.n)
  if f[1] == "malformed" and s[1] == "malformed" and tostring(s[2]):find("^invalid JSON: ") then
    check(tostring(f[2]):find("^invalid JSON: ") ~= nil, "rpc_classify's refusal: %s", tostring(f[2]))
    return
  end
  for i = 1, f.n do same(f[i], s[i], "rpc_classify[" .. i .. "]") end
end

return function(body, oom)
  if oom then
    -- one failed allocation: surviving is the property (memory errors are accepted by the harness)
    fast_decode(body, true)
    core.rpc_classify(body, 1, true)
    return
  end
  local value = differential(body, false)
  measured(differential(body, true))
  local id = type(value) == "table" and math.type(value.id) == "integer" and value.id or 1
  classify(body, id, false)
  classify(body, id, true)
  classify(body, id == 1 and 2 or 1, true)
  -- the container cap: one the body may exceed, and the transport's
  classify(body, id, true, 1 + #body % 8)
  classify(body, id, false, 65536)
end
