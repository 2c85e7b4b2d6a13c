--- The stdio benchmark: warm tools/call over stdio, mcpclient against the official TypeScript
--- SDK clients' stdio transports (v1 and v2), every client spawning the same server in the same
--- run, plus two floors (bench/stdio_floor.c): a line written, a line read over a pipe to `cat`,
-- which answers within the write; and a C client that writes each tools/call with one write and
-- sleeps in a blocking poll until the same server answers, so every call pays the sleep and the
-- wake-up that server's delay forces on any client.
--
--   make bench-stdio            (or: lua5.4 bench/stdio.lua [CALLS [ROUNDS]])
--   BENCH_RESULTS=bench/RESULTS.md make bench-stdio   also replaces the page's stdio section
--
-- The server is spec/peers/sdk2-stdio-server.mjs (the SDK v2's serveStdio, which serves both
-- eras), so each client speaks the era it speaks by default and mcpclient both. Rounds are
-- interleaved (client A, B, C, A, B, C, ...) so machine noise falls on every client alike; each
-- figure is the median of the rounds. Per call: client CPU (its own process: user + system),
-- wall; per client: peak RSS and the time from start to the first answer (spawn, node's start,
-- the opening, one call). Prints a markdown section (BENCH_OUT, when set, gets it too).
local calls = math.tointeger(tonumber(arg[1] or "")) or 2000
local rounds = math.tointeger(tonumber(arg[2] or "")) or 5
local server = "node spec/peers/sdk2-stdio-server.mjs"

local function run(cmd)
  local p = assert(io.popen(cmd .. " 2>/dev/null"))
  local out = p:read("a")
  p:close()
  local line = out:match("(%b{})%s*$")
  assert(line, "no report from: " .. cmd .. "\n" .. out)
  return line
end

package.path = "./lua/?.lua;./lua/?/init.lua;" .. package.path
package.cpath = "./build/?.so;" .. package.cpath
local json = require("mcpclient.core").json

local OURS = "lua5.4 bench/stdio_client.lua --calls %d --protocol "
local CLIENTS = {
  { name = "mcpclient (2025 era)", cmd = OURS .. "2025-11-25 -- " .. server },
  { name = "mcpclient (2026-07-28)", cmd = OURS .. "2026-07-28 -- " .. server },
  { name = "SDK v1 client (2025 era)", cmd = "node bench/sdk_stdio_client.mjs --sdk 1 --calls %d -- " .. server },
  { name = "SDK v2 client (2025 era)", cmd = "node bench/sdk_stdio_client.mjs --sdk 2 --calls %d -- " .. server },
  { name = "SDK v2 client (2026-07-28)",
    cmd = "node bench/sdk_stdio_client.mjs --sdk 2 --era modern --calls %d -- " .. server },
  { name = "floor (C, cat over a pipe)", cmd = "bench/stdio_floor %d" },
  { name = "floor (C, blocking poll, the same server)", cmd = "bench/stdio_floor %d -- " .. server },
}

local samples = {}
for _ = 1, rounds do
  for i, client in ipairs(CLIENTS) do
    local report = json.decode(run(string.format(client.cmd, calls)))
    assert(report.errors == 0, client.name .. ": " .. tostring(report.first_error))
    samples[i] = samples[i] or {}
    table.insert(samples[i], report)
  end
end

local function median(list, field)
  local v = {}
  for _, r in ipairs(list) do v[#v + 1] = r[field] end
  table.sort(v)
  local m = #v // 2
  return #v % 2 == 1 and v[m + 1] or (v[m] + v[m + 1]) / 2
end

local lines = {
  string.format("%d warm `tools/call` echo per run, %d interleaved rounds, medians; server: the SDK v2's "
    .. "serveStdio (node); %s.", calls, rounds, os.date("!%Y-%m-%d %H:%M UTC")),
  "",
  "| client | CPU per call (µs) | wall per call (µs) | peak RSS (MiB) | start to first answer (ms) |",
  "|---|---:|---:|---:|---:|",
}
for i, client in ipairs(CLIENTS) do
  local s = samples[i]
  lines[#lines + 1] = string.format("| %s | %.1f | %.0f | %.1f | %.0f |", client.name, median(s, "cpu_per_op_us"),
    median(s, "wall_per_op_us"), median(s, "peak_rss_kb") / 1024, median(s, "first_answer_ms"))
end
local ours, sdk1, sdk2 = samples[1], samples[3], samples[4]
lines[#lines + 1] = ""
local function times(other, field) return median(other, field) / median(ours, field) end
lines[#lines + 1] = string.format("mcpclient (2025 era) against the SDK v1 client: 1/%.1f of its CPU per call, "
  .. "1/%.1f of its peak RSS; against the SDK v2 client: 1/%.1f and 1/%.1f.",
  times(sdk1, "cpu_per_op_us"), times(sdk1, "peak_rss_kb"), times(sdk2, "cpu_per_op_us"), times(sdk2, "peak_rss_kb"))
local woken = samples[#CLIENTS]
lines[#lines + 1] = string.format("The same server's floor (a C client that only writes, sleeps in poll and reads): "
  .. "%.1f µs of CPU per call, %.0f%% of mcpclient's; 1/10 of the SDK v1 client's CPU per call is %.1f µs.",
  median(woken, "cpu_per_op_us"), 100 * median(woken, "cpu_per_op_us") / median(ours, "cpu_per_op_us"),
  median(sdk1, "cpu_per_op_us") / 10)
local text = table.concat(lines, "\n") .. "\n"
io.write(text)
-- The page's section between the stdio markers (appended when it has none); bench/run.lua keeps
-- it when it rewrites the page.
local page = os.getenv("BENCH_RESULTS")
if page then
  local f = assert(io.open(page))
  local old = f:read("a")
  f:close()
  local section = "<!-- stdio:begin -->\n## Warm tools/call over stdio\n\n`make bench-stdio`: " .. text
    .. "<!-- stdio:end -->"
  local s = old:find("<!-- stdio:begin -->", 1, true)
  local _, e = old:find("<!-- stdio:end -->", s or 1, true)
  local new = s and e and (old:sub(1, s - 1) .. section .. old:sub(e + 1)) or (old .. "\n" .. section .. "\n")
  f = assert(io.open(page, "w"))
  f:write(new)
  f:close()
end
