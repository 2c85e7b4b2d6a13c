--- A server started over stdio: its command, environment and directory as
--- the operator (or the host's code) gives them, checked, and the command as
--- a person may read it. Used by connect and by the agent host's store and
--- command line; the channel that runs it is channel/stdio.lua.
local core = require "mcpclient.core"

local command = {}

--- The names of the host's environment a server inherits (the rest stays
--- out, secrets included); `env` adds to these. LC_* is every locale variable.
command.INHERITED = { "HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "LC_*" }

--- The rule for an env name, as a message says it.
command.ENV_NAME_RULE = "letters, digits and _, not starting with a digit"

--- Is `name` a usable environment variable name?
function command.valid_env_name(name)
  return type(name) == "string" and name:match("^[A-Za-z_][A-Za-z0-9_]*$") ~= nil
end

--- Why `argv`, `env` and `cwd` are not usable, or nil when they are.
-- argv: a list of 1 to 4096 strings without NUL, the program non-empty;
-- env: NAME = value (or "env:VAR", resolved from the host's environment
-- when the server starts); cwd: a directory path.
function command.problem(argv, env, cwd)
  if type(argv) ~= "table" or #argv < 1 or #argv > 4096 then
    return "command must be a list: the program, then its arguments"
  end
  for key in pairs(argv) do
    if math.type(key) ~= "integer" or key < 1 or key > #argv then return "command must be a list (no other keys)" end
  end
  for i, arg in ipairs(argv) do
    if type(arg) ~= "string" or arg:find("%z") or (i == 1 and arg == "") then
      return string.format("command[%d] must be a string without NUL (the program non-empty)", i)
    end
  end
  if env ~= nil then
    if type(env) ~= "table" then return "env must be a table of NAME = value" end
    for name, value in pairs(env) do
      if not command.valid_env_name(name) then return "env names are " .. command.ENV_NAME_RULE end
      if type(value) ~= "string" or value:find("%z") then
        return string.format("env.%s must be a string without NUL", name)
      end
    end
  end
  if cwd ~= nil and (type(cwd) ~= "string" or cwd == "" or cwd:find("%z")) then
    return "cwd must be a directory path"
  end
  return nil
end

--- The command as a person may read it: the argv joined, an argument with
--- blanks or quotes quoted, clipped under the text rule. No environment
--- value is ever part of it.
function command.describe(argv)
  local parts = {}
  for i, arg in ipairs(argv) do
    parts[i] = arg:find("[%s\"']") and string.format("%q", arg) or arg
  end
  return core.clip(table.concat(parts, " "), 200)
end

return command
