--- Local tool names: how an imported tool is named to the model.
--
-- An imported tool is offered to the model as mcp_&lt;identifier&gt;_&lt;remote&gt;.
-- Nothing is rewritten, truncated, hashed or case-folded: a remote name that
-- cannot be carried as it is makes the tool unusable, never a different tool.
local names = {}

names.PREFIX = "mcp_"
names.MAX_LENGTH = 64

--- Is `name` a usable local tool name? ^[A-Za-z0-9_-]{1,64}$, nothing else.
-- The class is spelt out: %w follows the C locale a host program may change.
function names.valid(name)
  return type(name) == "string" and #name >= 1 and #name <= names.MAX_LENGTH
    and name:find("^[A-Za-z0-9_-]+$") ~= nil
end

--- The local name for a remote tool, or nil when it cannot be one.
function names.local_name(identifier, remote)
  if type(identifier) ~= "string" or type(remote) ~= "string" then return nil end
  local name = names.PREFIX .. identifier .. "_" .. remote
  if names.valid(name) then return name end
  return nil
end

--- The group every tool of a server belongs to: mcp_&lt;identifier&gt;.
function names.group(identifier)
  return names.PREFIX .. identifier
end

return names
