--- Options tables of the agent host's constructors, checked one way.
--
--   options.check("store.open", given, { readonly = "boolean", busy_timeout_ms = "integer" })
--
-- An options table is a promise about its keys: a misspelt key would
-- otherwise be ignored silently and the default would run instead, so an
-- unknown key or a value of the wrong type raises (misuse), naming the
-- function and the key. Types are Lua type names, plus "integer", and "any"
-- for a key whose value is judged elsewhere (by the constructor itself).
local suggest = require "mcpclient.suggest"

local options = {}

local function type_of(value)
  return math.type(value) == "integer" and "integer" or type(value)
end

--- Check `given` against `spec` (key -> type); raise at the caller's caller.
-- @return given, or an empty table when given is nil
function options.check(where, given, spec)
  if given == nil then return {} end
  if type(given) ~= "table" then error(string.format("%s: options must be a table", where), 3) end
  for key, value in pairs(given) do
    local expected = spec[key]
    if expected == nil then error(suggest.unknown_option(where, key, spec), 3) end
    local actual = type_of(value)
    if expected ~= "any" and actual ~= expected and not (expected == "number" and actual == "integer") then
      error(string.format("%s: %s must be a%s %s", where, tostring(key), expected:match("^[aeiou]") and "n" or "",
        expected), 3)
    end
  end
  return given
end

--- The one rule for what a setting or an operator's input is trimmed of:
--- blanks, tabs, line ends, vertical tabs and NUL, the characters a file, a
--- form or a shell leaves around a value by accident.
function options.trim(text)
  return (text:gsub("^[ \t\n\r\v%z]+", ""):gsub("[ \t\n\r\v%z]+$", ""))
end

return options
