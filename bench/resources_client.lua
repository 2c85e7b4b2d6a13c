--- mcpclient in the resource-listing benchmark (bench/resources.lua starts it; it is not a test).
--
--   lua5.4 bench/resources_client.lua --url URL [--lists N] [--warmup W] [--walk whole|pages]
--   One connection; W untimed, then N timed listings (every page, each resource under the text
--   rule, the walk's bounds checked): whole (the default) conn:list_resources(), the listing held
--   whole, then dropped; pages: conn:each_resource_page, each page counted and dropped.
--
-- Prints one JSON line: client, n, resources, cpu_s and cpu_per_list_ms (os.clock(): this
-- process's CPU, user + system, over the timed part), wall_s, peak_rss_kb (VmHWM),
-- rss_before_kb (VmRSS right before the first listing). Any error exits 1.
package.path = "./lua/?.lua;./lua/?/init.lua;" .. package.path
package.cpath = "./build/?.so;" .. package.cpath

local mcp = require "mcpclient"
local core = require "mcpclient.core"

local opts = { lists = 5, warmup = 1, walk = "whole" }
for i = 1, #arg, 2 do
  local key = arg[i]:match("^%-%-(%w+)$")
  if not key or arg[i + 1] == nil or (key ~= "url" and opts[key] == nil) then
    io.stderr:write("resources_client: bad arguments near ", tostring(arg[i]), "\n")
    os.exit(2)
  end
  opts[key] = (key == "url" or key == "walk") and arg[i + 1] or math.tointeger(tonumber(arg[i + 1]))
end

local function status_kb(field)
  local f = io.open("/proc/self/status", "r")
  if not f then return 0 end
  local text = f:read("a")
  f:close()
  return tonumber(text:match(field .. ":%s*(%d+)")) or 0
end

local conn = mcp.connect { url = opts.url, identifier = "bench", health = mcp.health.discard, budget = 60 }
local rss_before = status_kb("VmRSS")
local count = 0
local function list_once()
  local listed, message = 0, nil
  if opts.walk == "pages" then
    local listing, why = conn:each_resource_page(function(page) listed = listed + #page end)
    if not listing then listed, message = nil, why end
  else
    local resources
    resources, message = conn:list_resources()
    listed = resources and #resources
  end
  if not listed then
    io.stderr:write("resources_client: ", message, "\n")
    os.exit(1)
  end
  count = listed
end
for _ = 1, opts.warmup do list_once() end
collectgarbage()
local cpu0, t0 = os.clock(), core.now()
for _ = 1, opts.lists do list_once() end
local cpu, wall = os.clock() - cpu0, core.now() - t0
conn:close()
print(core.json.encode { client = "mcpclient", walk = opts.walk, n = opts.lists, resources = count, cpu_s = cpu,
  cpu_per_list_ms = cpu / opts.lists * 1000, wall_s = wall, peak_rss_kb = status_kb("VmHWM"),
  rss_before_kb = rss_before })
