--- The mcpclient side of the official conformance suite (@modelcontextprotocol/conformance 0.1.16
--- and 0.2.0-alpha.12, every client scenario), run by scripts/official-conformance. It uses only
--- the library's public API, as a new client author would.
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
--   The 0.2.0 scenarios (their servers judge the wire; this client does what each asks):
--   request-metadata, http-standard-headers  call every listed tool with what its schema requires
--   http-custom-headers    the calls MCP_CONFORMANCE_CONTEXT names (toolCalls), arguments as given
--   http-invalid-tool-headers  try every listed tool: the library refuses those with an invalid
--               x-mcp-header marking (invalid_schema) and sends nothing; exactly one is callable
--   json-schema-ref-no-deref  list the tools (a schema's network $ref must never be fetched)
--   json-schema-2020-12-preservation  send json_schema_2020_12_tool's inputSchema, as received, to
--               json_schema_echo as arguments.schema
--   sep-2322-client-request-state  call the four test_mrtr_* tools (one while another waits for
--               input); the elicitation handler confirms every boolean
--   sep-2640-client-*      list the skills (no file read); the verify-* scenarios load the skill and
--               expect the library to refuse the tampered SKILL.md (integrity)
--   auth/dpop*, auth/wif-jwt-bearer  oauth.dpop = true; the jwt_bearer grant with valid_jwt
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
  elseif context.valid_jwt then
    -- Workload identity: the platform's JWT is the grant; the other two the scenario hands over
    -- (wrong audience, expired) are there to be refused, not to be used.
    oauth.grant = "jwt_bearer"
    oauth.assertion = "context:valid_jwt"
  elseif scenario:match("^auth/client%-credentials") then
    oauth.grant = "client_credentials"
    if context.private_key_pem then
      oauth.private_key = "context:private_key_pem"
      oauth.signing_algorithm = context.signing_algorithm
    end
  end
  if scenario:match("^auth/dpop") then oauth.dpop = true end
  local resolver = function(reference)
    local name = reference:match("^context:(.+)$")
    return name and context[name] or nil
  end
  return oauth, resolver
end

-- Arguments that satisfy a tool's input schema as far as the scenarios need: every required
-- property gets a value of its type.
local SAMPLES = { string = "sample", integer = 1, number = 1.5, boolean = true }
local function sample_arguments(schema)
  local arguments = {}
  if type(schema) ~= "table" or type(schema.properties) ~= "table" then return arguments end
  for _, name in ipairs(type(schema.required) == "table" and schema.required or {}) do
    local property = schema.properties[name]
    local kind = type(property) == "table" and property.type
    arguments[name] = SAMPLES[kind] or (kind == "array" and {} or "sample")
  end
  return arguments
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
  -- The suite names the revision a scenario runs at (0.2.0 and later): the lifecycle follows it,
  -- initialize up to 2025-11-25, the stateless 2026-07-28 era after. Unset: find out ("auto").
  local revision = os.getenv("MCP_CONFORMANCE_PROTOCOL_VERSION")
  if revision == "2026-07-28" then options.protocol = "2026-07-28"
  elseif revision and revision ~= "" then options.protocol = "2025-11-25" end
  local context = {}
  local text = os.getenv("MCP_CONFORMANCE_CONTEXT")
  if text and text ~= "" then context = assert(mcp.json.decode(text), "MCP_CONFORMANCE_CONTEXT is not JSON") end
  if auth_scenario then
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
  if scenario == "sep-2322-client-request-state" then
    -- The "user" confirms: every boolean the form asks for is true (URL requests are consented to).
    options.on_elicitation = function(request)
      local content = {}
      local schema = type(request.requestedSchema) == "table" and request.requestedSchema or {}
      for name, property in pairs(type(schema.properties) == "table" and schema.properties or {}) do
        if type(property) == "table" and property.type == "boolean" then content[name] = true end
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
  elseif scenario == "http-standard-headers" or scenario == "request-metadata" then
    -- Every listed tool, called with what its schema requires: the server judges the headers
    -- and the request metadata of each request.
    for _, t in ipairs(assert(conn:list_tools())) do
      assert(conn:call_tool(t.name, sample_arguments(t.inputSchema)))
    end
  elseif scenario == "sep-2322-client-request-state" then
    -- The two tools that ask for input, with the unrelated one called while the first waits for
    -- its answer, and the one whose result names no resultType.
    local answers = mcp.gather {
      function() return conn:call_tool("test_mrtr_echo_state", {}) end,
      function() return conn:call_tool("test_mrtr_unrelated", {}) end,
    }
    for _, name in ipairs { "test_mrtr_no_state", "test_mrtr_no_result_type" } do
      answers[#answers + 1] = { conn:call_tool(name, {}) }
    end
    for _, answer in ipairs(answers) do
      if not answer[1] then error(answer[2] or answer.error) end
    end
  elseif scenario == "sep-2640-client-no-prefetch" then
    -- Listing the skills must read none of their files.
    local listed = assert(conn:skills())
    if #listed == 0 then error("the server listed no skill") end
  elseif scenario:match("^sep%-2640%-client%-verify%-") then
    -- Loading the skill reads its SKILL.md, which the server has tampered with: the library must
    -- refuse it (integrity), and nothing else of the skill is read.
    local listed = assert(conn:skills())
    if #listed == 0 then error("the server listed no skill") end
    local loaded, _, err = conn:read_skill(listed[1].name)
    if loaded then error("a tampered SKILL.md was accepted") end
    if err.kind ~= "integrity" then error(err.message) end
  elseif scenario == "http-custom-headers" then
    -- The calls the scenario names, with its arguments (a JSON null included).
    tool_named("test_custom_headers")
    for _, call in ipairs(context.toolCalls or {}) do
      local out, why = conn:call_tool(call.name, call.arguments)
      if not out then error(why) end
    end
  elseif scenario == "http-invalid-tool-headers" then
    -- Every tool the server lists is tried; the library refuses those whose x-mcp-header marking
    -- is invalid without sending anything, and the valid one is called.
    local called = 0
    for _, t in ipairs(assert(conn:list_tools())) do
      local out, _, err = conn:call_tool(t.name, sample_arguments(t.inputSchema))
      if out then called = called + 1
      elseif err.kind ~= "invalid_schema" then error(err.message) end
    end
    if called ~= 1 then error("expected exactly one callable tool, called " .. called) end
  elseif scenario == "json-schema-ref-no-deref" then
    -- Listing is the test: the schema's network $ref must not be fetched.
    local tools = assert(conn:list_tools())
    if #tools == 0 then error("the server listed no tools") end
  elseif scenario == "json-schema-2020-12-preservation" then
    -- The focal tool's inputSchema, as received, goes back verbatim to the echo tool.
    local focal = tool_named("json_schema_2020_12_tool")
    local out, why = conn:call_tool("json_schema_echo", { schema = focal.inputSchema })
    if not out then error(why) end
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
