--- One connection and one ping, run as its own process by
--- spec/integration/gate_names_spec.lua (under `unshare -m`, with a private
--- /etc/hosts or /etc/resolv.conf bind-mounted over the real one).
-- GATE_CHILD is JSON: { url, allow = { addresses the gate allows }, budget,
-- cancel_after (seconds, optional), locale (optional) }. Prints one JSON
-- object: { ok, kind, message, asked = { "host address", ... }, seconds }.
local mcp = require "mcpclient"
local core = require "mcpclient.core"

local json = core.json
local config = json.decode(assert(os.getenv("GATE_CHILD"), "GATE_CHILD is not set"))
if config.locale then assert(os.setlocale(config.locale), "the locale " .. config.locale .. " is not available") end

local allowed, asked = {}, {}
for _, address in ipairs(config.allow or {}) do allowed[address] = true end

local conn = mcp.connect {
  url = config.url, identifier = "gate", health = mcp.health.discard, budget = config.budget or 5,
  auth = { placement = "bearer", credential = "env:GATE_TOKEN" },
  host_gate = function(host, address)
    asked[#asked + 1] = host .. " " .. address
    return allowed[address] == true
  end,
}
local started = core.monotonic_ns()
local function elapsed() return (core.monotonic_ns() - started) / 1e9 end
local cancel = config.cancel_after and function() return elapsed() >= config.cancel_after end or nil
local ok, message, err = conn:ping { cancel = cancel }
local seconds = elapsed()
io.write(json.encode { ok = ok ~= nil, kind = err and err.kind or json.null, message = message or json.null,
  detail = err and err.detail or json.null, asked = json.array(asked), seconds = seconds }, "\n")
