-- The live conformance run (mcpclient.agent.check, `mcpclient check`) from busted: every check of the
-- per-connection suite that a real server can answer, one `it` each, through the whole client.
--
-- Against your own server:
--   MCPCLIENT_CHECK_URL=https://mcp.example.com/mcp busted spec/conformance/live_spec.lua
-- or one started over stdio (its argv split on blanks, never run through a shell):
--   MCPCLIENT_CHECK_COMMAND="npx -y @modelcontextprotocol/server-memory" busted spec/conformance/live_spec.lua
-- (optional: MCPCLIENT_CHECK_CALL=<tool> and MCPCLIENT_CHECK_ARGUMENTS='<JSON object>' name a tool the
-- run may call; MCPCLIENT_CHECK_BUDGET=<seconds>). A check that does not apply is reported pending,
-- with its reason. Without MCPCLIENT_CHECK_URL, the run goes against the official SDK server and
-- server-everything (spec/support/peers.lua), as part of the integration specs.
local mcp = require "mcpclient"
local check = require "mcpclient.agent.check"

local json = mcp.json

-- Run every check against the server `target_of()` names ({ url = ... } or { command = argv });
-- each result becomes an `it`.
-- `known` maps a check id to a text its failure must name: a finding about that server, asserted so the
-- spec turns red when the finding goes away and the entry must be removed.
local function live(label, target_of, call, known)
  describe("live conformance against " .. label, function()
    local results
    local function results_for()
      if results then return results end
      local target = target_of()
      results = check.run(function(recorder, budget)
        return mcp.connect { url = target.url, command = target.command, identifier = "live", health = recorder,
          budget = budget or tonumber(os.getenv("MCPCLIENT_CHECK_BUDGET") or "") }
      end, { call = call })
      return results
    end
    for i, entry in ipairs(check.list) do
      it(entry.id .. ": " .. entry.name, function()
        local r = results_for()[i]
        if r.status == check.NA then return pending(r.detail) end
        if known and known[entry.id] then
          assert.equal(check.FAILED, r.status, "the known finding is gone: " .. r.detail)
          assert.truthy(r.detail:find(known[entry.id], 1, true), r.detail)
          return
        end
        assert.equal(check.PASSED, r.status, r.detail)
      end)
    end
  end)
end

local url = os.getenv("MCPCLIENT_CHECK_URL")
local command_line = os.getenv("MCPCLIENT_CHECK_COMMAND")
if (url and url ~= "") or (command_line and command_line ~= "") then
  local call
  local name = os.getenv("MCPCLIENT_CHECK_CALL")
  if name and name ~= "" then
    call = { name = name, arguments = json.decode(os.getenv("MCPCLIENT_CHECK_ARGUMENTS") or "{}") }
  end
  if url and url ~= "" then
    live(url, function() return { url = url } end, call)
  else
    local argv = {}
    for word in command_line:gmatch("%S+") do argv[#argv + 1] = word end
    live(command_line, function() return { command = argv } end, call)
  end
  return
end

local peers = require "support.peers"

for _, case in ipairs {
  { kind = "everything" },
  -- The SDK's count_args tool (z.object({}).passthrough()) declares "additionalProperties": {},
  -- which the normaliser reads as true: every check passes here too.
  { kind = "sdk-session", call = { name = "echo", arguments = { message = "hi" } } },
} do
  describe("#integration", function()
    local peer
    setup(function()
      peers.require_available()
      peer = peers.start(case.kind)
    end)
    teardown(function() if peer then peer:stop() end end)
    live(case.kind, function() return { url = peer.url } end, case.call, case.known)
  end)
end

-- The same run over stdio: each server started by the connection itself.
for _, case in ipairs {
  { label = "server-everything (stdio)", argv = { "server-everything/dist/index.js", "stdio" },
    call = { name = "echo", arguments = { message = "hi" } } },
  { label = "server-memory (stdio)", argv = { "server-memory/dist/index.js" },
    call = { name = "read_graph", arguments = {} } },
  { label = "the SDK v2's serveStdio (stdio, 2026-07-28)", script = "sdk2-stdio-server.mjs",
    call = { name = "echo", arguments = { message = "hi" } } },
} do
  describe("#integration", function()
    setup(function() peers.require_available() end)
    live(case.label, function()
      if case.script then return { command = { "node", peers.dir .. "/" .. case.script } } end
      local argv = { "node", peers.node_modules .. "/@modelcontextprotocol/" .. case.argv[1] }
      for i = 2, #case.argv do argv[#argv + 1] = case.argv[i] end
      return { command = argv }
    end, case.call)
  end)
end
