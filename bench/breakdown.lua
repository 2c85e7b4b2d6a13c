--- Where mcpclient's time goes, layer by layer (a profiling aid for bench/PROFILE.md, not a test).
--
--   lua5.4 bench/breakdown.lua --url URL [--calls N] [--lists N]
--   (URL: a bench/echo_server with a catalogue, e.g. --tools 4900 --page-size 100; run from the
--   repository root.)
--
-- Each row adds one layer to the one above it and reports CPU (os.clock) and wall time per
-- operation, so the difference between two rows is what that layer costs:
--   warm call: the bare leg (core.http_leg():send, libcurl only) -> + encoding the request ->
--              + core.rpc_classify of the answer -> + core.flatten -> conn:call_tool (everything)
--   listing:   the bare leg per page -> + rpc_classify ordered (key order kept, as list_tools does)
--              -> rpc_classify unordered -> core.json.decode alone -> core.normalise_schema per
--              tool -> conn:list_tools() (everything).
package.path = "./lua/?.lua;./lua/?/init.lua;" .. package.path
package.cpath = "./build/?.so;" .. package.cpath

local mcp = require "mcpclient"
local core = require "mcpclient.core"
local json = core.json

local opts = { calls = 5000, lists = 3 }
for i = 1, #arg, 2 do
  local key = arg[i]:match("^%-%-(%w+)$")
  if not key or not arg[i + 1] then error("usage: breakdown.lua --url URL [--calls N] [--lists N]") end
  opts[key] = key == "url" and arg[i + 1] or math.tointeger(tonumber(arg[i + 1]))
end
assert(opts.url, "--url is required")

local function measure(label, n, per, fn)
  collectgarbage()
  local c0, t0 = os.clock(), core.now()
  for i = 1, n do fn(i) end
  local cpu, wall = os.clock() - c0, core.now() - t0
  io.write(string.format("%-58s %10.1f us CPU/%s %10.1f us wall/%s\n", label, cpu / n * 1e6, per,
    wall / n * 1e6, per))
end

local headers = { "Content-Type: application/json", "Accept: application/json, text/event-stream",
  "MCP-Protocol-Version: 2025-11-25" }
local leg = core.http_leg()
local request = { method = "POST", url = opts.url, headers = headers, timeout_ms = 20000,
  connect_timeout_ms = 10000, max_bytes = 2 * 1024 * 1024 }
local call_body = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":'
  .. '{"message":"hello"}}}'

io.write("warm call (", opts.calls, " each)\n")
request.body = call_body
for _ = 1, 200 do assert(leg:send(request)) end
measure("1 leg:send, fixed body", opts.calls, "call", function()
  local r = assert(leg:send(request))
  assert(r.status == 200)
end)
measure("2 + encode params, build body and headers", opts.calls, "call", function(i)
  local params = { name = "echo", arguments = { message = "hello" } }
  local body = '{"jsonrpc":"2.0","id":' .. i .. ',"method":' .. json.encode("tools/call") .. ',"params":'
    .. json.try_encode(params) .. '}'
  local r = assert(leg:send { method = "POST", url = opts.url, headers = { headers[1], headers[2], headers[3] },
    body = body, timeout_ms = 20000, connect_timeout_ms = 10000, max_bytes = 2 * 1024 * 1024 })
  assert(r.status == 200)
end)
measure("3 + rpc_classify the answer", opts.calls, "call", function(i)
  local params = { name = "echo", arguments = { message = "hello" } }
  local body = '{"jsonrpc":"2.0","id":' .. i .. ',"method":' .. json.encode("tools/call") .. ',"params":'
    .. json.try_encode(params) .. '}'
  local r = assert(leg:send { method = "POST", url = opts.url, headers = { headers[1], headers[2], headers[3] },
    body = body, timeout_ms = 20000, connect_timeout_ms = 10000, max_bytes = 2 * 1024 * 1024 })
  local kind, result = core.rpc_classify(r.body, i)
  assert(kind == "result" and result)
end)
measure("4 + core.flatten the content", opts.calls, "call", function(i)
  local params = { name = "echo", arguments = { message = "hello" } }
  local body = '{"jsonrpc":"2.0","id":' .. i .. ',"method":' .. json.encode("tools/call") .. ',"params":'
    .. json.try_encode(params) .. '}'
  local r = assert(leg:send { method = "POST", url = opts.url, headers = { headers[1], headers[2], headers[3] },
    body = body, timeout_ms = 20000, connect_timeout_ms = 10000, max_bytes = 2 * 1024 * 1024 })
  local kind, result = core.rpc_classify(r.body, i)
  assert(kind == "result")
  assert(core.flatten(result.content) == "hello")
end)
leg:close()
local conn = mcp.connect { url = opts.url, identifier = "bench", health = mcp.health.discard }
for _ = 1, 200 do assert(conn:call_tool("echo", { message = "hello" })) end
measure("5 conn:call_tool (the whole client)", opts.calls, "call", function()
  assert(conn:call_tool("echo", { message = "hello" }).text == "hello")
end)

-- Where call_tool's own time goes: the C entry points it calls, timed from inside the client
-- (wrapped for this measurement only), and the rest, which is the client's Lua.
do
  local spent = { send = 0, classify = 0, flatten = 0, encode = 0 }
  local now = core.now
  local function timed(key, fn)
    return function(...)
      local t = now()
      local a, b, c, d = fn(...)
      spent[key] = spent[key] + (now() - t)
      return a, b, c, d
    end
  end
  -- a connection of its own over a timed leg (connect's transport seam), warmed like the one above
  local real_leg = core.http_leg()
  local real_send = timed("send", function(req) return real_leg:send(req) end)
  local timed_conn = mcp.connect { url = opts.url, identifier = "bench", health = mcp.health.discard,
    transport = { send = function(_, req) return real_send(req) end, close = function() real_leg:close() end } }
  for _ = 1, 200 do assert(timed_conn:call_tool("echo", { message = "hello" })) end
  spent.send = 0
  local saved = { rpc_classify = core.rpc_classify, flatten = core.flatten, try_encode = json.try_encode }
  core.rpc_classify = timed("classify", saved.rpc_classify)
  core.flatten = timed("flatten", saved.flatten)
  json.try_encode = timed("encode", saved.try_encode)
  local t0 = now()
  for _ = 1, opts.calls do assert(timed_conn:call_tool("echo", { message = "hello" })) end
  local total = now() - t0
  core.rpc_classify, core.flatten, json.try_encode = saved.rpc_classify, saved.flatten, saved.try_encode
  timed_conn:close()
  local per = function(x) return x / opts.calls * 1e6 end
  io.write(string.format("6 inside call_tool (wall us/call): leg:send %.1f, rpc_classify %.1f, flatten %.1f,"
    .. " try_encode %.1f, the rest (Lua) %.1f, total %.1f\n", per(spent.send), per(spent.classify),
    per(spent.flatten), per(spent.encode), per(total - spent.send - spent.classify - spent.flatten - spent.encode),
    per(total)))
end

io.write("\nlisting (", opts.lists, " each)\n")
leg = core.http_leg()
local pages = {}
local function page_body(cursor, id)
  return '{"jsonrpc":"2.0","id":' .. id .. ',"method":"tools/list","params":'
    .. (cursor and ('{"cursor":"' .. cursor .. '"}') or "{}") .. "}"
end
do
  local cursor, id = nil, 1
  repeat
    request.body = page_body(cursor, id)
    local r = assert(leg:send(request))
    pages[#pages + 1] = { body = r.body, id = id, request = request.body }
    local _, result = core.rpc_classify(r.body, id)
    cursor = result.nextCursor
    id = id + 1
  until not cursor
end
local bytes = 0
for _, p in ipairs(pages) do bytes = bytes + #p.body end
io.write(string.format("(%d pages, %.1f MB of answers)\n", #pages, bytes / 1e6))
measure("1 leg:send every page", opts.lists, "listing", function()
  for _, p in ipairs(pages) do
    request.body = p.request
    assert(leg:send(request))
  end
end)
measure("2 rpc_classify every page, ordered (no transfer)", opts.lists, "listing", function()
  for _, p in ipairs(pages) do assert(core.rpc_classify(p.body, p.id, true) == "result") end
end)
measure("3 rpc_classify every page, unordered (no transfer)", opts.lists, "listing", function()
  for _, p in ipairs(pages) do assert(core.rpc_classify(p.body, p.id) == "result") end
end)
measure("4 json.decode every page (no transfer)", opts.lists, "listing", function()
  for _, p in ipairs(pages) do assert(json.decode(p.body)) end
end)
local tools = {}
for _, p in ipairs(pages) do
  local _, result = core.rpc_classify(p.body, p.id, true)
  for _, t in ipairs(result.tools) do tools[#tools + 1] = t end
end
measure("5 normalise_schema every tool (decoded ordered)", opts.lists, "listing", function()
  for _, t in ipairs(tools) do assert(core.normalise_schema(t.inputSchema)) end
end)
measure("6 conn:list_tools() (the whole client, no normalising)", opts.lists, "listing", function()
  assert(#assert(conn:list_tools()) == #tools)
end)
leg:close()
conn:close()
