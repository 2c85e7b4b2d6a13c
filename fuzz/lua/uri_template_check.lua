--- Checker of fuzz/uri_template_fuzz.c: the URI template expander
--- (lua/mcpclient/uri_template.lua).
--
-- The input is a template, then values, separated by NUL bytes. The values
-- go to the template's variables in order (and to a few fixed names), each
-- read by its first byte: a string, a list (split at ","), a map (pairs split
-- at "," and "="), an ordered list of pairs, a number, a boolean, or
-- undefined. expand must give a string or `nil, message, err` with kind
-- "template" (a position within the template), and never raise; the same
-- twice; a string of printable ASCII where every '%' starts a triplet, and
-- for each expression of an operator that keeps no reserved characters
-- (none, ".", "/", ";", "?", "&") only unreserved characters, triplets and
-- that operator's punctuation. variables() fails exactly when parsing does,
-- and names exactly what expand reads: with no value defined the output is
-- the literals alone; one variable named by it defined changes the output;
-- a name it does not give changes nothing.
local template = require "mcpclient.uri_template"
local json = require "mcpclient.json"
local check = require "check"

local UNRESERVED = {}
for c in ("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~"):gmatch(".") do
  UNRESERVED[c:byte()] = true
end
local HEX = {}
for c in ("0123456789ABCDEFabcdef"):gmatch(".") do HEX[c:byte()] = true end
local PUNCTUATION = {} -- what the non-reserved operators write besides values: firsts, separators, "="
for c in (",./;?&="):gmatch(".") do PUNCTUATION[c:byte()] = true end

-- Every '%' of s starts a triplet; every byte is printable ASCII (and in `allowed` when given).
local function clean(s, allowed)
  local i = 1
  while i <= #s do
    local b = s:byte(i)
    if b == 37 then
      if not (HEX[s:byte(i + 1) or 0] and HEX[s:byte(i + 2) or 0]) then return false, i end
      i = i + 3
    else
      if b < 33 or b > 126 or (allowed and not allowed(b)) then return false, i end
      i = i + 1
    end
  end
  return true
end

-- s cut at each (plain) sep.
local function split(s, sep)
  local parts, at = {}, 1
  while true do
    local found = s:find(sep, at, true)
    if not found then
      parts[#parts + 1] = s:sub(at)
      return parts
    end
    parts[#parts + 1] = s:sub(at, found - 1)
    at = found + #sep
  end
end

-- A value from one piece of the input, by its first byte.
local function value_of(piece)
  if piece == "" then return nil end
  local how, rest = piece:byte(1) % 8, piece:sub(2)
  if how == 0 then return rest end
  if how == 1 then return json.array(split(rest, ",")) end
  if how == 2 then
    local map = {}
    for _, pair in ipairs(split(rest, ",")) do
      local k, v = pair:match("^([^=]*)=?(.*)$")
      map[k] = v
    end
    return map
  end
  if how == 3 then
    local list = {}
    for _, pair in ipairs(split(rest, ",")) do
      local k, v = pair:match("^([^=]*)=?(.*)$")
      list[#list + 1] = { k, v }
    end
    return list
  end
  if how == 4 then return tonumber(rest) or #rest end
  if how == 5 then return #rest % 2 == 0 end
  if how == 6 then return json.null end
  return nil
end

-- expand under a pcall: the string, or the failure (its shape checked); a raise is a finding.
local function expand(t, values, what)
  local ok, out, message, err = pcall(template.expand, t, values)
  check(ok, "%s: expand raised: %s", what, tostring(out))
  if out ~= nil then
    check(type(out) == "string", "%s: expand gave a %s", what, type(out))
    return out
  end
  check(type(message) == "string" and message ~= "", "%s: a failure without a message", what)
  check(type(err) == "table" and err.kind == "template", "%s: a failure of kind %s", what,
    type(err) == "table" and tostring(err.kind) or "?")
  local chars = utf8.len(t) or #t
  check(math.type(err.position) == "integer" and err.position >= 1 and err.position <= #t + 1,
    "%s: position %s of a template of %d characters", what, tostring(err.position), chars)
  return nil, err
end

-- The expressions of a template that parsed: each "{...}" in order (a parsed template has no nesting).
local function expressions(t)
  local list, at = {}, 1
  while true do
    local s, e = t:find("{[^{}]*}", at)
    if not s then return list end
    list[#list + 1] = t:sub(s, e)
    at = e + 1
  end
end

return function(input)
  local pieces = split(input, "\0")
  local t = pieces[1]
  local names, verr = template.variables(t)
  local parsed_ok = names ~= nil
  if not parsed_ok then
    check(type(verr) == "string", "variables failed without a message")
  end
  -- values: the template's variables in order, then a few fixed names
  local values, i = {}, 2
  for _, name in ipairs(names or {}) do
    values[name] = value_of(pieces[i] or "")
    i = i + 1
  end
  for _, name in ipairs { "var", "list", "keys", "x" } do
    if values[name] == nil then
      values[name] = value_of(pieces[i] or "")
      i = i + 1
    end
  end
  local out, err = expand(t, values, "the input")
  local again = expand(t, values, "again")
  check(out == again, "two expansions differ")
  if out == nil then
    -- a parse failure is variables' failure too; with the template read, only a prefix on a list or map fails
    check(parsed_ok or err.detail ~= nil, "expand refused a template variables read")
    if parsed_ok then check(err.detail:find("prefix", 1, true), "expand refused a read template: %s", err.detail) end
    return
  end
  check(parsed_ok, "expand read a template variables refused")
  local ok, at = clean(out)
  check(ok, "the expansion has a byte outside printable ASCII or a bare %% at %d: %q", at or 0, out)
  -- expression by expression, for the operators that keep no reserved characters
  for _, expr in ipairs(expressions(t)) do
    local op = expr:sub(2, 2)
    if op ~= "+" and op ~= "#" then
      local part = expand(expr, values, "an expression")
      if part then
        local fine, where = clean(part, function(b) return UNRESERVED[b] or PUNCTUATION[b] end)
        check(fine, "%s expands to %q, with a reserved character at %d", expr, part, where or 0)
      end
    end
  end
  -- variables() names exactly what expand reads
  local literal = expand(t, {}, "no values")
  check(literal ~= nil, "the template fails with no values")
  local seen = {}
  for _, name in ipairs(names) do
    check(not seen[name], "variables names %s twice", name)
    seen[name] = true
    local one = expand(t, { [name] = "x" }, "one value")
    check(one ~= nil and one ~= literal, "defining %s does not change the expansion", name)
  end
  local other = "not_a_variable"
  while seen[other] do other = other .. "_" end
  check(expand(t, { [other] = "x" }, "another name") == literal, "a name variables does not give changed it")
end
