--- The checkers' one comparison of two decoded values: the same Lua types,
--- integers as integers with the same value, reals bit for bit (-0.0
--- included), the same strings; tables with the same metatable (the array
--- marker or none), keys and values and, when `with_order` is set, the same
--- key-order record. Raises (through check) at the first difference, naming
--- its path.
--
--   local same = require("same")(true)   -- key order compared too
--   same(fast_value, jansson_value, "$")
local core = require "mcpclient.core"

local check = require "check"

local json = core.json

return function(with_order)
  local same

  local function same_table(a, b, path)
    check(getmetatable(a) == getmetatable(b), "%s: one is an array, the other not", path)
    local n = 0
    for k, v in pairs(a) do
      n = n + 1
      check(rawget(b, k) ~= nil, "%s: key %q only in the first value", path, tostring(k))
      same(v, rawget(b, k), path .. "." .. tostring(k))
    end
    for _ in pairs(b) do n = n - 1 end
    check(n == 0, "%s: the reference has keys the first value lacks", path)
    if not with_order then return end
    local ka, kb = json.key_order(a), json.key_order(b)
    check((ka == nil) == (kb == nil), "%s: key order recorded on one side only", path)
    if ka then
      check(#ka == #kb, "%s: key orders of different lengths", path)
      for i = 1, #ka do check(ka[i] == kb[i], "%s: key order differs at %d", path, i) end
    end
  end

  function same(a, b, path)
    check(type(a) == type(b), "%s: %s against %s", path, type(a), type(b))
    if type(a) == "table" then return same_table(a, b, path) end
    if type(a) == "number" then
      check(math.type(a) == math.type(b), "%s: %s against %s", path, math.type(a), math.type(b))
      check(a == b and (a ~= 0 or 1 / a == 1 / b), "%s: %s against %s", path, tostring(a), tostring(b))
      return
    end
    check(a == b, "%s: values differ", path)
  end

  return same
end
