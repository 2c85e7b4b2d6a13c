--- mcpclient under benchmark (bench/run.lua starts it; it is not a test).
--
--   lua5.4 bench/mcpclient_client.lua --url URL [--mode warm|leg|cold|list|objects|cancel] [--calls N]
--          [--warmup W] [--message TEXT] [--slow-ms MS] [--cancel-min-ms A] [--cancel-max-ms B]
--          [--seed S] [--schemas kept|text|tables|default|default-read|plain] [--walk pages|whole]
--          [--gc interpreter|incremental] [--proxy URL]
--   Run from the repository root (it finds ./lua and ./build by itself).
--
--   warm    one connection; W untimed calls, then N timed call_tool("echo", {message}).
--   leg     the floor's loop driven through mcpclient's leg alone: one core.http_leg, the
--           handshake, then W untimed and N timed POSTs of one fixed tools/call body with the
--           header lines the client sends; nothing encoded or decoded, none of the library's Lua.
--           What the leg (libcurl's multi interface, the pool, the request and response tables)
--           costs over bench/floor, so the rest of the client's share can be read off warm.
--   cold    N times: connect, call_tool("echo"), close — each timed whole (handshake, call, DELETE).
--   list    one connection; W untimed, then N timed listings of the whole catalogue, every
--           inputSchema passed through the normaliser an import uses. --walk pages (the
--           default): conn:each_tool_page, each page's tools normalised and dropped, as the SDK
--           clients' benchmarks handle pages; whole: conn:list_tools, the catalogue held whole
--           and then normalised. --schemas kept (the default, what an import asks for): each
--           schema judged by the normaliser in the pass that reads the page (the kept text, or
--           { refused = reason }); text: schemas as the JSON text the server sent, normalised
--           afterwards by core.normalise_schema_text; tables: schemas = "tables" given, normalised
--           by core.normalise_schema; default: no option at all (`conn:list_tools()`, what a user
--           writes first: the same tables, each built on its first read), normalised by
--           core.normalise_schema, which judges an unread schema from its text; default-read: as
--           default, with every schema read first (`tool.inputSchema.properties`), so each is built;
--           plain: no option and nothing read or normalised (the schema's type checked only):
--           plain `conn:list_tools()`, the call the issue's CPU target names.
--   objects the floor the Lua collector sets for plain list_tools(): the catalogue is listed once,
--           untimed; then N timed times the objects that call hands over (each tool's table, its
--           strings, its small tables, an empty table for each schema and the schema's text) are
--           made by Lua alone from bytes already in memory and held until the next time. No
--           transport, no JSON: what holding a listing costs in this Lua state whatever the client.
--   cancel  one connection; N calls of the `slow` tool (MS milliseconds) with a cancel function
--           that turns true once a timer, drawn uniformly in [A, B] ms after the call starts, has
--           run out. Measured: the flag's moment (the timer's expiry) to call_tool's return.
--
-- Prints one JSON line: client, mode, n, wall_s, ops_per_s, p50_ms, p99_ms, max_ms, cpu_s,
-- cpu_per_op_us (os.clock(): this process's CPU, user + system, over the timed part only),
-- peak_rss_kb (VmHWM), startup_cpu_ms (process CPU when the library was loaded), errors, and
-- per mode: tools, refused, schemas and walk (the forms used) and rss_before_kb (VmRSS right
-- before the first listing) for list; samples (cancel: every latency in ms, ";"-separated). Any
-- error exits 1.
package.path = "./lua/?.lua;./lua/?/init.lua;" .. package.path
package.cpath = "./build/?.so;" .. package.cpath

local mcp = require "mcpclient"
local core = require "mcpclient.core"
local startup_cpu_ms = os.clock() * 1000

local function usage(why)
  io.stderr:write("mcpclient_client: ", why, "\n")
  os.exit(2)
end

local opts = { mode = "warm", calls = 1000, warmup = 50, message = "hello", slow_ms = 2000,
  cancel_min_ms = 10, cancel_max_ms = 60, seed = 1, schemas = "kept", walk = "pages", gc = "interpreter",
  proxy = "" }
local numeric = { calls = true, warmup = true, slow_ms = true, cancel_min_ms = true, cancel_max_ms = true,
  seed = true }
do
  local i = 1
  while i <= #arg do
    local key = arg[i]:match("^%-%-([%w-]+)$")
    if not key or arg[i + 1] == nil then usage("bad arguments near " .. tostring(arg[i])) end
    key = key:gsub("-", "_")
    if opts[key] == nil and key ~= "url" then usage("unknown option --" .. key) end
    local value = arg[i + 1]
    if numeric[key] then
      value = math.tointeger(tonumber(value))
      if not value or value < 0 then usage("--" .. key .. " needs a non-negative integer") end
    end
    opts[key] = value
    i = i + 2
  end
  if not opts.url then usage("--url is required") end
  local forms = { kept = true, text = true, tables = true, default = true, ["default-read"] = true, plain = true }
  if not forms[opts.schemas] then usage("--schemas must be kept, text, tables, default, default-read or plain") end
  if opts.walk ~= "pages" and opts.walk ~= "whole" then usage("--walk must be pages or whole") end
  -- the lua5.4 interpreter runs its collector in generational mode; a Lua state a host program
  -- creates (lua_newstate) runs it incremental: --gc incremental measures that host's default
  if opts.gc == "incremental" then
    collectgarbage("incremental")
  elseif opts.gc ~= "interpreter" then
    usage("--gc must be interpreter or incremental")
  end
end

-- A figure of this process's memory from /proc/self/status, in KiB: VmHWM is the peak
-- resident size so far, VmRSS the current one (0 where /proc is missing).
local function status_kb(field)
  local f = io.open("/proc/self/status", "r")
  if not f then return 0 end
  local text = f:read("a")
  f:close()
  return tonumber(text:match(field .. ":%s*(%d+)")) or 0
end

local function connect()
  -- --proxy URL: through that proxy; without it, as connect decides (the environment's, if any)
  return mcp.connect { url = opts.url, identifier = "bench", health = mcp.health.discard,
    proxy = opts.proxy ~= "" and opts.proxy or nil }
end

local errors = 0
local first_error

local function note_error(message)
  errors = errors + 1
  first_error = first_error or tostring(message)
end

-- One exchange of the leg mode: the body posted with req's header lines, the answer checked.
local function leg_post(leg, req, body, expect_result)
  req.body = body
  local response, kind, detail = leg:send(req)
  if not response then
    note_error(kind .. ": " .. tostring(detail))
  elseif response.status >= 300 or (expect_result and not response.body:find('"result"', 1, true)) then
    note_error("unexpected answer: HTTP " .. response.status)
  end
  return response
end

-- initialize (the session id and the revision join req's header lines), then initialized.
local function leg_handshake(leg, req)
  local response = leg_post(leg, req, '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":'
    .. '"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}', true)
  if not response then return end
  local headers = req.headers
  local session = response.headers["mcp-session-id"]
  if session then headers[#headers + 1] = "Mcp-Session-Id: " .. session end
  local version = response.body:match('"protocolVersion"%s*:%s*"([^"]+)"')
  if version then headers[#headers + 1] = "MCP-Protocol-Version: " .. version end
  leg_post(leg, req, '{"jsonrpc":"2.0","method":"notifications/initialized"}')
end

local function echo_once(conn)
  local outcome, message = conn:call_tool("echo", { message = opts.message })
  if not outcome then
    note_error(message)
  elseif outcome.is_error or not outcome.text:find(opts.message, 1, true) then
    note_error("unexpected answer: " .. outcome.text)
  end
end

-- One listing: every tool handed to judge(tool), page by page or after the whole catalogue.
local function walk_catalogue(conn, judge)
  local listing_opts = { schemas = opts.schemas }
  if opts.schemas:find("^default") or opts.schemas == "plain" then listing_opts = nil end
  if opts.walk == "pages" then
    return conn:each_tool_page(function(page)
      for _, tool in ipairs(page) do judge(tool) end
    end, listing_opts)
  end
  local tools, message = conn:list_tools(listing_opts)
  if not tools then return nil, message end
  for _, tool in ipairs(tools) do judge(tool) end
  return true
end

-- How a listed schema is judged in each form, and the type it arrives as (kept: either).
local NORMALISE = {
  kept = function(schema) return type(schema) == "string" end,
  text = core.normalise_schema_text,
  tables = core.normalise_schema,
  default = core.normalise_schema,
  plain = function(schema) return schema ~= nil end,
  ["default-read"] = function(schema)
    local _ = schema.properties -- what code that uses a schema does first: it is built here
    return core.normalise_schema(schema)
  end,
}
local ARRIVES_AS = { kept = { string = true, table = true }, text = { string = true }, tables = { table = true },
  default = { table = true }, ["default-read"] = { table = true }, plain = { table = true } }
local normalise, arrives_as = NORMALISE[opts.schemas], ARRIVES_AS[opts.schemas]

local extra = {}
local latencies = {}
local n = opts.calls
local cpu0, t0

-- The resident size right before the first listing, then W untimed and N timed listings.
local function time_listings(listing)
  extra.rss_before_kb = status_kb("VmRSS")
  for _ = 1, opts.warmup do listing() end
  cpu0, t0 = os.clock(), core.now()
  for i = 1, n do
    local s = core.now()
    listing()
    latencies[i] = core.now() - s
  end
end

if opts.mode == "warm" then
  local conn = connect()
  for _ = 1, opts.warmup do echo_once(conn) end
  cpu0, t0 = os.clock(), core.now()
  for i = 1, n do
    local s = core.now()
    echo_once(conn)
    latencies[i] = core.now() - s
  end
  conn:close()
elseif opts.mode == "leg" then
  local leg = core.http_leg()
  local req = { method = "POST", url = opts.url, timeout_ms = 30000, connect_timeout_ms = 10000,
    max_bytes = 2 * 1024 * 1024, headers = { "Content-Type: application/json",
      "Accept: application/json, text/event-stream" } }
  leg_handshake(leg, req)
  local body = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":'
    .. '{"message":' .. core.json.encode(opts.message) .. '}}}'
  for _ = 1, opts.warmup do leg_post(leg, req, body, true) end
  cpu0, t0 = os.clock(), core.now()
  for i = 1, n do
    local s = core.now()
    leg_post(leg, req, body, true)
    latencies[i] = core.now() - s
  end
  leg:close()
elseif opts.mode == "cold" then
  cpu0, t0 = os.clock(), core.now()
  for i = 1, n do
    local s = core.now()
    local conn = connect()
    echo_once(conn)
    conn:close()
    latencies[i] = core.now() - s
  end
elseif opts.mode == "list" then
  local conn = connect()
  local tools_seen, refused = 0, 0
  local function judge(tool)
    tools_seen = tools_seen + 1
    -- a schema of the other form would mean the option was ignored and the figures measure that form
    if not arrives_as[type(tool.inputSchema)] then note_error("an inputSchema of type " .. type(tool.inputSchema)) end
    if not normalise(tool.inputSchema) then refused = refused + 1 end
  end
  local function listing()
    tools_seen, refused = 0, 0
    local ok, message = walk_catalogue(conn, judge)
    if not ok then note_error(message) end
  end
  time_listings(listing)
  conn:close()
  extra.tools, extra.refused = tools_seen, refused
elseif opts.mode == "objects" then
  -- Untimed: the catalogue once (schemas as text), every string in it laid end to end in one
  -- string, and each tool's shape as codes in one flat array (one object, so the plan itself
  -- adds next to nothing to what the collector walks): STRING from to, VALUE v, TABLE n then n
  -- key-value pairs, SCHEMA from to.
  local STRING, VALUE, TABLE, SCHEMA = 1, 2, 3, 4
  local conn = connect()
  local tools, message = conn:list_tools { schemas = "text" }
  if not tools then usage("the catalogue could not be listed: " .. tostring(message)) end
  conn:close()
  local parts, at, plan = {}, 1, {}
  local function put(...)
    for i = 1, select("#", ...) do plan[#plan + 1] = select(i, ...) end
  end
  local function text_at(code, s)
    parts[#parts + 1] = s
    put(code, at, at + #s - 1)
    at = at + #s
  end
  local function plan_of(value)
    if type(value) == "string" then return text_at(STRING, value) end
    if type(value) ~= "table" then return put(VALUE, value) end
    local members = 0
    for _ in pairs(value) do members = members + 1 end
    put(TABLE, members)
    for k, v in pairs(value) do
      put(k)
      if k == "inputSchema" or k == "outputSchema" then text_at(SCHEMA, v) else plan_of(v) end
    end
  end
  local count = #tools
  for _, tool in ipairs(tools) do plan_of(tool) end
  local store = table.concat(parts)
  tools, parts = nil, nil -- luacheck: ignore (dropped, so the collections below free them)
  collectgarbage()
  collectgarbage()
  -- Timed: the objects plain list_tools() hands over, made again from those bytes for every
  -- listing and held until the next: each tool's table, its strings, its small tables, an empty
  -- table standing for each schema and the schema's text beside it. No transport, no JSON.
  local unread, texts = {}, nil
  local function make(pos)
    local code = plan[pos]
    if code == STRING then return store:sub(plan[pos + 1], plan[pos + 2]), pos + 3 end
    if code == VALUE then return plan[pos + 1], pos + 2 end
    if code == SCHEMA then
      texts[#texts + 1] = store:sub(plan[pos + 1], plan[pos + 2])
      return setmetatable({}, unread), pos + 3
    end
    local t = {}
    pos = pos + 2
    for _ = 1, plan[pos - 1] do
      local key = plan[pos]
      t[key], pos = make(pos + 1)
    end
    return t, pos
  end
  local held
  local function listing()
    texts, held = {}, {}
    local pos = 1
    for i = 1, count do held[i], pos = make(pos) end
  end
  time_listings(listing)
  extra.tools, extra.refused = #held, 0
elseif opts.mode == "cancel" then
  math.randomseed(opts.seed)
  local conn = connect()
  for _ = 1, math.max(1, opts.warmup) do echo_once(conn) end
  local args = { ms = opts.slow_ms, seconds = opts.slow_ms / 1000 }
  cpu0, t0 = os.clock(), core.now()
  for i = 1, n do
    local delay = (opts.cancel_min_ms + math.random() * (opts.cancel_max_ms - opts.cancel_min_ms)) / 1000
    local fire_at = core.now() + delay
    local flagged = false
    local cancel = function()
      if not flagged and core.now() >= fire_at then flagged = true end
      return flagged
    end
    local outcome, message, err = conn:call_tool("slow", args, { cancel = cancel })
    local returned = core.now()
    if outcome or not err or err.kind ~= "cancelled" then
      note_error(outcome and "the slow call was not cancelled" or message)
    end
    latencies[i] = returned - fire_at
  end
  conn:close()
else
  usage("--mode must be warm, leg, cold, list, objects or cancel")
end

local wall = core.now() - t0
local cpu = os.clock() - cpu0
table.sort(latencies)

local function pct(p)
  if #latencies == 0 then return 0 end
  local k = math.max(1, math.min(#latencies, math.ceil(p * #latencies)))
  return latencies[k] * 1000
end

local fields = {
  string.format('"client":"mcpclient","mode":"%s","n":%d', opts.mode, n),
  string.format('"wall_s":%.6f,"ops_per_s":%.3f', wall, wall > 0 and n / wall or 0),
  string.format('"p50_ms":%.4f,"p99_ms":%.4f,"max_ms":%.4f', pct(0.5), pct(0.99), pct(1)),
  string.format('"cpu_s":%.6f,"cpu_per_op_us":%.3f', cpu, n > 0 and cpu / n * 1e6 or 0),
  string.format('"peak_rss_kb":%d,"startup_cpu_ms":%.3f,"errors":%d', status_kb("VmHWM"), startup_cpu_ms, errors),
}
for key, value in pairs(extra) do fields[#fields + 1] = string.format('"%s":%d', key, value) end
if opts.mode == "list" then
  fields[#fields + 1] = string.format('"schemas":"%s","walk":"%s"', opts.schemas, opts.walk)
end
if opts.mode == "cancel" then
  -- Every latency, so bench/run.lua can pool the runs (with 50 samples, p99 is the maximum).
  local samples = {}
  for i, v in ipairs(latencies) do samples[i] = string.format("%.3f", v * 1000) end
  fields[#fields + 1] = '"samples":"' .. table.concat(samples, ";") .. '"'
end
io.write("{", table.concat(fields, ","), "}\n")
if errors > 0 then
  io.stderr:write("mcpclient_client: ", errors, " errors; the first: ", first_error, "\n")
  os.exit(1)
end
