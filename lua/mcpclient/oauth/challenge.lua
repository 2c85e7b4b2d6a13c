--- The Bearer (or DPoP) challenge of a refused request (RFC 6750 section 3,
--- RFC 9728 section 5.1, RFC 9449 section 7.1).
--
-- A server that wants a token answers 401 (or 403 insufficient_scope) with
-- `WWW-Authenticate: Bearer realm="...", scope="a b", resource_metadata="..."`
-- (or the same auth-params under the DPoP scheme). Only the asked scheme's
-- auth-params are read; other schemes in the same header are skipped. The
-- parser is total: any text yields a table, never an error, and values keep
-- at most MAX_VALUE bytes so a hostile header cannot grow what the client
-- holds.
local challenge = {}

local MAX_VALUE = 2048

-- One auth-param value at `pos`: a quoted-string (with \-escapes) or a token.
-- Returns the value and the position after it.
local function read_value(text, pos)
  if text:sub(pos, pos) ~= '"' then
    local token = text:match("^[^%s,]*", pos)
    return token, pos + #token
  end
  local out, i = {}, pos + 1
  while i <= #text do
    local c = text:sub(i, i)
    if c == "\\" then
      out[#out + 1] = text:sub(i + 1, i + 1)
      i = i + 2
    elseif c == '"' then
      return table.concat(out), i + 1
    else
      out[#out + 1] = c
      i = i + 1
    end
  end
  return table.concat(out), i
end

-- Where the challenge of `wanted` (a lower-case scheme) starts, or nil.
local function scheme_start(text, wanted)
  local pos = 1
  while pos <= #text do
    local s, e, scheme = text:find("([%w!#$%%&'*+.^_`|~-]+)", pos)
    if not s then return nil end
    local before = text:sub(1, s - 1)
    if scheme:lower() == wanted and (before:match("^%s*$") or before:match(",%s*$"))
        and not text:sub(e + 1):match("^%s*=") then
      return e + 1
    end
    pos = e + 1
  end
  return nil
end

--- Parse a WWW-Authenticate value.
-- @param scheme "bearer" (the default) or "dpop"
-- @return { bearer = true|false (the scheme's challenge is there), params = { [lower-case name] = value } }
function challenge.parse(text, scheme)
  local result = { bearer = false, params = {} }
  if type(text) ~= "string" then return result end
  local pos = scheme_start(text, scheme or "bearer")
  if not pos then return result end
  result.bearer = true
  while pos <= #text do
    local s, e, name = text:find("^[%s,]*([%w!#$%%&'*+.^_`|~-]+)%s*=%s*", pos)
    if not s then break end
    local value
    value, pos = read_value(text, e + 1)
    name = name:lower()
    if result.params[name] == nil then result.params[name] = value:sub(1, MAX_VALUE) end
    -- A new scheme (a token not followed by '=') ends this challenge.
    if text:find("^%s*,%s*[%w!#$%%&'*+.^_`|~-]+%s+[^=]", pos) and
        not text:find("^%s*,%s*[%w!#$%%&'*+.^_`|~-]+%s*=", pos) then
      break
    end
  end
  return result
end

--- The scopes of a space-separated scope string, as a list without repeats.
function challenge.scopes(text)
  local list, seen = {}, {}
  for scope in (text or ""):gmatch("%S+") do
    if not seen[scope] then
      seen[scope] = true
      list[#list + 1] = scope
    end
  end
  return list
end

return challenge
