--- How a warm call walks: function entries and switches between Lua files per warm call_tool.
--
--   lua5.4 bench/walk.lua [stdio|http|modern] [calls]
--
-- One connection to the C echo server (bench/stdio_echo over stdio, or bench/echo_server over
-- HTTP; both speak 2025-11-25), or with `modern` to the scripted leg of the specs
-- (spec/support/fake_server.lua, 2026-07-28, the HTTP channel over it), warmed by a few calls;
-- then `calls` call_tool echo under a debug hook that counts every "call" event: Lua function
-- entries, C function entries, and the switches between Lua source files (a Lua function entered
-- from a file other than the last Lua function's). Printed per call. The scripted leg's own
-- functions count as C (they stand for the leg in C). A measure of the code's shape, not a
-- benchmark (the hook slows every call).
package.path = "./lua/?.lua;./lua/?/init.lua;./spec/?.lua;" .. package.path
package.cpath = "./build/?.so;" .. package.cpath
local mcp = require "mcpclient"

local how = arg[1] or "stdio"
local calls = math.tointeger(tonumber(arg[2] or "")) or 1000

local server, options
if how == "modern" then
  local Fake = require "support.fake_server"
  local fake = Fake.new { modern = true }:will_return { supportedVersions = mcp.json.array { "2026-07-28" },
    capabilities = { tools = {} }, resultType = "complete" }
  for _ = 1, calls + 20 do
    fake:will_return { content = { { type = "text", text = "hello" } }, resultType = "complete" }
  end
  options = { url = "https://mcp.example.com/rpc", transport = fake, clock = fake.clock, protocol = "auto" }
elseif how == "http" then
  -- exec: the server is this process's child, and ends with it (--exit-with-parent)
  server = io.popen("exec bench/echo_server --port 0 --session --exit-with-parent", "r")
  local port = server:read("l"):match("listening (%d+)")
  options = { url = "http://127.0.0.1:" .. port .. "/mcp" }
else
  options = { command = { "bench/stdio_echo" } }
end
options.identifier = "walk"
options.health = mcp.health.discard
options.log = function() end
options.protocol = options.protocol or "2025-11-25"

local conn = mcp.connect(options)
local function echo()
  local outcome, message = conn:call_tool("echo", { message = "hello" })
  assert(outcome and type(outcome.text) == "string", tostring(message or (outcome and outcome.text)))
end
for _ = 1, 20 do echo() end

local lua_entries, c_entries, switches, last = 0, 0, 0, nil
local files = {}
debug.sethook(function()
  local info = debug.getinfo(2, "S")
  if info.what == "C" or info.short_src:find("spec/support/", 1, true) then
    c_entries = c_entries + 1
    return
  end
  lua_entries = lua_entries + 1
  local source = info.short_src
  files[source] = (files[source] or 0) + 1
  if last and source ~= last then switches = switches + 1 end
  last = source
end, "c")
for _ = 1, calls do echo() end
debug.sethook()
conn:close()

local by_file = {}
for source, n in pairs(files) do by_file[#by_file + 1] = string.format("%s %.1f", source, n / calls) end
table.sort(by_file)
print(string.format("%s: %.1f Lua entries, %.1f C entries, %.1f switches between Lua files per warm call",
  how, lua_entries / calls, c_entries / calls, switches / calls))
for _, line in ipairs(by_file) do print("  " .. line) end
