--- The stdio soak: many calls at once on one stdio connection, each written whole and answered once.
--
--   lua5.4 scripts/soak_stdio_client.lua [ROUNDS [WIDTH]]      (scripts/soak-stdio runs it)
--
-- Run from the repository root. ROUNDS (default 2000) rounds of WIDTH (default 8) tools/call
-- "digest" at once (mcp.gather) on one connection to the scripted server in its counting mode
-- (spec/support/stdio_server.lua counting), each call's data 1 byte to 1 MiB (log-uniform, and
-- every round one call of exactly 1 byte and one of exactly 1 MiB), its tag unique. Every answer
-- must be its own call's ("<tag> <bytes> ok": the server found the data intact). At the end the
-- server reports every request id it received and every digest tag; the soak checks each id
-- arrived exactly once and the ids run from 1 without a gap (nothing written twice, nothing lost
-- inside another message), each tag exactly once, no line the server could not read, and no
-- answer the client had to pass over.
--
-- Environment: SOAK_BUILD (default ./build: where mcpclient/core.so is), SOAK_SEED (default 1).
-- Prints one summary line; exits 1 on any failure, 2 on bad arguments.
local build = os.getenv("SOAK_BUILD") or "./build"
package.path = "./lua/?.lua;./lua/?/init.lua;" .. package.path
package.cpath = build .. "/?.so;" .. package.cpath

local mcp = require "mcpclient"
local core = require "mcpclient.core"

local json = core.json
local MIB = 1024 * 1024

local function count_arg(i, default)
  local text = arg[i]
  if text == nil or text == "" then return default end
  local n = math.tointeger(tonumber(text))
  if not n or n < 1 then
    io.stderr:write(string.format("soak_stdio_client: argument %d must be a positive integer, not %q\n", i, text))
    os.exit(2)
  end
  return n
end

local ROUNDS = count_arg(1, 2000)
local WIDTH = count_arg(2, 8)
math.randomseed(math.tointeger(tonumber(os.getenv("SOAK_SEED") or "1")) or 1)

local root = assert(io.popen("pwd")):read("l")
local function absolute(path) return path:sub(1, 1) == "/" and path or (root .. "/" .. path:gsub("^%./", "")) end

-- The data of digest for `tag`, `size` bytes long (the server makes the same to compare).
local function pattern(tag, size)
  local unit = tag .. ";"
  return unit:rep(size // #unit + 1):sub(1, size)
end

-- The size of call `i` of round `r`: 1 MiB and 1 byte in two slots that move each round, the
-- others log-uniform between them.
local function size_of(r, i)
  if i == r % WIDTH + 1 then return MIB end
  if WIDTH > 1 and i == (r + WIDTH // 2) % WIDTH + 1 then return 1 end
  return math.max(1, math.floor(2 ^ (20 * math.random())))
end

local failures = {}
local function failed(text)
  if #failures < 10 then failures[#failures + 1] = text end
  failures.count = (failures.count or 0) + 1
end

local conn = mcp.connect {
  identifier = "soak", health = mcp.health.discard, budget = 60,
  command = { "lua5.4", absolute("spec/support/stdio_server.lua"), "counting" },
  env = { LUA_CPATH = absolute(build) .. "/?.so", LUA_PATH = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua" },
}

local t0 = core.now()
local sent_tags, calls, matched, bytes = {}, 0, 0, 0
for r = 1, ROUNDS do
  local fns, expected = {}, {}
  for i = 1, WIDTH do
    local tag, size = string.format("r%dc%d", r, i), size_of(r, i)
    expected[i] = string.format("%s %d ok", tag, size)
    sent_tags[#sent_tags + 1] = tag
    bytes = bytes + size
    fns[i] = function() return conn:call_tool("digest", { tag = tag, data = pattern(tag, size) }) end
  end
  for i, result in ipairs(mcp.gather(fns)) do
    calls = calls + 1
    local outcome = result[1]
    if result.error ~= nil then
      failed(string.format("round %d call %d raised: %s", r, i, tostring(result.error)))
    elseif not outcome then
      failed(string.format("round %d call %d failed (%s): %s", r, i, tostring(result[3] and result[3].kind),
        tostring(result[2])))
    elseif outcome.is_error or outcome.content[1].text ~= expected[i] then
      failed(string.format("round %d call %d answered %q, not %q", r, i, core.clip(outcome.content[1].text or "", 80),
        expected[i]))
    else
      matched = matched + 1
    end
  end
end
local elapsed = core.now() - t0

-- What the server received: each request id once, 1 to the last without a gap; each tag once.
local report
local outcome, message = conn:call_tool("received")
if outcome then report = json.decode(outcome.content[1].text) end
if type(report) ~= "table" then
  failed("the server's report could not be read: " .. tostring(message))
  report = { ids = {}, tags = {}, unreadable = -1 }
end
local seen, highest, wrong_ids = {}, 0, 0
for _, id in ipairs(report.ids) do
  seen[id] = (seen[id] or 0) + 1
  if math.type(id) == "integer" and id > highest then highest = id end
end
for id = 1, highest do
  if seen[id] ~= 1 then
    wrong_ids = wrong_ids + 1
    failed(string.format("request id %d arrived %d times", id, seen[id] or 0))
  end
end
if #report.ids ~= highest then failed(string.format("%d request ids arrived, the last %d", #report.ids, highest)) end
local tags = {}
for _, tag in ipairs(report.tags) do tags[tag] = (tags[tag] or 0) + 1 end
for _, tag in ipairs(sent_tags) do
  if tags[tag] ~= 1 then failed(string.format("digest %s arrived %d times", tag, tags[tag] or 0)) end
end
if #report.tags ~= #sent_tags then failed(string.format("%d digests arrived, %d sent", #report.tags, #sent_tags)) end
if report.unreadable ~= 0 then failed(string.format("the server could not read %s lines", report.unreadable)) end
local dropped = conn.session.channel.dropped or 0
if dropped ~= 0 then failed(string.format("%d answers were passed over", dropped)) end
conn:close()

local summary = string.format("soak-stdio: %d rounds of %d calls at once on one stdio connection (1 B to 1 MiB, "
  .. "%.1f MiB written) in %.1f s: %d/%d answers matched to their calls, request ids 1..%d received with %d not "
  .. "exactly once, %d/%d digests received, %s unreadable lines, %d answers passed over", ROUNDS, WIDTH, bytes / MIB,
  elapsed, matched, calls, highest, wrong_ids, #report.tags, #sent_tags, tostring(report.unreadable), dropped)
if failures.count then
  for _, text in ipairs(failures) do io.stderr:write("soak-stdio: ", text, "\n") end
  print(summary .. string.format(": FAILED (%d failures)", failures.count))
  os.exit(1)
end
print(summary .. ": OK")
