--- One imported tool as the gate and the model see it.
--
-- Every declaration that matters for safety comes from the operator's server
-- record, never from the server's catalogue: the data class, the approval
-- flag. A remote tool is always a non-idempotent write, requires an
-- administrator and is off until an operator enables it.
--
-- ToolResults, what a tool hands back to the agent loop:
--   { text = &lt;what the model reads&gt;, is_error = true|false [, err] }
-- `err` is present exactly when the call failed as the library's one failure
-- value (the network, the server, the budget, a cancellation): it is the
-- very table conn:call_tool returned, passed on unchanged, and `text` is its
-- message. A remote tool that answered with isError, and arguments the model
-- got wrong, are answers for the model, not failures: they carry no `err`.
--
-- What a model is offered (name and description) is far-side text: it passes
-- the text rule (control and invisible formatting characters out, runs made
-- one space) and the description is bounded in bytes, so a server cannot fill
-- a model's context or smuggle terminal sequences through its catalogue.
local core = require "mcpclient.core"
local names = require "mcpclient.agent.names"

local tool = {}

tool.EFFECT = "non_idempotent_write"

--- The most bytes of a description offered to a model; a longer one is cut
--- at a character boundary and ends with an ellipsis.
tool.DESCRIPTION_MAX_BYTES = 4096

local ELLIPSIS = "\u{2026}"

function tool.text_result(text) return { text = text, is_error = false } end

--- An error ToolResult; `err` is the failure value when the call failed.
function tool.error_result(text, err) return { text = text, is_error = true, err = err } end

local Tool = {}
Tool.__index = Tool

local links_of

-- At most `limit` bytes of clipped text, never splitting a UTF-8 sequence.
-- clip counts code points, so clipping to `limit` of them already bounds the
-- scan of a huge text; the byte cut is the second, exact bound.
local function bounded(text, limit)
  local s = core.clip(text, limit)
  if #s <= limit then return s end
  local cut = limit - #ELLIPSIS
  while cut > 0 and (s:byte(cut + 1) & 0xC0) == 0x80 do cut = cut - 1 end
  return s:sub(1, cut) .. ELLIPSIS
end

-- The origin comes first, so a model reads who answers before what the
-- server says about itself.
local function describe(server_name, remote_description)
  local origin = string.format('[via the external MCP server "%s"]', core.clip(tostring(server_name)))
  -- clip trims the ends, and stops reading a huge text at the limit
  local own = type(remote_description) == "string" and core.clip(remote_description, tool.DESCRIPTION_MAX_BYTES) or ""
  if own == "" then return origin end
  return bounded(origin .. " " .. own, tool.DESCRIPTION_MAX_BYTES)
end

--- @param spec {
---   server = { identifier, name, data_class, requires_approval (the stored string) },
---   local_name, remote_name, description, parameters (a normalised schema table),
---   output_schema = the outputSchema the import kept (decoded), or nil when the tool declares none,
---   connection = function() -> connection (an open mcpclient connection to that server) }
function tool.new(spec)
  local server = spec.server
  return setmetatable({
    name = spec.local_name,
    remote_name = spec.remote_name,
    description = describe(server.name, spec.description),
    parameters = spec.parameters,
    data_class = server.data_class,
    -- Only the literal "0" means "no approval": an operator who typed
    -- anything else (a blank, "no", "0.0") gets the safe reading.
    requires_approval = tostring(server.requires_approval) ~= "0",
    effect = tool.EFFECT,
    requires_admin = true,
    enabled_by_default = false,
    group = names.group(server.identifier),
    remote = true,
    server_identifier = server.identifier,
    output_schema = spec.output_schema,
    connection = spec.connection,
  }, Tool)
end

--- What a model is offered: name, description, JSON-schema parameters.
function Tool:spec()
  return { name = core.clip(self.name, 64), description = self.description, parameters = self.parameters }
end

-- Named arguments, or an error ToolResult for the model: a call's
-- arguments are a JSON object, so whatever the model wrote as a list — [],
-- [1, 2], a Lua sequence, a table with a key that is not a string — is
-- refused here and never sent (it would reach the server as an array).
local function named(self, arguments)
  if arguments == nil then return nil end
  if type(arguments) ~= "table" then
    return nil, tool.error_result(string.format('Tool "%s" takes named arguments (a JSON object).', self.name))
  end
  if not core.json.is_object(arguments) then
    return nil, tool.error_result(string.format(
      'Tool "%s" takes named arguments (a JSON object), not a list: give {} when there are none.', self.name))
  end
  return arguments
end

-- The URIs of the resource_link blocks a result holds (as the server wrote
-- them: a run reads them back from this server only), or nil.
function links_of(content)
  if type(content) ~= "table" then return nil end
  local out = {}
  for _, block in ipairs(content) do
    if type(block) == "table" and block.type == "resource_link" and type(block.uri) == "string" then
      out[#out + 1] = block.uri
    end
  end
  return #out > 0 and out or nil
end

--- Run the tool on its server under its remote name.
-- A failure of the server or the network is returned as an error result that
-- names the server and carries the failure value — never raised — so the
-- run continues, the model is told, and the host reads result.err.kind.
-- The call is handed the outputSchema the import kept: the connection does
-- not list the tools itself, and a result that does not match what the
-- operator imported is a failure (invalid_output, with err.path), not an
-- answer for the model.
-- @param arguments table (nil means none)
-- @param context { cancel = function, budget = seconds, on_input = function(round) (each round of input the
--   server asked for and the host's handler answered, in the 2026-07-28 era), task = true (run it as a task
--   where the tool and the server allow), on_task = function(handle) (the task's handle when it starts and at
--   each status) }
function Tool:execute(arguments, context)
  context = context or {}
  local args, refused = named(self, arguments)
  if refused then return refused end
  local outcome, message, err = self.connection():call_tool(self.remote_name, args,
    { cancel = context.cancel, budget = context.budget, on_input = context.on_input, task = context.task,
      on_task = context.on_task, output_schema = self.output_schema })
  -- what the model reads passes the text rule here whatever the connection did (a no-op, uncopied, on inert text)
  if not outcome then return tool.error_result(type(message) == "string" and (core.inert(message)) or message, err) end
  if outcome.is_error then return tool.error_result((core.inert(outcome.text))) end
  local result = tool.text_result((core.inert(outcome.text)))
  result.links = links_of(outcome.content)
  return result
end

tool.Tool = Tool
return tool
