--- Checker of fuzz/validate_fuzz.c: the output validator (csrc/core/validate.c).
--
-- The input is a schema's JSON text and a value's, split at the first NUL
-- byte (without one, the text is both). validate_output must never raise
-- (a memory error in OOM mode aside: the harness accepts those), answer
-- `true` or `nil, path, reason[, unchecked]` (path from "$", unchecked one of
-- "depth", "steps", "schema"; a string or number is no schema), answer the
-- same twice and for the schema written and read again, agree with the Lua model below wherever the check
-- finished and the model did (it stops at $ref, a string's pattern and deep nesting), and accept
-- the value under { const = value } and under the exact schema inferred from
-- it (or stop at a bound, never refuse it).
local core = require "mcpclient.core"
local check = require "check"

local json = core.json
local null = json.null

local UNCHECKED = { depth = true, steps = true, schema = true }
local MODEL_DEPTH = 40

local function is_object(v) return type(v) == "table" and v ~= null and not json.is_array(v) end
local function is_schema(v) return type(v) == "boolean" or is_object(v) end
local function is_list(v) return type(v) == "table" and json.is_array(v) and #v > 0 end

-- The model's "cannot say": a $ref, or nesting past MODEL_DEPTH.
local Skip = setmetatable({}, { __tostring = function() return "skip" end })

local function kind(v)
  if v == nil or v == null then return "null" end
  local t = type(v)
  if t == "boolean" then return "boolean" end
  if t == "number" then return math.type(v) == "integer" and "integer" or "real" end
  if t == "string" then return "string" end
  if t == "table" then return json.is_array(v) and "array" or "object" end
  return "other"
end

local function whole(v)
  return math.type(v) == "integer" or (v - v == 0 and v == math.floor(v))
end

local function equal(a, b, level)
  if level > MODEL_DEPTH then error(Skip, 0) end
  local ka, kb = kind(a), kind(b)
  if (ka == "integer" or ka == "real") and (kb == "integer" or kb == "real") then return a == b end
  if ka ~= kb then return false end
  if ka == "array" then
    if #a ~= #b then return false end
    for i = 1, #a do
      if not equal(a[i], b[i], level + 1) then return false end
    end
    return true
  elseif ka == "object" then
    local na, nb = 0, 0
    for k, v in pairs(a) do
      na = na + 1
      if b[k] == nil or not equal(v, b[k], level + 1) then return false end
    end
    for _ in pairs(b) do nb = nb + 1 end
    return na == nb
  end
  return a == b
end

local TYPES = { null = { null = true }, boolean = { boolean = true }, integer = { integer = true },
  number = { integer = true, real = true }, string = { string = true }, array = { array = true },
  object = { object = true } }

local function type_ok(v, t)
  local names
  if type(t) == "string" then
    if not TYPES[t] then return true end
    names = { t }
  elseif is_list(t) then
    names = {}
    for i, name in ipairs(t) do
      if type(name) ~= "string" or not TYPES[name] then return true end
      names[i] = name
    end
  else
    return true
  end
  local k = kind(v)
  for _, name in ipairs(names) do
    if TYPES[name][k] then return true end
    if name == "integer" and k == "real" and whole(v) then return true end
  end
  return false
end

local function count(n)
  if type(n) ~= "number" then return nil end
  if math.type(n) == "integer" then return n >= 0 and n or nil end
  if n ~= n or n < 0 or n ~= math.floor(n) then return nil end
  return n
end

local valid

local function valid_number(v, s)
  local excl_min = s.exclusiveMinimum == true
  local excl_max = s.exclusiveMaximum == true
  if type(s.minimum) == "number" and not (excl_min and s.minimum < v or not excl_min and s.minimum <= v) then
    return false
  end
  if type(s.maximum) == "number" and not (excl_max and v < s.maximum or not excl_max and v <= s.maximum) then
    return false
  end
  if type(s.exclusiveMinimum) == "number" and s.exclusiveMinimum >= v then return false end
  if type(s.exclusiveMaximum) == "number" and v >= s.exclusiveMaximum then return false end
  return true
end

local function valid_string(v, s)
  local lo, hi = count(s.minLength), count(s.maxLength)
  if not lo and not hi then return true end
  local n = utf8.len(v)
  if not n then error(Skip, 0) end -- the C counts invalid bytes by maximal subparts: not modelled
  return not (lo and n < lo) and not (hi and n > hi)
end

local function valid_array(v, s, level)
  local n = #v
  local lo, hi = count(s.minItems), count(s.maxItems)
  if lo and n < lo or hi and n > hi then return false end
  local tuple, rest
  if is_list(s.prefixItems) then
    tuple = s.prefixItems
    if is_schema(s.items) then rest = s.items end
  elseif is_list(s.items) then
    tuple = s.items
    if is_schema(s.additionalItems) then rest = s.additionalItems end
  elseif is_schema(s.items) then
    rest = s.items
  end
  local prefix = tuple and #tuple or 0
  for i = 1, n do
    local sub
    if i <= prefix then sub = tuple[i] elseif rest ~= nil then sub = rest else break end
    if not valid(v[i], sub, level + 1) then return false end
  end
  return true
end

local function valid_object(v, s, level)
  local props = is_object(s.properties) and s.properties or nil
  local extra = s.additionalProperties
  if s.patternProperties ~= nil or not is_schema(extra) then extra = nil end
  if type(s.required) == "table" and json.is_array(s.required) then
    for _, name in ipairs(s.required) do
      if type(name) == "string" and v[name] == nil then return false end
    end
  end
  for k, item in pairs(v) do
    if type(k) == "string" then
      local sub = props and props[k]
      if sub == nil then sub = extra end
      if sub ~= nil and not valid(item, sub, level + 1) then return false end
    end
  end
  return true
end

-- The model: true when v is valid under s, false when not; raises Skip when it cannot say.
function valid(v, s, level)
  if type(s) == "boolean" then return s end
  if not is_object(s) then return true end
  if level > MODEL_DEPTH or s["$ref"] ~= nil then error(Skip, 0) end
  if s.type ~= nil and not type_ok(v, s.type) then return false end
  if s.const ~= nil and not equal(v, s.const, level + 1) then return false end
  if type(s.enum) == "table" and json.is_array(s.enum) then
    local found = false
    for _, option in ipairs(s.enum) do
      if equal(v, option, level + 1) then
        found = true
        break
      end
    end
    if not found then return false end
  end
  local k = kind(v)
  if (k == "integer" or k == "real") and not valid_number(v, s) then return false end
  if k == "string" and type(s.pattern) == "string" then error(Skip, 0) end -- regular expressions: not modelled
  if k == "string" and not valid_string(v, s) then return false end
  if k == "array" and not valid_array(v, s, level) then return false end
  if k == "object" and not valid_object(v, s, level) then return false end
  if is_list(s.anyOf) then
    local any = false
    for _, sub in ipairs(s.anyOf) do
      if valid(v, sub, level + 1) then
        any = true
        break
      end
    end
    if not any then return false end
  end
  if is_list(s.oneOf) then
    local passed = 0
    for _, sub in ipairs(s.oneOf) do
      if valid(v, sub, level + 1) then passed = passed + 1 end
      if passed > 1 then break end
    end
    if passed ~= 1 then return false end
  end
  if is_list(s.allOf) then
    for _, sub in ipairs(s.allOf) do
      if not valid(v, sub, level + 1) then return false end
    end
  end
  if is_schema(s["not"]) and valid(v, s["not"], level + 1) then return false end
  return true
end

-- The answer in one comparable table, its shape checked.
local function answer(schema, value, what)
  local r = table.pack(core.validate_output(schema, value))
  if r[1] == true then
    check(r.n == 1, "%s: true with more values", what)
    return { ok = true }
  end
  check(r[1] == nil and r.n >= 3 and r.n <= 4, "%s: an answer of %d values", what, r.n)
  check(type(r[2]) == "string" and r[2]:sub(1, 1) == "$", "%s: path %s", what, tostring(r[2]))
  check(type(r[3]) == "string" and r[3] ~= "", "%s: no reason", what)
  check(r[4] == nil or UNCHECKED[r[4]], "%s: unchecked %s", what, tostring(r[4]))
  return { ok = false, path = r[2], reason = r[3], unchecked = r[4] }
end

-- An exact schema for v: its type and bounds, every member and element.
local function inferred(v, level)
  if level > 80 then return true end
  local k = kind(v)
  if k == "null" then return { type = "null" } end
  if k == "boolean" then return { type = "boolean", enum = json.array { v } } end
  if k == "integer" then return { type = "integer", minimum = v, maximum = v } end
  if k == "real" then return { type = "number", minimum = v, maximum = v } end
  if k == "string" then
    local n = utf8.len(v)
    return { type = "string", minLength = n, maxLength = n, const = v }
  end
  if k == "array" then
    local items = json.array {}
    for i = 1, #v do items[i] = inferred(v[i], level + 1) end
    local s = { type = "array", minItems = #v, maxItems = #v, items = false }
    if #items > 0 then s.prefixItems = items end
    return s
  end
  local props, required = {}, json.array {}
  for name, item in pairs(v) do
    props[name] = inferred(item, level + 1)
    required[#required + 1] = name
  end
  return { type = "object", properties = props, required = required, additionalProperties = false }
end

return function(input)
  local schema_text, value_text = input:match("^(.-)%z(.*)$")
  if not schema_text then schema_text, value_text = input, input end
  local schema = json.decode(schema_text, true)
  local value = json.decode(value_text, true)
  if value == nil then value = null end
  if schema == nil then schema = schema_text end -- a string is no schema: never read as JSON text
  if type(schema) ~= "table" and type(schema) ~= "boolean" then
    local a = answer(schema, value, "no schema")
    check(a.unchecked == "schema", "a %s taken for a schema: %s", type(schema), tostring(a.reason))
    return
  end
  local first = answer(schema, value, "schema")
  local second = answer(schema, value, "again")
  check(first.ok == second.ok and first.path == second.path and first.reason == second.reason
    and first.unchecked == second.unchecked, "two answers differ: %s / %s", tostring(first.reason),
    tostring(second.reason))
  if type(schema) == "table" then -- the same schema written and read again
    local text = json.try_encode(schema)
    local copy = type(text) == "string" and json.decode(text, true)
    if copy ~= nil then
      local again = answer(copy, value, "the schema written and read again")
      check(again.ok == first.ok and again.unchecked == first.unchecked,
        "the schema read again judged otherwise: %s / %s", tostring(first.reason), tostring(again.reason))
    end
  end
  if not first.unchecked then
    local ok, model = pcall(valid, value, schema, 1)
    if not ok and model ~= Skip then error(model, 0) end
    if ok then
      check(model == first.ok, "the model says %s, validate_output %s (%s at %s)", tostring(model),
        tostring(first.ok), tostring(first.reason), tostring(first.path))
    end
  end
  -- the value is valid under schemas built from it
  for _, built in ipairs { { const = value }, inferred(value, 1), { enum = json.array { value } } } do
    local a = answer(built, value, "built")
    check(a.ok or a.unchecked == "depth" or a.unchecked == "steps",
      "the value is refused by a schema built from it: %s at %s", tostring(a.reason), tostring(a.path))
  end
end
