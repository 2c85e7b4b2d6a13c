--- mcp.config: the server configuration files people already have, read
--- into connect options.
--
--   local servers = assert(mcp.config.read("claude_desktop_config.json"))
--   for _, entry in ipairs(servers) do
--     entry.options.health = mcp.health.discard
--     local conn <close> = mcp.connect(entry.options)
--   end
--
-- Three shapes are read (`opts.format` names one, else the shape decides):
--
-- * "mcpServers": `{ "mcpServers": { NAME: { command, args, env, cwd } | { url | serverUrl, headers } } }`,
--   with an optional `type` ("stdio", "http", "streamable-http"; "sse" is refused). `${VAR}` and
--   `${env:VAR}` name environment variables (`${VAR:-default}` is refused: a reference keeps no
--   default).
-- * "vscode": `{ "servers": { NAME: … }, "inputs": [ { id, description, password } ] }` (also under a
--   settings file's `"mcp"` object), with `${env:VAR}` and `${input:ID}`; `envFile` is not read: its
--   path is handed back as `entry.env_file`.
-- * "server.json" (a registry entry): `name`, `packages[]` (npm, pypi, oci; stdio) and `remotes[]`
--   (streamable-http), one entry per package and per remote, identifiers `<name>-npm`, `<name>-pypi`,
--   `<name>-oci`, `<name>-remote` (the last segment of the server's name, made valid and unique).
--   A package runs as `npx -y NAME@VERSION`, `uvx NAME==VERSION` or `docker run -i --rm [-e VAR …]
--   IMAGE:TAG`, runtime arguments before the package and package arguments after it, in order.
--
-- Each entry is `{ identifier, name, source, options [, headers] [, secrets_inline] [, env_file]
-- [, disabled] }`. `options` is what `mcp.connect` takes, less `health`: `identifier`, `name`, and
-- `command` (argv), `env`, `cwd` or `url`, `auth`. The rules:
--
-- * A secret is never read, only referred to: an environment variable becomes the reference
--   `env:VAR` (an `env` value, or the connection's `auth` credential), never its value. A reference
--   cannot sit inside a command line or a URL (the child and the request carry no references), so a
--   variable there is refused unless the caller answers it with a literal. A literal env value that
--   starts with `env:` is refused too: connect would read it as a reference.
-- * `${input:ID}` and a registry entry's `{placeholder}` are answered by `opts.inputs[ID]`: a string
--   `env:NAME` is a reference, any other string a literal put in place. An unanswered input is
--   refused, naming it and its description; an unanswered placeholder of a registry header becomes
--   the reference `env:<PLACEHOLDER>` (upper-cased, other characters `_`). A registry environment
--   variable is answered by `opts.inputs[its name]`, else its value or default; a secret or required
--   one with neither refers to the host's variable of its name (`env:NAME`). A registry argument
--   with no value or default is answered by `opts.inputs[its valueHint or name]`.
-- * Editor variables (`${workspaceFolder}`, `${userHome}`, …) are refused: their values are the
--   editor's, not the file's.
-- * Headers: `Authorization: Bearer <reference>` becomes `auth = { placement = "bearer", credential }`;
--   the first other header whose whole value is a reference becomes `auth = { placement = "header",
--   header_name, credential }`. connect has no option for plain headers, so every other header is
--   handed back beside the options as `entry.headers` (name -> value, or -> "env:NAME").
-- * A literal that looks like a secret (under a name holding TOKEN, KEY, SECRET, PASSWORD, PASSWD,
--   AUTH, CREDENTIAL and the like as a part of it, or a value shaped like a token) is kept and named
--   in `entry.secrets_inline` (`"env.NAME"`, `"headers.NAME"`, `"command[i]"`), so a caller can move
--   it to a reference.
-- * A file's server names must be identifiers as the store keeps them: trimmed, lower-cased, then
--   1 to 32 of A-Z a-z 0-9 _ - (a name that is not is refused, never rewritten; two names that become
--   one are refused). Entries come in identifier order (a registry entry's in file order).
--
-- A file that cannot be read, is not JSON, is none of the shapes, or breaks a rule of its shape is
-- `nil, message, err` with kind "config": `err.file`, `err.where` (the JSON error's line and column,
-- or the path of the offending value, e.g. `mcpServers.github.args[2]`) and `err.detail`. The whole
-- file is refused: a reader never half-imports it. Unknown fields are ignored. Nothing in a file is
-- run or fetched; it is text. Misuse (a path that is not a string, unknown options) raises.
local connection = require "mcpclient.connection"
local core = require "mcpclient.core"
local errors = require "mcpclient.errors"
local suggest = require "mcpclient.suggest"
local json = require "mcpclient.json"

local config = {}

config.FORMATS = { mcpServers = true, vscode = true, ["server.json"] = true }
-- A configuration file is a few kilobytes; anything far larger is not one.
config.MAX_BYTES = 1024 * 1024

local Refusal = {}

-- Refuse the file: caught by read(), which makes the failure value.
local function refuse(where, detail)
  error(setmetatable({ where = where, detail = detail }, Refusal), 0)
end

-- A quoted name from the file, under the text rule.
local function quoted(text)
  return '"' .. core.label(text) .. '"'
end

-- The path of a member: `.key` when the key is plain, `["key"]` otherwise.
local function member(where, key)
  if type(key) == "string" and key:match("^[A-Za-z_][A-Za-z0-9_-]*$") then
    return (where == "" and "" or where .. ".") .. key
  end
  return where .. "[" .. quoted(key) .. "]"
end

local function item(where, i)
  return string.format("%s[%d]", where, i)
end

local function is_object(v)
  return type(v) == "table" and not json.is_array(v) and json.is_object(v)
end

local function is_array(v)
  return type(v) == "table" and json.is_array(v)
end

local function want_object(v, where)
  if not is_object(v) then refuse(where, "must be an object") end
  return v
end

local function want_array(v, where)
  if not is_array(v) then refuse(where, "must be an array") end
  return v
end

local function want_string(v, where)
  if type(v) ~= "string" then refuse(where, "must be a string") end
  return v
end

local function optional_string(v, where)
  if v == nil or v == json.null then return nil end
  return want_string(v, where)
end

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys)
  return keys
end

---------------------------------------------------------------------------
-- Secrets written in the file
---------------------------------------------------------------------------

-- A name part that says secret (GITHUB_PERSONAL_ACCESS_TOKEN, X-API-Key, DB_PASSWORD), matched as a
-- whole part between _ and -, so GIT_AUTHOR_NAME or MONKEY_COUNT are not taken for one.
local SECRET_PARTS = { TOKEN = true, KEY = true, SECRET = true, PASSWORD = true, PASSWD = true, PWD = true,
  AUTH = true, AUTHORIZATION = true, CREDENTIAL = true, CREDENTIALS = true, APIKEY = true, PAT = true,
  COOKIE = true }
-- Parts that end in one of these are secret too (ACCESSTOKEN, CLIENTSECRET).
local SECRET_ENDINGS = { "TOKEN", "SECRET", "PASSWORD", "APIKEY" }
-- Prefixes of well-known token formats (version-control, chat and cloud keys).
local TOKEN_PREFIXES = { "ghp_", "gho_", "ghu_", "ghs_", "github_pat_", "glpat-", "sk-", "xoxb-", "xoxp-", "xoxa-",
  "AKIA", "AIza" }

local function secret_name(name)
  for part in name:upper():gmatch("[^_%-]+") do
    if SECRET_PARTS[part] then return true end
    for _, ending in ipairs(SECRET_ENDINGS) do
      if #part > #ending and part:sub(-#ending) == ending then return true end
    end
  end
  return false
end

-- A value shaped like a token: a known prefix, a bearer header, one long run
-- of token characters mixing upper case, lower case and digits, or a long
-- hexadecimal run; never a path or URL. In `--name=value` the value is judged.
local function token_shaped(value)
  value = value:match("^%-%-?[%w_-]+=(.*)$") or value
  for _, prefix in ipairs(TOKEN_PREFIXES) do
    if value:sub(1, #prefix) == prefix and #value >= #prefix + 8 then return true end
  end
  if value:match("^[Bb]earer %S+$") or value:match("^[Bb]asic %S+$") then return true end
  if value:find("/", 1, true) or value:find("^[%.~]") then return false end
  if #value >= 20 and value:match("^[A-Za-z0-9_%-%.%+=]+$") and value:find("%d") and value:find("%u")
    and value:find("%l") then
    return true
  end
  return #value >= 32 and value:match("^%x+$") ~= nil
end

-- A literal under `name` that should have been a reference.
local function looks_secret(name, value)
  if value == "" or value == "true" or value == "false" or value:match("^%d+$") then return false end
  return (name ~= nil and secret_name(name)) or token_shaped(value)
end

--- Whether a literal value under `name` (an env variable's or a header's
--- name; nil for none) looks like a secret that belongs in a reference: the
--- judgement the reader flags `secrets_inline` by, for callers that take
--- such values from elsewhere (the operator command's --header).
config.looks_secret = looks_secret

---------------------------------------------------------------------------
-- Variables: ${env:VAR}, ${VAR}, ${input:ID}, {placeholder}
---------------------------------------------------------------------------

local ENV_NAME = "^[A-Za-z_][A-Za-z0-9_]*$"
-- Variables an editor fills in itself (the workspace, the user's home): not environment variables,
-- even where a bare ${NAME} means one.
local EDITOR_VARIABLES = { workspaceFolder = true, workspaceFolderBasename = true, userHome = true,
  pathSeparator = true, ["/"] = true, file = true, fileDirname = true, cwd = true, workspaceRoot = true }

-- The answer the caller gave for an input: a reference (env:NAME) or a literal.
local function answer(ctx, id)
  local given = ctx.inputs[id]
  if given == nil then return nil end
  if given:match("^env:") then return { ref = given } end
  return { literal = given }
end

-- What one ${...} names, as { ref = "env:X" } or { literal = text }; refused when unknown or unanswered.
local function dollar(ctx, body, where)
  local name = body:match("^env:(.*)$")
  if name then
    if not name:match(ENV_NAME) then refuse(where, "${env:" .. core.label(name) .. "} does not name an environment "
      .. "variable (letters, digits and _)") end
    return { ref = "env:" .. name }
  end
  if EDITOR_VARIABLES[body] or body:match("^config:") or body:match("^command:") then
    refuse(where, "${" .. core.label(body) .. "} is the editor's own variable, whose value this reader cannot know")
  end
  local id = body:match("^input:(.*)$")
  if id and ctx.format == "vscode" then
    local got = answer(ctx, id)
    if got then return got end
    local described = ctx.described[id]
    refuse(where, string.format("the input %s%s is not answered (give it in opts.inputs)", quoted(id),
      described and (" (" .. quoted(described) .. ")") or ""))
  end
  if ctx.format == "mcpServers" then
    if body:match(ENV_NAME) then return { ref = "env:" .. body } end
    local var = body:match("^([A-Za-z_][A-Za-z0-9_]*):%-")
    if var then
      refuse(where, "${" .. core.label(body) .. "} has a default, which a reference to " .. var .. " cannot keep")
    end
  end
  refuse(where, "${" .. core.label(body) .. "} is not a variable this reader knows")
end

-- A registry entry's {placeholder}: the caller's answer, else the variable's
-- default, else `fallback(name)` (a reference), else refused.
local function placeholder(ctx, name, variables, where, fallback)
  local got = answer(ctx, name)
  if got then return got end
  local var = is_object(variables) and variables[name] or nil
  if is_object(var) and type(var.default) == "string" then return { literal = var.default } end
  if is_object(var) and type(var.value) == "string" and not var.value:find("{", 1, true) then
    return { literal = var.value }
  end
  if fallback then return { ref = fallback(name) } end
  local description = is_object(var) and type(var.description) == "string" and var.description or nil
  refuse(where, string.format("the placeholder {%s}%s is not answered (give it in opts.inputs)", core.label(name),
    description and (" (" .. quoted(description) .. ")") or ""))
end

-- An environment variable name for a reference made from a placeholder or header name.
local function env_name(name)
  local upper = name:upper():gsub("[^A-Z0-9_]", "_")
  if upper:match("^%d") or upper == "" then upper = "_" .. upper end
  return upper
end

-- Expand the variables of `text` (found by plain finds: the text is data).
-- `braces` reads registry {placeholders}, else ${...}. Returns the value and
-- whether it is a reference (the whole text one variable that names one), and
-- whether any of it came from outside the file. A reference inside other
-- text is refused: it cannot be put in place without reading the secret.
local function expand(ctx, text, where, opts)
  local open, close = "${", "}"
  if opts.braces then open = "{" end
  local parts, pos, any, refs = {}, 1, false, 0
  local whole
  while true do
    local s = text:find(open, pos, true)
    if not s then break end
    local e = text:find(close, s + #open, true)
    if not e then refuse(where, "an unclosed " .. open) end
    local body = text:sub(s + #open, e - 1)
    local got
    if opts.braces then
      got = placeholder(ctx, body, opts.variables, where, opts.fallback)
    else
      got = dollar(ctx, body, where)
    end
    any = true
    parts[#parts + 1] = text:sub(pos, s - 1)
    if got.ref then
      refs = refs + 1
      whole = got.ref
      parts[#parts + 1] = got.ref
    else
      parts[#parts + 1] = got.literal
    end
    pos = e + 1
  end
  parts[#parts + 1] = text:sub(pos)
  if refs == 0 then return table.concat(parts), false, any end
  if refs == 1 and #parts == 3 and parts[1] == "" and parts[3] == "" and opts.reference then
    return whole, true, true
  end
  if opts.bearer and refs == 1 and #parts == 3 and parts[1]:match("^[Bb]earer $") and parts[3] == "" then
    return whole, "bearer", true
  end
  if opts.reference then
    refuse(where, "a reference to an environment variable or secret input must be the whole value here")
  end
  refuse(where, "an environment variable or secret input cannot be put in a command line or URL (only its "
    .. "value could, and the value is never read); answer it with a literal in opts.inputs, or pass it in env")
end

---------------------------------------------------------------------------
-- An entry's parts
---------------------------------------------------------------------------

local function flag(entry, what)
  entry.secrets_inline = entry.secrets_inline or {}
  entry.secrets_inline[#entry.secrets_inline + 1] = what
end

-- An env value written in the file is a literal: one that starts with "env:"
-- would be read as a reference to the host's variable when the server starts,
-- which is not what the file says, so it is refused.
local function literal_env(value, where)
  if value:match("^env:") then
    refuse(where, 'a literal value starting with "env:" would be read as a reference to the host\'s environment')
  end
end

-- One argv element from the file.
local function argument(ctx, entry, text, where, index)
  local value, _, substituted = expand(ctx, text, where, {})
  if value:find("%z") then refuse(where, "must not contain NUL") end
  if not substituted and token_shaped(value) then flag(entry, item("command", index)) end
  return value
end

local function env_table(ctx, entry, env, where)
  local out = {}
  for _, name in ipairs(sorted_keys(want_object(env, where))) do
    local at = member(where, name)
    if not name:match(ENV_NAME) then refuse(at, "an environment variable name must be letters, digits and _") end
    local value, is_ref, substituted = expand(ctx, want_string(env[name], at), at, { reference = true })
    if value:find("%z") then refuse(at, "must not contain NUL") end
    if not substituted then literal_env(value, at) end
    if not is_ref and not substituted and looks_secret(name, value) then flag(entry, "env." .. name) end
    out[name] = value
  end
  return out
end

-- Headers to the connection's credential and the rest. `values[name]` is
-- { value, is_ref ("bearer" for Authorization: Bearer <ref>), literal_in_file }.
local function place_headers(entry, values)
  local names = sorted_keys(values)
  -- Authorization first: it is the credential when it carries a reference.
  table.sort(names, function(a, b)
    local auth_a, auth_b = a:lower() == "authorization", b:lower() == "authorization"
    if auth_a ~= auth_b then return auth_a end
    return a < b
  end)
  local auth, rest = nil, {}
  for _, name in ipairs(names) do
    local v = values[name]
    if v.is_ref == "bearer" and not auth then
      auth = { placement = "bearer", credential = v.value }
    elseif v.is_ref and not auth and name:match("^[!#$%%&'*+.^_`|~%w-]+$") then
      auth = { placement = "header", header_name = name, credential = v.value }
    else
      rest[name] = v.is_ref == "bearer" and ("Bearer " .. v.value) or v.value
      if v.in_file and looks_secret(name, v.value) then flag(entry, "headers." .. name) end
    end
  end
  entry.options.auth = auth
  if next(rest) then entry.headers = rest end
end

local function header_object(ctx, entry, headers, where)
  local values = {}
  for _, name in ipairs(sorted_keys(want_object(headers, where))) do
    local at = member(where, name)
    if not name:match("^[!#$%%&'*+.^_`|~%w-]+$") then refuse(at, "is not an HTTP header name") end
    local value, is_ref, substituted = expand(ctx, want_string(headers[name], at), at,
      { reference = true, bearer = name:lower() == "authorization" })
    if value:find("[%c]") then refuse(at, "must not contain control characters") end
    values[name] = { value = value, is_ref = is_ref, in_file = not substituted }
  end
  place_headers(entry, values)
end

-- The file's server name as an identifier (trimmed, lower-cased, then the connection's rule).
local function identifier_of(ctx, name, where)
  local id = name:match("^%s*(.-)%s*$"):lower()
  if not connection.valid_identifier(id) then
    refuse(where, string.format("the name %s is not a usable identifier (%s)", quoted(name),
      connection.IDENTIFIER_RULE))
  end
  if ctx.taken[id] then
    refuse(where, string.format('the identifier "%s" is also the identifier of %s', id, ctx.taken[id]))
  end
  ctx.taken[id] = where
  return id
end

local function new_entry(identifier, name, where)
  return { identifier = identifier, name = core.label(name), source = where,
    options = { identifier = identifier, name = core.label(name) } }
end

---------------------------------------------------------------------------
-- mcpServers and VS Code
---------------------------------------------------------------------------

local HTTP_TYPES = { http = true, ["streamable-http"] = true, streamableHttp = true }

local function server_entry(ctx, name, spec, where)
  want_object(spec, where)
  local id = identifier_of(ctx, name, where)
  local entry = new_entry(id, name, where)
  local kind = optional_string(spec.type, member(where, "type"))
  local function present(v) return v ~= nil and v ~= json.null end
  local url_key = present(spec.url) and "url" or (present(spec.serverUrl) and "serverUrl" or nil)
  if kind == "sse" then
    refuse(member(where, "type"), 'the transport "sse" (the older HTTP+SSE transport) is not supported')
  end
  if kind ~= nil and kind ~= "stdio" and not HTTP_TYPES[kind] then
    refuse(member(where, "type"), string.format("the transport %s is not one of stdio, http", quoted(kind)))
  end
  if present(spec.command) and url_key then refuse(where, "give command or url, not both") end
  local stdio = kind == "stdio" or (kind == nil and present(spec.command))
  if stdio then
    local at = member(where, "command")
    local program = want_string(spec.command, at)
    if program == "" then refuse(at, "must not be empty") end
    local argv = { argument(ctx, entry, program, at, 1) }
    if spec.args ~= nil and spec.args ~= json.null then
      local args_at = member(where, "args")
      for i, arg in ipairs(want_array(spec.args, args_at)) do
        argv[#argv + 1] = argument(ctx, entry, want_string(arg, item(args_at, i)), item(args_at, i), #argv + 1)
      end
    end
    if #argv > 4096 then refuse(member(where, "args"), "has more than 4095 arguments") end
    entry.options.command = argv
    if spec.env ~= nil and spec.env ~= json.null then
      entry.options.env = env_table(ctx, entry, spec.env, member(where, "env"))
    end
    local cwd = optional_string(spec.cwd, member(where, "cwd"))
    if cwd then
      cwd = expand(ctx, cwd, member(where, "cwd"), {})
      if cwd == "" or cwd:find("%z") then refuse(member(where, "cwd"), "must be a directory path") end
      entry.options.cwd = cwd
    end
    local env_file = optional_string(spec.envFile, member(where, "envFile"))
    if env_file then entry.env_file = env_file end
  else
    if not url_key then refuse(where, "has neither command nor url") end
    local at = member(where, url_key)
    local url = expand(ctx, want_string(spec[url_key], at), at, {})
    local ok, why = require("mcpclient.hostgate").parse_url(url)
    if not ok then refuse(at, "is not a usable URL: " .. core.clip(why)) end
    entry.options.url = url
    if spec.headers ~= nil and spec.headers ~= json.null then
      header_object(ctx, entry, spec.headers, member(where, "headers"))
    end
  end
  if spec.disabled == true then entry.disabled = true end
  return entry
end

local function read_servers(ctx, servers, where)
  local list = {}
  for _, name in ipairs(sorted_keys(want_object(servers, where))) do
    list[#list + 1] = server_entry(ctx, name, servers[name], member(where, name))
  end
  table.sort(list, function(a, b) return a.identifier < b.identifier end)
  return list
end

local function read_vscode(ctx, doc)
  local root, where = doc, ""
  if doc.servers == nil and is_object(doc.mcp) then root, where = doc.mcp, "mcp" end
  local inputs = root.inputs
  if inputs ~= nil and inputs ~= json.null then
    local at = member(where, "inputs")
    for i, input in ipairs(want_array(inputs, at)) do
      want_object(input, item(at, i))
      local id = optional_string(input.id, member(item(at, i), "id"))
      local description = optional_string(input.description, member(item(at, i), "description"))
      if id then ctx.described[id] = description end
    end
  end
  return read_servers(ctx, root.servers, member(where, "servers"))
end

---------------------------------------------------------------------------
-- The registry's server.json
---------------------------------------------------------------------------

-- The last segment of the server's reverse-DNS name, as an identifier stem.
local function stem_of(name)
  local last = name:match("([^/]*)$"):lower():gsub("[^a-z0-9_-]+", "-"):gsub("^-+", ""):gsub("-+$", "")
  if last == "" then last = "server" end
  return last
end

local function derived_identifier(ctx, stem, suffix)
  local base = stem:sub(1, 32 - #suffix - 1):gsub("-+$", "") .. "-" .. suffix
  local id, n = base, 1
  while ctx.taken[id] do
    n = n + 1
    local tail = "-" .. n
    id = base:sub(1, 32 - #tail) .. tail
  end
  ctx.taken[id] = true
  return id
end

-- An argument's text: value, else default, else the caller's answer for its
-- valueHint (positional) or name (named); placeholders filled.
local function argument_value(ctx, arg, where)
  local text = optional_string(arg.value, member(where, "value"))
    or optional_string(arg.default, member(where, "default"))
  if text == nil then
    local key = arg.type == "named" and arg.name or arg.valueHint
    local got = type(key) == "string" and answer(ctx, key) or nil
    if got and got.ref then
      refuse(where, "an environment variable or secret input cannot be put in a command line")
    end
    return got and got.literal or nil
  end
  return (expand(ctx, text, member(where, "value"), { braces = true, variables = arg.variables }))
end

local function package_arguments(ctx, entry, list, where, argv)
  if list == nil or list == json.null then return end
  for i, arg in ipairs(want_array(list, where)) do
    local at = item(where, i)
    want_object(arg, at)
    local kind = want_string(arg.type, member(at, "type"))
    local value = argument_value(ctx, arg, at)
    if kind == "named" then
      local name = want_string(arg.name, member(at, "name"))
      if name == "" or name:find("%z") then refuse(member(at, "name"), "must be a non-empty name") end
      if value ~= nil then
        argv[#argv + 1] = name
        argv[#argv + 1] = value
      elseif arg.isRequired == true then
        argv[#argv + 1] = name  -- a required named argument without a value is a flag
      end
    elseif kind == "positional" then
      if value ~= nil then
        argv[#argv + 1] = value
      elseif arg.isRequired == true then
        local hint = type(arg.valueHint) == "string" and (" " .. quoted(arg.valueHint)) or ""
        refuse(at, "the required argument" .. hint .. " has no value (give it in opts.inputs)")
      end
    else
      refuse(member(at, "type"), string.format('%s is not "positional" or "named"', quoted(kind)))
    end
    if value and not arg.isSecret and token_shaped(value) then flag(entry, item("command", #argv)) end
    if value and value:find("%z") then refuse(at, "must not contain NUL") end
  end
end

local function package_env(ctx, entry, list, where)
  if list == nil or list == json.null then return nil end
  local env, names = {}, {}
  for i, var in ipairs(want_array(list, where)) do
    local at = item(where, i)
    want_object(var, at)
    local name = want_string(var.name, member(at, "name"))
    if not name:match(ENV_NAME) then refuse(member(at, "name"), "an environment variable name must be letters, "
      .. "digits and _") end
    local got, value, in_file = answer(ctx, name), nil, false
    if got then
      value = got.ref or got.literal
    elseif type(var.value) == "string" then
      local is_ref
      value, is_ref = expand(ctx, var.value, member(at, "value"),
        { braces = true, variables = var.variables, reference = true })
      in_file = not is_ref and not var.value:find("{", 1, true)
      if in_file then literal_env(value, member(at, "value")) end
    elseif var.isSecret == true or (var.isRequired == true and type(var.default) ~= "string") then
      value = "env:" .. name  -- the host's variable of the same name, read when the server starts
    elseif type(var.default) == "string" then
      value, in_file = var.default, true
      literal_env(value, member(at, "default"))
    end
    if value ~= nil then
      if value:find("%z") then refuse(at, "must not contain NUL") end
      env[name] = value
      names[#names + 1] = name
      if in_file and looks_secret(var.isSecret and "SECRET" or name, value) then flag(entry, "env." .. name) end
    end
  end
  return env, names
end

local RUNNERS = {
  npm = function(id, version) return { "npx", "-y" }, version and (id .. "@" .. version) or id end,
  pypi = function(id, version) return { "uvx" }, version and (id .. "==" .. version) or id end,
  oci = function(id, version)
    local tail = id:match("([^/]*)$")
    local pinned = tail:find(":", 1, true) or id:find("@", 1, true)
    return { "docker", "run", "-i", "--rm" }, (version and not pinned) and (id .. ":" .. version) or id
  end,
}

local function package_entry(ctx, server, stem, pkg, where)
  want_object(pkg, where)
  local registry = want_string(pkg.registryType, member(where, "registryType"))
  local runner = RUNNERS[registry]
  if not runner then
    refuse(member(where, "registryType"), string.format("the registry type %s is not supported (npm, pypi, oci)",
      quoted(registry)))
  end
  local transport = pkg.transport
  if transport ~= nil and transport ~= json.null then
    want_object(transport, member(where, "transport"))
    local kind = want_string(transport.type, member(member(where, "transport"), "type"))
    if kind ~= "stdio" then
      refuse(member(member(where, "transport"), "type"), string.format("a package served over %s is not "
        .. "supported: only a package spoken to over stdio", quoted(kind)))
    end
  end
  local ident = want_string(pkg.identifier, member(where, "identifier"))
  -- The identifier is one argv element; one that starts with "-" would be read as an option.
  if ident == "" or ident:find("^%-") or ident:find("[%s%z]") then
    refuse(member(where, "identifier"), "must be a package name (not empty, no blanks, not starting with -)")
  end
  local version = optional_string(pkg.version, member(where, "version"))
  if version and (version == "" or version:find("[%s%z]")) then
    refuse(member(where, "version"), "must be a version without blanks")
  end
  local id = derived_identifier(ctx, stem, registry)
  local entry = new_entry(id, server, where)
  local argv, target = runner(ident, version)
  local env, names = package_env(ctx, entry, pkg.environmentVariables, member(where, "environmentVariables"))
  if registry == "oci" then
    -- A container sees none of docker's environment unless named: -e NAME passes each one in
    -- without putting its value on the command line.
    for _, name in ipairs(names or {}) do
      argv[#argv + 1] = "-e"
      argv[#argv + 1] = name
    end
  end
  package_arguments(ctx, entry, pkg.runtimeArguments, member(where, "runtimeArguments"), argv)
  argv[#argv + 1] = target
  package_arguments(ctx, entry, pkg.packageArguments, member(where, "packageArguments"), argv)
  if #argv > 4096 then refuse(where, "has more than 4095 arguments") end
  entry.options.command = argv
  entry.options.env = env
  return entry
end

local function remote_entry(ctx, server, stem, remote, where)
  want_object(remote, where)
  local kind = want_string(remote.type, member(where, "type"))
  if kind == "sse" then
    refuse(member(where, "type"), 'the transport "sse" (the older HTTP+SSE transport) is not supported')
  elseif kind ~= "streamable-http" then
    refuse(member(where, "type"), string.format('the transport %s is not "streamable-http"', quoted(kind)))
  end
  local id = derived_identifier(ctx, stem, "remote")
  local entry = new_entry(id, server, where)
  local at = member(where, "url")
  local url = expand(ctx, want_string(remote.url, at), at, { braces = true, variables = remote.variables })
  local ok, why = require("mcpclient.hostgate").parse_url(url)
  if not ok then refuse(at, "is not a usable URL: " .. core.clip(why)) end
  entry.options.url = url
  local headers = remote.headers
  if headers ~= nil and headers ~= json.null then
    local values = {}
    local list_at = member(where, "headers")
    for i, header in ipairs(want_array(headers, list_at)) do
      local h_at = item(list_at, i)
      want_object(header, h_at)
      local name = want_string(header.name, member(h_at, "name"))
      if not name:match("^[!#$%%&'*+.^_`|~%w-]+$") then refuse(member(h_at, "name"), "is not an HTTP header name") end
      local value, is_ref, in_file
      if type(header.value) == "string" then
        value, is_ref = expand(ctx, header.value, member(h_at, "value"), { braces = true,
          variables = header.variables, reference = true, bearer = name:lower() == "authorization",
          fallback = function(placeholder_name) return "env:" .. env_name(placeholder_name) end })
        in_file = not header.value:find("{", 1, true)
      elseif header.isSecret == true or header.isRequired == true then
        local got = answer(ctx, name)
        value, is_ref = got and (got.ref or got.literal) or ("env:" .. env_name(name)), not got or got.ref ~= nil
      end
      if value ~= nil then
        if value:find("%c") then refuse(h_at, "must not contain control characters") end
        values[name] = { value = value, is_ref = is_ref, in_file = in_file }
      end
    end
    place_headers(entry, values)
  end
  return entry
end

local function read_server_json(ctx, doc)
  local server = want_string(doc.name, "name")
  local stem = stem_of(server)
  local list = {}
  if doc.packages ~= nil and doc.packages ~= json.null then
    for i, pkg in ipairs(want_array(doc.packages, "packages")) do
      list[#list + 1] = package_entry(ctx, server, stem, pkg, item("packages", i))
    end
  end
  if doc.remotes ~= nil and doc.remotes ~= json.null then
    for i, remote in ipairs(want_array(doc.remotes, "remotes")) do
      list[#list + 1] = remote_entry(ctx, server, stem, remote, item("remotes", i))
    end
  end
  if #list == 0 then refuse("", "the server names no package and no remote") end
  return list
end

---------------------------------------------------------------------------
-- Reading a file
---------------------------------------------------------------------------

local function detect(doc)
  if doc.mcpServers ~= nil then return "mcpServers" end
  if doc.servers ~= nil or (is_object(doc.mcp) and doc.mcp.servers ~= nil) then return "vscode" end
  if type(doc.name) == "string" and (doc.packages ~= nil or doc.remotes ~= nil) then return "server.json" end
  return nil
end

local READERS = {
  mcpServers = function(ctx, doc) return read_servers(ctx, doc.mcpServers, "mcpServers") end,
  vscode = read_vscode,
  ["server.json"] = read_server_json,
}

local function check_options(opts)
  if opts == nil then return {} end
  if type(opts) ~= "table" then error("config.read: options must be a table", 3) end
  for key in pairs(opts) do
    if key ~= "inputs" and key ~= "format" then
      error(suggest.unknown_option("config.read", key, { inputs = true, format = true }), 3)
    end
  end
  if opts.format ~= nil and not config.FORMATS[opts.format] then
    error('config.read: format must be "mcpServers", "vscode" or "server.json"', 3)
  end
  if opts.inputs ~= nil then
    if type(opts.inputs) ~= "table" then error("config.read: inputs must be a table of id = text", 3) end
    for id, value in pairs(opts.inputs) do
      if type(id) ~= "string" or type(value) ~= "string" then
        error("config.read: inputs must be a table of id = text (\"env:NAME\" or a literal)", 3)
      end
      if value:match("^env:") and not value:match("^env:[A-Za-z_][A-Za-z0-9_]*$") then
        error(string.format("config.read: inputs[%q] is env: without an environment variable name", id), 3)
      end
    end
  end
  return opts
end

--- Read servers from text already in hand (what read() does after opening the file).
-- @param text the file's content
-- @param file the name a message gives the file
-- @param opts { inputs = { id = "env:NAME" | literal }, format = "mcpServers" | "vscode" | "server.json" }
-- @return array of entries | nil, message, err (kind "config")
function config.parse(text, file, opts)
  if type(text) ~= "string" then error("config.parse: text must be a string", 2) end
  if type(file) ~= "string" then error("config.parse: file must be a string", 2) end
  opts = check_options(opts)
  if #text > config.MAX_BYTES then
    return errors.fail("config", { file = file, detail = string.format("it is larger than %d bytes",
      config.MAX_BYTES) })
  end
  local doc, why = json.decode(text)
  if doc == nil then
    local line, column = tostring(why):match("at line (%d+) column (%d+)")
    return errors.fail("config", { file = file, where = line and string.format("line %s column %s", line, column),
      detail = "it is not JSON: " .. tostring(why):gsub("^invalid JSON: ", ""):gsub(" at line %d+ column %d+$", "") })
  end
  if not is_object(doc) then return errors.fail("config", { file = file, detail = "it is not a JSON object" }) end
  local format = opts.format or detect(doc)
  if not format then
    return errors.fail("config", { file = file, detail = "it is none of the formats read here (an object with "
      .. "mcpServers, with servers, or a server.json with packages or remotes)" })
  end
  local ctx = { format = format, inputs = opts.inputs or {}, described = {}, taken = {} }
  local ok, result = pcall(READERS[format], ctx, doc)
  if not ok then
    if getmetatable(result) ~= Refusal then error(result, 0) end
    return errors.fail("config", { file = file, where = result.where ~= "" and result.where or nil,
      detail = result.detail })
  end
  return result
end

--- Read the servers a configuration file describes.
-- @param path the file (read as text, never run)
-- @param opts { inputs = { id = "env:NAME" | literal }, format = "mcpServers" | "vscode" | "server.json" }
-- @return array of { identifier, name, source, options [, headers] [, secrets_inline] [, env_file]
--   [, disabled] } | nil, message, err (kind "config")
function config.read(path, opts)
  if type(path) ~= "string" then error("config.read: path must be a string", 2) end
  check_options(opts)
  local file, why = io.open(path, "rb")
  if not file then return errors.fail("config", { file = path, detail = "it could not be opened: " .. why }) end
  local text = file:read(config.MAX_BYTES + 1)
  file:close()
  if text == nil then return errors.fail("config", { file = path, detail = "it could not be read" }) end
  return config.parse(text, path, opts)
end

return config
