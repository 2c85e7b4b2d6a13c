--- "Did you mean …?": the closest of some known words to a word given, when
--- it is close enough to be a typo, by edit distance (a swap of neighbours
--- counting as one edit: "tset" is one typo from "test"). The command line's
--- words and the option tables of the library and the agent host use it, so
--- a misspelt option names the one meant.
--
--   suggest.closest("budgte", { "budget", "cancel" })  --> "budget"
--   suggest.unknown_option("connect", "timeout", { budget = ..., url = ... })
--     --> 'connect: unknown option "timeout" (did you mean "budget"?)'
local suggest = {}

-- Names people bring from other MCP SDKs, and the option that does the same here.
local HABITS = {
  timeout = "budget", timeout_ms = "budget", request_timeout = "budget", deadline = "budget",
  signal = "cancel", abort = "cancel", args = "arguments", params = "arguments",
  cmd = "command", argv = "command",
}

-- The edit distance between two short words (optimal string alignment).
local function distance(a, b)
  local d = {}
  for i = 0, #a do d[i] = { [0] = i } end
  for j = 0, #b do d[0][j] = j end
  for i = 1, #a do
    for j = 1, #b do
      local cost = a:sub(i, i) == b:sub(j, j) and 0 or 1
      d[i][j] = math.min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost)
      if i > 1 and j > 1 and a:sub(i, i) == b:sub(j - 1, j - 1) and a:sub(i - 1, i - 1) == b:sub(j, j) then
        d[i][j] = math.min(d[i][j], d[i - 2][j - 2] + 1)
      end
    end
  end
  return d[#a][#b]
end
suggest.distance = distance

--- The closest of `candidates` (a list of strings) to `word`, when it is
--- within a third of the word's length in edits (at least one), else nil.
function suggest.closest(word, candidates)
  if type(word) ~= "string" then return nil end
  local best, best_distance
  for _, candidate in ipairs(candidates) do
    local d = distance(word, candidate)
    if best_distance == nil or d < best_distance or (d == best_distance and candidate < best) then
      best, best_distance = candidate, d
    end
  end
  if best and best_distance <= math.max(1, #word // 3) then return best end
  return nil
end

--- The option of `known` (a table keyed by option name) meant by `key`: a
--- habit from another SDK (timeout: budget) when that option is known, else
--- the closest by edit distance, else nil.
function suggest.option(key, known)
  if type(key) ~= "string" then return nil end
  local names = {}
  for name in pairs(known) do
    if type(name) == "string" then names[#names + 1] = name end
  end
  local habit = HABITS[key:lower()]
  if habit and known[habit] ~= nil then return habit end
  return suggest.closest(key, names)
end

--- The message for an unknown option: `where: unknown option "key"`, with
--- `(did you mean "x"?)` when one is close.
function suggest.unknown_option(where, key, known)
  local meant = suggest.option(key, known)
  local prefix = where and where ~= "" and (where .. ": ") or ""
  return string.format("%sunknown option %q%s", prefix, tostring(key),
    meant and string.format(' (did you mean "%s"?)', meant) or "")
end

return suggest
