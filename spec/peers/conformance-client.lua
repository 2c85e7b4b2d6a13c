--- The mcpclient side of the official conformance suite (@modelcontextprotocol/conformance 0.1.16,
--- client scenarios), run by scripts/official-conformance.
--
-- usage (by the harness): lua5.4 spec/peers/conformance-client.lua <server url>
--   The harness runs the command through /bin/sh with the URL of its own test server appended as
--   the last argument, and names the scenario in MCP_CONFORMANCE_SCENARIO. Exit 0 = did the work.
--   The verdict is the harness's (its exit code), from what it saw on the wire.
--
-- What each scenario's test server does (read from the suite and seen on the wire with the SDK
-- client as a stand-in):
--   initialize  URL http://localhost:<port> (no /mcp path). Checks only the initialize request:
--               protocolVersion 2025-06-18 or 2025-11-25, non-empty clientInfo.name and .version.
--               Answers initialize with JSON (it echoes the version; no session id, capabilities {}),
--               tools/list with no tools, and ANY other POST — even notifications/initialized —
--               with 200 application/json {"jsonrpc":"2.0","result":{}} (no id at all for a
--               notification; id echoed for a request such as ping). A GET (or a body that is not
--               JSON) gets 400 -32700. We do: handshake + ping.
--   tools_call  URL http://localhost:<port>/mcp. The SDK's stateless transport behind express
--               (a new server per POST, no session id, event-stream answers with content-length;
--               notifications 202; GET /mcp 404 text/html from express). One tool:
--                 add_numbers {a:number, b:number} (both required)
--                 -> text "The sum of <a> and <b> is <a+b>"
--               The check passes when add_numbers is called with two numbers. We call {a=2, b=3}.
--   sse-retry   URL http://localhost:<port> (no /mcp path). Answers initialize with JSON,
--               protocolVersion 2025-03-26 (whatever was asked) and mcp-session-id
--               session-<ms>; tools/list (JSON) -> one tool:
--                 test_reconnection {} (no properties) -> text "Reconnection test completed successfully"
--               tools/call answers 200 text/event-stream holding only a priming event
--               "id: event-N\nretry: 500\ndata: \n\n" and ends the stream 50 ms later. The client
--               must wait the retry interval, then GET the same URL (Accept: text/event-stream,
--               the session id, Last-Event-ID: event-N); that GET stream carries a priming event
--               (id event-N+1, retry 500) and then "event: message\nid: event-N+2\ndata: <result>"
--               and is never closed by the server. Every GET gets such a stream (a standalone
--               GET after initialize too; only GETs carrying Last-Event-ID are judged). Checks:
--               a GET came; the last GET came 450..700 ms after the close (700..1000 = WARNING,
--               which fails the run; earlier or later = FAILURE); the first Last-Event-ID seen is
--               present. Notifications get 202; DELETE gets 405 text/plain.
--   elicitation-sep1034-client-defaults  URL http://localhost:<port>/mcp. An SDK session server; its
--               tool test_client_elicitation_defaults sends elicitation/create on the standalone GET
--               stream (tied to no request) while the tools/call waits. The checks pass when the
--               answer is "accept" with every field of the requested schema that has a default
--               filled with it. We supply a handler that does exactly that.
--
-- The harness servers listen on 127.0.0.1 only (scripts/official-conformance loads the loopback
-- preload), but their URLs say "localhost": we dial 127.0.0.1 so a resolver that puts ::1 first
-- cannot send us to an address nobody listens on.
local dir = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
local root = dir .. "/../.."
package.path = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. package.path
package.cpath = root .. "/build/?.so;" .. package.cpath

-- The auth/* scenarios: the suite's authorization server answers the authorization request at once
-- with a 302 to the redirect URI (no person), so the opt-in helper that reads that redirect's Location
-- stands in for the host's authorize callback. Credentials and keys the scenario hands over in
-- MCP_CONFORMANCE_CONTEXT (JSON) become oauth options here; the library never reads that variable.
-- Secrets stay references ("context:NAME") that the resolver answers from the context.
local CIMD_URL = "https://conformance-test.local/client-metadata.json"

local function oauth_options(mcp, scenario, context)
  local oauth = {
    authorize = mcp.oauth.follow_immediate_redirect, client_metadata_url = CIMD_URL, offline_access = true,
    redirect_uri = "http://localhost:3000/callback", client_id = context.client_id,
    client_secret = context.client_secret and "context:client_secret" or nil,
  }
  if context.idp_id_token then
    oauth.grant = "cross_app_access"
    oauth.idp = { token_endpoint = context.idp_token_endpoint, id_token = "context:idp_id_token",
      client_id = context.idp_client_id }
  elseif scenario:match("^auth/client%-credentials") then
    oauth.grant = "client_credentials"
    if context.private_key_pem then
      oauth.private_key = "context:private_key_pem"
      oauth.signing_algorithm = context.signing_algorithm
    end
  end
  local resolver = function(reference)
    local name = reference:match("^context:(.+)$")
    return name and context[name] or nil
  end
  return oauth, resolver
end

local function main()
  local url = arg[#arg]
  if not url or not url:match("^https?://") then error("usage: conformance-client.lua <server url>") end
  local scenario = os.getenv("MCP_CONFORMANCE_SCENARIO") or ""
  local auth_scenario = scenario:match("^auth/") ~= nil
  if not auth_scenario then
    -- The metadata of the auth scenarios names "localhost": their URLs are kept as given, so the
    -- resource check compares like with like.
    url = url:gsub("^(https?://)localhost([:/])", "%1127.0.0.1%2"):gsub("^(https?://)localhost$", "%1127.0.0.1")
  end

  local mcp = require "mcpclient"
  local options = { url = url, identifier = "conformance", health = mcp.health.discard }
  if auth_scenario then
    local context = {}
    local text = os.getenv("MCP_CONFORMANCE_CONTEXT")
    if text and text ~= "" then context = assert(mcp.json.decode(text), "MCP_CONFORMANCE_CONTEXT is not JSON") end
    options.oauth, options.resolver = oauth_options(mcp, scenario, context)
  end
  if scenario == "elicitation-sep1034-client-defaults" then
    -- The "user" accepts every default the requested schema offers.
    options.on_elicitation = function(request)
      local content = {}
      local schema = type(request.requestedSchema) == "table" and request.requestedSchema or {}
      for name, property in pairs(type(schema.properties) == "table" and schema.properties or {}) do
        if type(property) == "table" and property.default ~= nil then content[name] = property.default end
      end
      return { action = "accept", content = content }
    end
  end
  -- Private and loopback addresses are allowed by default: 127.0.0.1 is reachable.
  local conn = mcp.connect(options)

  local function tool_named(name)
    local tools = assert(conn:list_tools())
    for _, t in ipairs(tools) do
      if t.name == name then return t end
    end
    error(string.format("the server lists no tool %q", name))
  end

  if scenario == "initialize" then
    assert(conn:ping())
  elseif scenario == "tools_call" then
    tool_named("add_numbers")
    local out = assert(conn:call_tool("add_numbers", { a = 2, b = 3 }))
    if out.is_error then error("add_numbers answered a tool error: " .. tostring(out.text)) end
    if not tostring(out.text):find("5", 1, true) then
      error("add_numbers did not answer 5: " .. tostring(out.text))
    end
  elseif scenario == "sse-retry" then
    tool_named("test_reconnection")
    local out = assert(conn:call_tool("test_reconnection", {}))
    if out.is_error then error("test_reconnection answered a tool error: " .. tostring(out.text)) end
  elseif scenario == "elicitation-sep1034-client-defaults" then
    tool_named("test_client_elicitation_defaults")
    local out = assert(conn:call_tool("test_client_elicitation_defaults", {}))
    if out.is_error or not tostring(out.text):find("Elicitation completed", 1, true) then
      error("the elicitation was not completed: " .. tostring(out.text))
    end
  elseif auth_scenario then
    -- Every auth scenario's server lists "test-tool"; calling it is what needs the widest scope.
    local tools, message = conn:list_tools()
    if not tools then error(message) end
    for _, t in ipairs(tools) do
      if t.name == "test-tool" then
        local out, why = conn:call_tool("test-tool", {})
        if not out then error(why) end
      end
    end
  else
    error(string.format("unknown scenario %q (MCP_CONFORMANCE_SCENARIO)", scenario))
  end
  conn:close()
end

local ok, err = pcall(main)
if not ok then
  io.stderr:write("conformance-client: ", tostring(err), "\n")
  os.exit(1)
end
os.exit(0)
