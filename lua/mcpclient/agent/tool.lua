--- One imported tool as the gate and the model see it (REFERENCE §6.1, §6.2).
--
-- Every declaration that matters for safety comes from the operator's server
-- record, never from the server's catalogue: the data class, the approval
-- flag. A remote tool is always a non-idempotent write, requires an
-- administrator and is off until an operator enables it.
local core = require "mcpclient.core"
local names = require "mcpclient.agent.names"

local tool = {}

tool.EFFECT = "non_idempotent_write"

--- ToolResults: what a tool hands back to the agent loop.
function tool.text_result(text) return { text = text, is_error = false } end
function tool.error_result(text) return { text = text, is_error = true } end

local Tool = {}
Tool.__index = Tool

-- The origin comes first, so a model reads who answers before what the
-- server says about itself.
local function describe(server_name, remote_description)
  local origin = string.format('[via the external MCP server "%s"]', server_name)
  local own = type(remote_description) == "string" and remote_description:match("^%s*(.-)%s*$") or ""
  if own == "" then return origin end
  return origin .. " " .. own
end

--- @param spec {
---   server = { identifier, name, data_class, requires_approval (the stored string) },
---   local_name, remote_name, description, parameters (a normalised schema table),
---   connection = function() -> connection (an open mcpclient connection to that server) }
function tool.new(spec)
  local server = spec.server
  return setmetatable({
    name = spec.local_name,
    remote_name = spec.remote_name,
    description = describe(server.name, spec.description),
    parameters = spec.parameters,
    data_class = server.data_class,
    -- Only the literal "0" means "no approval" (REFERENCE §10.1).
    requires_approval = tostring(server.requires_approval) ~= "0",
    effect = tool.EFFECT,
    requires_admin = true,
    enabled_by_default = false,
    group = names.group(server.identifier),
    remote = true,
    server_identifier = server.identifier,
    connection = spec.connection,
  }, Tool)
end

--- What a model is offered: name, description, JSON-schema parameters.
function Tool:spec()
  return { name = self.name, description = self.description, parameters = self.parameters }
end

--- Run the tool on its server under its remote name.
-- A failure of the server or the network is returned as an error result that
-- names the server — never raised — so the run continues and the model is told.
-- @param arguments table (nil means none)
-- @param context { cancel = function, budget = seconds }
function Tool:execute(arguments, context)
  context = context or {}
  if arguments ~= nil and type(arguments) ~= "table" then
    return tool.error_result(string.format('Tool "%s" takes named arguments (a JSON object).', self.name))
  end
  if arguments ~= nil and core.json.is_array(arguments) then
    -- Models sometimes write [] for "no arguments"; anything in a list is not named.
    if #arguments > 0 then
      return tool.error_result(string.format('Tool "%s" takes named arguments (a JSON object), not a list.',
        self.name))
    end
    arguments = nil
  end
  local conn = self.connection()
  local outcome, message = conn:call_tool(self.remote_name, arguments,
    { cancel = context.cancel, budget = context.budget })
  if not outcome then return tool.error_result(message) end
  if outcome.is_error then return tool.error_result(outcome.text) end
  return tool.text_result(outcome.text)
end

tool.Tool = Tool
return tool
