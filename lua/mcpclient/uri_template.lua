--- mcp.uri_template: URI templates (RFC 6570, levels 1 to 4), for the
--- resource templates a server lists.
--
--   mcp.uri_template.expand("file:///{+path}{?q,lang}", { path = "a/b", q = "x y" })
--     --> "file:///a/b?q=x%20y"
--   mcp.uri_template.variables("file:///{+path}{?q,lang}") --> { "path", "q", "lang" }
--
-- Every operator (none, +, #, ., /, ;, ?, &), prefixes (`{var:3}`, counted in
-- characters, never splitting one), explode (`{list*}`). Values:
--
-- * a string, a number or a boolean (written as `tostring` writes it, an integer-valued float as
--   `%.14g` does) is a string value; nil and `json.null` are undefined;
-- * a sequence `{ "a", "b" }` (or a `json.array`) is a list;
-- * a table with string keys is an associative array, its members in sorted key order (Lua tables
--   have none of their own); for another order give a list of pairs `{ { "k1", "v1" }, { "k2", "v2" } }`;
-- * an empty list or table is undefined, as the RFC says.
--
-- Characters outside the unreserved set (and for `+` and `#` the reserved set) are percent-encoded
-- byte by byte, UTF-8 included; `+` and `#` keep a `%XX` triplet already in the value. A literal
-- outside an expression is copied when a URI may hold it, else encoded.
--
-- A template is text from a server: it is read by plain finds and byte comparisons, never run or
-- turned into a pattern. A malformed one (an unclosed or stray brace, an operator reserved for
-- later, a bad variable name, a prefix over 9999, a prefix and an explode together, a prefix given
-- a list or map) is `nil, message, err` with kind "template": `err.position` (the character where
-- it goes wrong, counted from 1, a UTF-8 sequence one character), `err.detail`, `err.template`.
-- Misuse (a template that is not a string, values that are not a table, a value of another type)
-- raises.
local errors = require "mcpclient.errors"
local json = require "mcpclient.json"

local uri_template = {}

-- Per operator: what starts the expansion, what separates values, whether
-- values are named (name=value), what an empty named value gets, and whether
-- reserved characters are kept.
local OPERATORS = {
  [""] = { first = "", sep = ",", named = false, ifemp = "", reserved = false },
  ["+"] = { first = "", sep = ",", named = false, ifemp = "", reserved = true },
  ["#"] = { first = "#", sep = ",", named = false, ifemp = "", reserved = true },
  ["."] = { first = ".", sep = ".", named = false, ifemp = "", reserved = false },
  ["/"] = { first = "/", sep = "/", named = false, ifemp = "", reserved = false },
  [";"] = { first = ";", sep = ";", named = true, ifemp = "", reserved = false },
  ["?"] = { first = "?", sep = "&", named = true, ifemp = "=", reserved = false },
  ["&"] = { first = "&", sep = "&", named = true, ifemp = "=", reserved = false },
}
-- Operators the RFC keeps for future extensions: refused, never guessed at.
local RESERVED_OPERATORS = { ["="] = true, [","] = true, ["!"] = true, ["@"] = true, ["|"] = true }

uri_template.MAX_PREFIX = 9999

local function byte_set(chars)
  local set = {}
  for i = 1, #chars do set[chars:byte(i)] = true end
  return set
end

local ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
local UNRESERVED = byte_set(ALNUM .. "-._~")
local UNRESERVED_OR_RESERVED = byte_set(ALNUM .. "-._~" .. ":/?#[]@" .. "!$&'()*+,;=")
local VARCHAR = byte_set(ALNUM .. "_")
local HEX = byte_set("0123456789ABCDEFabcdef")

-- Is there a %XX triplet at byte i of s?
local function triplet_at(s, i)
  return s:byte(i) == 37 and HEX[s:byte(i + 1) or 0] and HEX[s:byte(i + 2) or 0] or false
end

-- Percent-encode s: bytes in `allowed` copied, others as %XX; with `keep`,
-- %XX triplets already there are copied as they are.
local function encode(s, allowed, keep)
  local out, i, n = {}, 1, #s
  while i <= n do
    local b = s:byte(i)
    if keep and triplet_at(s, i) then
      out[#out + 1] = s:sub(i, i + 2)
      i = i + 3
    else
      out[#out + 1] = allowed[b] and string.char(b) or string.format("%%%02X", b)
      i = i + 1
    end
  end
  return table.concat(out)
end

local function encode_value(s, op)
  if op.reserved then return encode(s, UNRESERVED_OR_RESERVED, true) end
  return encode(s, UNRESERVED, false)
end

-- The first `count` characters of s: a UTF-8 sequence is one character (a
-- byte that starts none counts as one, so nothing is ever split or lost).
local function prefix(s, count)
  local i, n, seen = 1, #s, 0
  while i <= n and seen < count do
    local b = s:byte(i)
    local len = b >= 0xF0 and 4 or b >= 0xE0 and 3 or b >= 0xC0 and 2 or 1
    local j = i + 1
    while j < i + len and j <= n and (s:byte(j) & 0xC0) == 0x80 do j = j + 1 end
    i = j
    seen = seen + 1
  end
  return s:sub(1, i - 1)
end

---------------------------------------------------------------------------
-- Parsing
---------------------------------------------------------------------------

local Malformed = {}

local function malformed(position, detail)
  error(setmetatable({ position = position, detail = detail }, Malformed), 0)
end

-- One expression's body (between the braces, starting at byte `at` of the
-- template) into { op, vars = { { name, prefix, explode } } }.
local function parse_expression(body, at)
  local op_char = body:sub(1, 1)
  local op, i = OPERATORS[""], 1
  if RESERVED_OPERATORS[op_char] then
    malformed(at, string.format('the operator "%s" is reserved for future extensions', op_char))
  end
  if op_char ~= "" and OPERATORS[op_char] then op, i = OPERATORS[op_char], 2 end
  local vars, n = {}, #body
  while true do
    -- varname = varchar *( ["."] varchar ), varchar = ALPHA / DIGIT / "_" / pct-encoded
    local start = i
    while i <= n do
      local b = body:byte(i)
      if VARCHAR[b] then
        i = i + 1
      elseif triplet_at(body, i) then
        i = i + 3
      elseif b == 46 and i > start and body:byte(i - 1) ~= 46 then  -- "." between varchars
        i = i + 1
      else
        break
      end
    end
    local name = body:sub(start, i - 1)
    if name == "" then
      local c = body:sub(i, i)
      malformed(at + i - 1, c == "" and "a variable name is missing"
        or string.format("%q cannot start a variable name", c))
    end
    if name:sub(-1) == "." then
      malformed(at + i - 2, 'a "." in a variable name must be followed by a letter, digit, _ or %XX')
    end
    local var = { name = name }
    local c = body:sub(i, i)
    if c == ":" then
      local digits = body:match("^%d+", i + 1) or ""
      if digits == "" or digits:sub(1, 1) == "0" then
        malformed(at + i, "a prefix is a number from 1 to " .. uri_template.MAX_PREFIX)
      end
      if #digits > 4 then
        malformed(at + i, "a prefix is at most " .. uri_template.MAX_PREFIX)
      end
      var.prefix = tonumber(digits)
      i = i + 1 + #digits
      if body:sub(i, i) == "*" then malformed(at + i - 1, "a variable cannot have both a prefix and an explode") end
    elseif c == "*" then
      var.explode = true
      i = i + 1
      if body:sub(i, i) == ":" then malformed(at + i - 1, "a variable cannot have both an explode and a prefix") end
    end
    vars[#vars + 1] = var
    c = body:sub(i, i)
    if c == "" then break end
    if c ~= "," then malformed(at + i - 1, string.format("%q is not allowed in a variable name", c)) end
    i = i + 1
  end
  return { op = op, vars = vars }
end

-- The template as a list of literal strings (already encoded) and expressions.
local function parse(template)
  local parts, i, n = {}, 1, #template
  local literal = {}
  local function flush()
    if #literal > 0 then
      parts[#parts + 1] = table.concat(literal)
      literal = {}
    end
  end
  while i <= n do
    local b = template:byte(i)
    if b == 123 then  -- "{"
      local close = template:find("}", i + 1, true)
      if not close then malformed(i, "the expression is not closed (no \"}\")") end
      local inner_open = template:find("{", i + 1, true)
      if inner_open and inner_open < close then
        malformed(inner_open, "\"{\" inside an expression")
      end
      local body = template:sub(i + 1, close - 1)
      if body == "" then malformed(i, "the expression is empty") end
      flush()
      parts[#parts + 1] = parse_expression(body, i + 1)
      i = close + 1
    elseif b == 125 then  -- "}"
      malformed(i, "\"}\" outside an expression")
    elseif triplet_at(template, i) then
      literal[#literal + 1] = template:sub(i, i + 2)
      i = i + 3
    else
      literal[#literal + 1] = UNRESERVED_OR_RESERVED[b] and string.char(b) or string.format("%%%02X", b)
      i = i + 1
    end
  end
  flush()
  return parts
end

-- The failure for a template refused at byte `at`: the position counted in
-- characters (a UTF-8 sequence is one), as a person counts along the text.
local function refused(template, at, detail)
  local before = template:sub(1, at - 1)
  local _, continuation = before:gsub("[\128-\191]", "")
  return errors.fail("template", { template = template, position = #before - continuation + 1, detail = detail })
end

local function parsed(template)
  local ok, result = pcall(parse, template)
  if ok then return result end
  if getmetatable(result) ~= Malformed then error(result, 0) end
  return refused(template, result.position, result.detail)
end

---------------------------------------------------------------------------
-- Values
---------------------------------------------------------------------------

-- A scalar as text, or nil for a value of another type.
local function scalar(v)
  local t = type(v)
  if t == "string" then return v end
  if t == "boolean" then return tostring(v) end
  if t == "number" then
    if math.type(v) == "integer" then return string.format("%d", v) end
    return string.format("%.14g", v)
  end
  return nil
end

-- Is `t` a list of { key, value } pairs (the ordered form of a map)?
local function pair_list(t)
  for _, p in ipairs(t) do
    if type(p) ~= "table" or #p ~= 2 or scalar(p[1]) == nil or scalar(p[2]) == nil then return false end
  end
  return true
end

-- The value of `name`: nil (undefined), { kind = "string", text }, { kind = "list", items },
-- or { kind = "map", pairs }. A value of another shape is misuse.
local function value_of(values, name)
  local v = values[name]
  if v == nil or v == json.null then return nil end
  local text = scalar(v)
  if text then return { kind = "string", text = text } end
  if type(v) ~= "table" then
    error(string.format("uri_template: the value of %s must be a string, number, boolean, list or table", name), 5)
  end
  local count = 0
  for _ in pairs(v) do count = count + 1 end
  if count == 0 then return nil end
  local listed = 0
  for _ in ipairs(v) do listed = listed + 1 end
  if count == listed then
    if type(v[1]) == "table" and pair_list(v) then
      local list = {}
      for i, p in ipairs(v) do list[i] = { scalar(p[1]), scalar(p[2]) } end
      return { kind = "map", pairs = list }
    end
    local items = {}
    for i, item in ipairs(v) do
      items[i] = scalar(item)
      if items[i] == nil then
        error(string.format("uri_template: %s[%d] must be a string, number or boolean", name, i), 5)
      end
    end
    return { kind = "list", items = items }
  end
  local keys = {}
  for k, item in pairs(v) do
    if type(k) ~= "string" or scalar(item) == nil then
      error(string.format("uri_template: the table %s must have string keys and string, number or boolean "
        .. "values (or be a list)", name), 5)
    end
    keys[#keys + 1] = k
  end
  table.sort(keys)
  local list = {}
  for i, k in ipairs(keys) do list[i] = { k, scalar(v[k]) } end
  return { kind = "map", pairs = list }
end

---------------------------------------------------------------------------
-- Expansion
---------------------------------------------------------------------------

-- name=value for a named operator (ifemp when the value is empty).
local function named(op, name, encoded)
  if encoded == "" then return name .. op.ifemp end
  return name .. "=" .. encoded
end

local function expand_expression(expr, values, out, position)
  local op, first = expr.op, true
  for _, var in ipairs(expr.vars) do
    local value = value_of(values, var.name)
    if value then
      out[#out + 1] = first and op.first or op.sep
      first = false
      if value.kind == "string" then
        local text = var.prefix and prefix(value.text, var.prefix) or value.text
        local encoded = encode_value(text, op)
        out[#out + 1] = op.named and named(op, var.name, encoded) or encoded
      elseif var.prefix then
        malformed(position, string.format("the prefix of %s applies to a string, and its value is a %s", var.name,
          value.kind == "list" and "list" or "map"))
      elseif not var.explode then
        local items = {}
        if value.kind == "list" then
          for i, item in ipairs(value.items) do items[i] = encode_value(item, op) end
        else
          for _, p in ipairs(value.pairs) do
            items[#items + 1] = encode_value(p[1], op)
            items[#items + 1] = encode_value(p[2], op)
          end
        end
        local joined = table.concat(items, ",")
        out[#out + 1] = op.named and (var.name .. "=" .. joined) or joined
      else
        local items = {}
        if value.kind == "list" then
          for i, item in ipairs(value.items) do
            local encoded = encode_value(item, op)
            items[i] = op.named and named(op, var.name, encoded) or encoded
          end
        else
          for i, p in ipairs(value.pairs) do
            local key, encoded = encode_value(p[1], op), encode_value(p[2], op)
            items[i] = op.named and named(op, key, encoded) or (key .. "=" .. encoded)
          end
        end
        out[#out + 1] = table.concat(items, op.sep)
      end
    end
  end
end

--- Expand a template with values.
-- @param template the URI template (text; a server's resource template, say)
-- @param values a table: name -> string | number | boolean | list | table | list of pairs
-- @return the URI | nil, message, err (kind "template")
function uri_template.expand(template, values)
  if type(template) ~= "string" then error("uri_template.expand: template must be a string", 2) end
  if type(values) ~= "table" then error("uri_template.expand: values must be a table", 2) end
  local parts, message, err = parsed(template)
  if not parts then return nil, message, err end
  local out, positions = {}, {}
  -- the position of each expression, for a prefix refused at expansion
  local at = 1
  for i, part in ipairs(parts) do
    if type(part) == "table" then
      local s = template:find("{", at, true)
      positions[i], at = s, s + 1
    end
  end
  for i, part in ipairs(parts) do
    if type(part) == "string" then
      out[#out + 1] = part
    else
      local ok, why = pcall(expand_expression, part, values, out, positions[i])
      if not ok then
        if getmetatable(why) ~= Malformed then error(why, 0) end
        return refused(template, why.position, why.detail)
      end
    end
  end
  return table.concat(out)
end

--- The names of the template's variables, in order of first appearance.
-- @return array of names | nil, message, err (kind "template")
function uri_template.variables(template)
  if type(template) ~= "string" then error("uri_template.variables: template must be a string", 2) end
  local parts, message, err = parsed(template)
  if not parts then return nil, message, err end
  local names, seen = {}, {}
  for _, part in ipairs(parts) do
    if type(part) == "table" then
      for _, var in ipairs(part.vars) do
        if not seen[var.name] then
          seen[var.name] = true
          names[#names + 1] = var.name
        end
      end
    end
  end
  return names
end

return uri_template
