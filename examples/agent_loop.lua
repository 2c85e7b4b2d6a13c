--- A complete agent loop against a real MCP server, with a scripted "model".
--
--   lua5.4 examples/agent_loop.lua <server url> [store path]
--
-- (Run from the project root with LUA_PATH="./lua/?.lua;./lua/?/init.lua;;"
-- LUA_CPATH="./build/?.so;;", as `make demo` does.) Works against
-- server-everything and the SDK peer (spec/peers/sdk-server.mjs).
--
-- What it shows, in order: a store; the server added twice (once without and
-- once with the approval flag), its catalogue imported and a few tools
-- switched on; a run for an administrator in a local trust zone; the gate
-- deciding what the model is offered; tool calls through run:turn — an
-- executed call, a call that needs approval (the host approves, the run
-- resumes), a switched-off tool (refused, one governance row), an unknown
-- tool; and at the end the audit trail and the governance log.
local catalogue = require "mcpclient.agent.catalogue"
local run = require "mcpclient.agent.run"
local store_module = require "mcpclient.agent.store"

local url = arg[1] or error("usage: lua5.4 examples/agent_loop.lua <server url> [store path]")
local path = arg[2] or ":memory:"

local function say(fmt, ...) print(string.format(fmt, ...)) end

-- Far-side text on a terminal: one line, control characters out, bounded.
local function shown(text, limit)
  text = tostring(text):gsub("%c+", " ")
  limit = limit or 70
  if #text > limit then text = text:sub(1, limit - 3) .. "..." end
  return text
end

---------------------------------------------------------------------------
-- The operator's part: servers, catalogue, switches
---------------------------------------------------------------------------

local store <close> = assert(store_module.open(path))

-- The same server twice: "demo" runs without asking, every call to "gated" needs a human.
local servers = {}
for _, s in ipairs { { identifier = "demo", approval = "0" }, { identifier = "gated", approval = "1" } } do
  local uid = assert(store:add_server {
    identifier = s.identifier, name = "Example server (" .. s.identifier .. ")", url = url,
    data_class = "publicContent", requires_approval = s.approval, enabled = true,
  })
  local report = catalogue.import(store, assert(store:server(uid)))
  if report.refused then error("the import was refused: " .. report.skip_reasons[1]) end
  say("imported %d tools from %s (%d skipped)", report.imported, s.identifier, report.skipped)
  servers[s.identifier] = uid
end

-- Imported tools are off until an operator switches them on: a server's catalogue is the server's
-- word, and no tool reaches a model before a person has chosen it.
local remote = {}
for _, row in ipairs(assert(store:live_tools_of(servers.demo))) do remote[row.remote_name] = row.tool_name end
local sum_tool = remote["get-sum"] or remote.add or error("the server has neither get-sum nor add")
local echo_tool = remote.echo or error("the server has no echo tool")
assert(store:set_tool_enabled(echo_tool, true))
assert(store:set_tool_enabled(sum_tool, true))
assert(store:set_tool_enabled("mcp_gated_echo", true))
local switched_off
for _, name in pairs(remote) do
  if name ~= echo_tool and name ~= sum_tool and (not switched_off or name < switched_off) then switched_off = name end
end

---------------------------------------------------------------------------
-- The run
---------------------------------------------------------------------------

local r = assert(run.start(store, {
  user = { name = "ops", uid = 1, admin = true },
  configuration = { identifier = "local-model", provider = "ollama", model = "scripted" },
  providers = { ollama = { zone = "local" } },
}))
say("\nrun %s (row %s, lease held by %s)", r.uuid, tostring(r.uid), tostring(r.owner))

local offered = {}
for _, spec in ipairs(r:tools()) do offered[#offered + 1] = spec.name end
table.sort(offered)
say("the gate offers the model: %s", table.concat(offered, ", "))

-- The scripted model: one step per turn, reading what the last turn answered.
local script = {
  function() return { { name = echo_tool, arguments = { message = "hello from the agent loop" } } } end,
  function() return { { name = sum_tool, arguments = { a = 2, b = 40 } } } end,
  function(last)
    return { { name = echo_tool, arguments = { message = "I read: " .. last[1].text } },
      { name = "mcp_gated_echo", arguments = { message = "a call a human approves" } } }
  end,
  function() return { { name = switched_off or "mcp_demo_unavailable", arguments = {} } } end,
  function() return { { name = "mcp_demo_does_not_exist", arguments = {} } } end,
}

local last = {}
for round, step in ipairs(script) do
  local calls = step(last)
  local names = {}
  for i, call in ipairs(calls) do names[i] = call.name end
  say("\n[model, turn %d] calls %s", round, table.concat(names, " and "))
  local results = r:turn(calls)
  if r.status == "waiting_approval" then
    for _, p in ipairs(r:pending()) do say("[host] approval asked for %s", p.name) end
    say("[host] approves")
    r:approve()
    results = r:resume()
  end
  for i, result in ipairs(results) do
    say("[tool] %s -> %s%s", calls[i].name, result.is_error and "ERROR " or "", shown(result.text))
  end
  last = results
  if r.status ~= "running" then
    say("the run stopped: %s", r.error and r.error.message or r.status)
    break
  end
end
say("\n[model] The answer is 42.")
say("run %s ended %s", r.uuid, r:finish())

---------------------------------------------------------------------------
-- The audit trail
---------------------------------------------------------------------------

say("\naudit trail of run %s:", r.uuid)
for _, e in ipairs(assert(r:events())) do
  local d = e.data
  if e.kind == "tool" then
    say("  #%d round %d  %-32s %8.2f ms  %s  %s", e.sequence, e.round, d.toolName, d.durationMs,
      d.toolIsError and "error" or "ok   ", shown(d.toolResult, 50))
  else
    say("  #%d round %d  %s", e.sequence, e.round, e.kind)
  end
end
say("\ngovernance events (refusals only):")
for _, g in ipairs(assert(store:governance_events())) do
  say("  %s %s %s (%s)", g.decision, g.reason, g.tool_name, g.detail)
end
say("\nthe server's liveness:")
for _, s in ipairs(assert(store:servers())) do
  say("  %-6s last contact %s, %d ms", s.identifier, s.last_contact > 0 and os.date("!%H:%M:%S", s.last_contact)
    or "never", s.last_latency_ms)
end
