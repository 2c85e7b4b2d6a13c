--- `mcpclient add --from FILE [NAME ...]`: the servers a configuration file
--- people already have names (Claude Desktop, Cursor, Windsurf and Claude
--- Code's `mcpServers`, VS Code's `servers` and `inputs`, the registry's
--- `server.json`), read by mcp.config and added through the operator's
--- checks, each disabled, with what it still needs.
--
-- The file is text: nothing in it is run or fetched, and whatever of it is
-- printed passes the text rule. No secret is stored: a `${env:VAR}` stays a
-- reference, a literal the reader flags as a secret becomes a reference to an
-- environment variable the operator sets (the file's value is dropped), and a
-- `${input:ID}` is answered on the terminal or with --input ID=env:VAR (a
-- password input only with a reference). A server whose identifier exists is
-- left as it is unless --replace.
local config = require "mcpclient.config"
local core = require "mcpclient.core"
local credentials = require "mcpclient.credentials"
local operator = require "mcpclient.agent.operator"
local render = require "mcpclient.agent.cli.render"

local json = core.json
local inert, list = render.inert, render.list

local from_file = {}

-- The names --format takes, by the reader's format.
from_file.FORMATS = { claude = "mcpServers", cursor = "mcpServers", windsurf = "mcpServers",
  mcpServers = "mcpServers", vscode = "vscode", ["server.json"] = "server.json" }

local function is_object(v)
  return type(v) == "table" and not json.is_array(v)
end

local function copy(t)
  local out = {}
  for k, v in pairs(t or {}) do out[k] = v end
  return out
end

-- An environment variable name made from text (upper case, other characters _).
local function env_name(text)
  local name = text:upper():gsub("[^A-Z0-9_]", "_")
  if name:match("^%d") then name = "_" .. name end
  return name
end

-- The object of servers in a decoded file, by the format given or the shape.
local function servers_object(doc, format)
  if format == "server.json" then return nil end
  if (format == nil or format == "mcpServers") and is_object(doc.mcpServers) then return doc.mcpServers end
  if format == "mcpServers" then return nil end
  if is_object(doc.servers) then return doc.servers end
  if is_object(doc.mcp) and is_object(doc.mcp.servers) then return doc.mcp.servers end
  return nil
end

local function key_of(name)
  return (name:gsub("^%s+", ""):gsub("%s+$", "")):lower()
end

-- Keep only the servers `names` selects (in place); → the names no server of the file has.
local function select_servers(servers, names)
  local wanted, unknown = {}, {}
  for _, name in ipairs(names) do wanted[key_of(name)] = name end
  local found = {}
  for name in pairs(servers) do
    if type(name) == "string" and wanted[key_of(name)] then
      found[key_of(name)] = true
    else
      servers[name] = nil
    end
  end
  for key, name in pairs(wanted) do
    if not found[key] then unknown[#unknown + 1] = name end
  end
  table.sort(unknown)
  return unknown
end

-- Every ${input:ID} in the strings of `value`, in a set.
local function inputs_used(value, found)
  if type(value) == "string" then
    for id in value:gmatch("%${input:([^}]*)}") do found[id] = true end
  elseif type(value) == "table" then
    for k, v in pairs(value) do
      inputs_used(k, found)
      inputs_used(v, found)
    end
  end
  return found
end

-- The inputs a VS Code file declares: id -> { description, password }.
local function declared_inputs(doc)
  local root = is_object(doc.mcp) and doc.servers == nil and doc.mcp or doc
  local declared = {}
  if type(root.inputs) == "table" and json.is_array(root.inputs) then
    for _, input in ipairs(root.inputs) do
      if is_object(input) and type(input.id) == "string" then
        declared[input.id] = { description = type(input.description) == "string" and input.description or nil,
          password = input.password == true }
      end
    end
  end
  return declared
end

-- The answers --input ID=env:VAR|TEXT gives (usage errors raise).
local function given_inputs(items, usage)
  local answers = {}
  for _, item in ipairs(items or {}) do
    local id, value = item:match("^([^=]+)=(.*)$")
    if not id then usage("--input takes ID=env:VAR (or ID=TEXT for an input that is no secret).") end
    if value:match("^env:") and not credentials.env_reference(value) then
      usage(string.format("--input %s: env: names an environment variable (letters, digits and _).", inert(id, 64)))
    end
    if answers[id] ~= nil then usage(string.format("--input names %s twice.", inert(id, 64))) end
    if not value:match("^env:") and config.looks_secret(id, value) then
      usage(string.format("--input %s: the answer looks like a secret, which is never stored: give env:VAR, the "
        .. "environment variable that holds it.", inert(id, 64)))
    end
    answers[id] = value
  end
  return answers
end

-- Answer every input the selected servers use: from --input, else asked on
-- the terminal. → answers | nil, message (an input with no answer, or a
-- password input answered with text)
local function answer_inputs(ctx, used, declared, answers)
  local ids = {}
  for id in pairs(used) do ids[#ids + 1] = id end
  table.sort(ids)
  for _, id in ipairs(ids) do
    local about = declared[id] or {}
    local described = about.description and (" (" .. inert(about.description, 200) .. ")") or ""
    if answers[id] == nil then
      local question = string.format('The file asks for the input "%s"%s. Answer with env:VAR (the environment '
        .. "variable that holds it, read where the agent runs)%s: ", inert(id, 64), described,
        about.password and "" or " or the text itself")
      local line = ctx.ask(question, about.password)
      if line == nil then
        return nil, string.format('The file asks for the input "%s"%s and there is no terminal to ask on: answer '
          .. "it with --input %s=env:VAR.", inert(id, 64), described, inert(id, 64))
      end
      line = line:gsub("^%s+", ""):gsub("%s+$", "")
      if line == "" then return nil, string.format('The input "%s" was not answered.', inert(id, 64)) end
      answers[id] = line
    end
    local value = answers[id]
    if value:match("^env:") and not credentials.env_reference(value) then
      return nil, string.format('The answer to "%s" is env: without an environment variable name.', inert(id, 64))
    end
    if not value:match("^env:") and config.looks_secret(id, value) then
      return nil, string.format('The answer to "%s" looks like a secret, which is never stored: answer with env:VAR, '
        .. "the environment variable that holds it.", inert(id, 64))
    end
    if about.password and not credentials.env_reference(value) then
      return nil, string.format('The input "%s" is a password: answer it with env:VAR, the environment variable that '
        .. "holds it (a secret is never stored).", inert(id, 64))
    end
  end
  return answers
end

--- The default way to ask: on the terminal, when stdin is one (a password
--- without echo); nil when there is none.
function from_file.terminal_ask(question, secret)
  if os.execute("test -t 0") ~= true then return nil end
  io.stderr:write(question)
  io.stderr:flush()
  if secret then os.execute("stty -echo 2>/dev/null") end
  local line = io.stdin:read("l")
  if secret then
    os.execute("stty echo 2>/dev/null")
    io.stderr:write("\n")
  end
  return line
end

-- The store fields one entry of the file gives, and the notes to print.
-- A literal the reader flagged as a secret is not stored: an env value
-- becomes env:NAME (the host's variable of its name), a header the server's
-- credential (env:<IDENTIFIER>_<HEADER>); one in the command line refuses
-- the server. → fields, notes | nil, reason
local function fields_of(entry)
  local o, notes = entry.options, {}
  local fields = { identifier = entry.identifier, name = (entry.name ~= "" and entry.name) or entry.identifier,
    enabled = false }
  if o.command then
    fields.command, fields.env, fields.cwd = o.command, copy(o.env), o.cwd
  else
    fields.url = o.url
  end
  if o.auth then
    fields.auth_credential, fields.auth_placement = o.auth.credential, o.auth.placement
    fields.auth_header_name = o.auth.header_name
  end
  local headers = copy(entry.headers or o.headers)
  for _, where in ipairs(entry.secrets_inline or {}) do
    local variable, header = where:match("^env%.(.+)$"), where:match("^headers%.(.+)$")
    if variable then
      fields.env[variable] = "env:" .. variable
      notes[#notes + 1] = string.format("env %s: the file's value looks like a secret and is not stored; the server "
        .. "gets the host's %s (set it where the agent runs).", variable, variable)
    elseif header then
      if fields.auth_credential then
        return nil, string.format("its header %s looks like a secret, and it has a credential already (one per "
          .. "server)", inert(header, 64))
      end
      local value, reference = headers[header], "env:" .. env_name(entry.identifier .. "_" .. header)
      headers[header] = nil
      local bearer = header:lower() == "authorization" and value:match("^[Bb]earer ")
      fields.auth_credential, fields.auth_placement = reference, bearer and "bearer" or "header"
      fields.auth_header_name = not bearer and header or nil
      notes[#notes + 1] = string.format("header %s: the file's value looks like a secret and is not stored; it is "
        .. "sent from %s (set it where the agent runs%s).", inert(header, 64), reference:sub(5),
        bearer and ", to the token without \"Bearer \"" or "")
    else
      return nil, string.format("%s looks like a secret written in the command line, which is stored as it is: "
        .. "pass it in env instead (or add the server by hand)", inert(where, 64))
    end
  end
  for name, value in pairs(headers) do
    if value:match("^env:") then
      return nil, string.format("its header %s is a second reference to a secret (a server has one credential)",
        inert(name, 64))
    end
  end
  if next(headers) then fields.headers = headers end
  if entry.env_file then
    notes[#notes + 1] = string.format('its envFile "%s" is not read: give those variables with `mcpclient edit %s '
      .. "--env NAME=env:VAR …`.", inert(entry.env_file, 200), entry.identifier)
  end
  if entry.disabled then notes[#notes + 1] = "the file has it disabled (it is added disabled, as every server is)." end
  return fields, notes
end

-- Fields that replace a server's connection settings entirely (--replace):
-- what the file does not give is cleared, except the operator's own choices
-- (data class, approval, re-import; a URL server's proxy and TLS files).
local function replacing(fields)
  local out = copy(fields)
  -- (a command given to a URL server drops its URL, proxy and TLS files: operator.edit does it)
  if not fields.command then out.command = {} end
  out.env = fields.env or {}
  out.cwd = fields.cwd or ""
  out.auth_credential = fields.auth_credential or ""
  out.auth_placement = fields.auth_placement or "bearer"
  out.auth_header_name = fields.auth_header_name or ""
  if not fields.command then out.headers = fields.headers or {} end
  return out
end

-- The existing live server with this identifier, or nil. → row | nil | nil, message, err
local function existing(store, identifier)
  local rows, message, err = store:servers()
  if not rows then return nil, message, err end
  for _, row in ipairs(rows) do
    if row.identifier == identifier then return row end
  end
  return nil
end

-- The file read into entries (the servers NAME... selects). → entries, format | nil, message, err
local function read_entries(ctx, path, format, names, answers)
  local file = io.open(path, "rb")
  if not file then return config.read(path, { format = format }) end -- the reader's own refusal, naming the file
  local text = file:read(config.MAX_BYTES + 1) or ""
  file:close()
  local doc = json.decode(text)
  if not is_object(doc) then return config.parse(text, path, { format = format }) end
  local servers = servers_object(doc, format)
  if servers and #names > 0 then
    local present = {}
    for name in pairs(servers) do present[#present + 1] = inert(tostring(name), 64) end
    table.sort(present)
    local unknown = select_servers(servers, names)
    if #unknown > 0 then
      local shown = {}
      for i, name in ipairs(unknown) do shown[i] = '"' .. inert(name, 64) .. '"' end
      return nil, string.format('The file "%s" names no server %s (it names %s).', inert(path, 300),
        table.concat(shown, ", "), table.concat(present, ", "))
    end
    text = json.encode(doc)
  end
  local message
  answers, message = answer_inputs(ctx, inputs_used(servers or {}, {}), declared_inputs(doc), answers)
  if not answers then return nil, message end
  local entries, err
  entries, message, err = config.parse(text, path, { format = format, inputs = answers })
  if not entries then
    -- the reader's hint is the library's; here an input is answered on the command line
    return nil, (message:gsub("%(give it in opts%.inputs%)", "(answer it with --input ID=env:VAR or ID=TEXT)")), err
  end
  if servers == nil and #names > 0 then
    -- a registry entry: its servers are named by the identifiers the reader derives
    local wanted, kept, seen = {}, {}, {}
    for _, name in ipairs(names) do wanted[key_of(name)] = name end
    for _, entry in ipairs(entries) do
      if wanted[entry.identifier] then
        kept[#kept + 1] = entry
        seen[entry.identifier] = true
      end
    end
    for key, name in pairs(wanted) do
      if not seen[key] then
        local all = {}
        for i, entry in ipairs(entries) do all[i] = entry.identifier end
        return nil, string.format('The file "%s" names no server "%s" (it gives %s).', inert(path, 300),
          inert(name, 64), table.concat(all, ", "))
      end
    end
    entries = kept
  end
  return entries
end

-- Add (or with replace, change) one entry's server. → outcome table
local function add_one(ctx, entry, replace)
  local fields, notes = fields_of(entry)
  local outcome = { identifier = entry.identifier, source = entry.source }
  if not fields then
    outcome.refused, outcome.kind = notes, "invalid"
    return outcome
  end
  outcome.notes = notes
  local row, message, err = existing(ctx.store, entry.identifier)
  if err then
    outcome.refused, outcome.kind = message, err.kind
    return outcome
  end
  local uid
  if row and not replace then
    outcome.skipped = string.format("a server with the identifier %s exists (id %d): not overwritten; --replace "
      .. "replaces it", entry.identifier, row.uid)
    return outcome
  elseif row then
    local ok
    ok, message, err = operator.edit(ctx.store, row.uid, replacing(fields), ctx.options)
    uid, outcome.replaced = ok and row.uid, true
  else
    uid, message, err = operator.add(ctx.store, fields, ctx.options)
  end
  if not uid then
    outcome.refused, outcome.kind = message, err and err.kind
    return outcome
  end
  outcome.id, outcome.row = uid, ctx.store:server(uid)
  return outcome
end

-- What an added server still needs, as `edit` commands.
local function still_needed(row)
  local missing = {}
  for i, m in ipairs(operator.missing(row)) do
    missing[i] = { field = m.field, text = m.text,
      fix = string.format("mcpclient edit %s %s", row.identifier, m.flags) }
  end
  if tostring(row.requires_approval) ~= "0" then
    missing[#missing + 1] = { field = "requires_approval", text = "a human approves every call of its tools "
      .. "(the default)", fix = string.format("mcpclient edit %s --approval no", row.identifier), optional = true }
  end
  return missing
end

local function print_text(out, path, outcomes)
  for _, o in ipairs(outcomes) do
    local who, where = inert(o.identifier, 64), inert(o.source, 200)
    if o.id then
      out:line(string.format("%s server %d (%s) from %s, disabled.", o.replaced and "Replaced" or "Added", o.id, who,
        where))
      for _, note in ipairs(o.notes) do out:line("  - " .. inert(note, 600)) end
      for _, m in ipairs(o.missing) do
        out:line(string.format("  %s %s: `%s`", m.optional and "optional:" or "needed:", inert(m.text, 200),
          inert(m.fix, 300)))
      end
    elseif o.skipped then
      out:line(string.format("Skipped %s from %s: %s.", who, where, inert(o.skipped, 300)))
    else
      out:err(string.format("Not added: %s from %s (in %s): %s", who, where, inert(path, 300), inert(o.refused, 600)))
    end
  end
  local any = false
  for _, o in ipairs(outcomes) do if o.id then any = true end end
  if any then out:line("Then `mcpclient import <server>` fetches each one's tools.") end
end

local function as_json(path, format, outcomes)
  local added, skipped, refused = {}, {}, {}
  for _, o in ipairs(outcomes) do
    if o.id then
      added[#added + 1] = { id = o.id, identifier = o.identifier, source = o.source, replaced = o.replaced == true,
        notes = list(o.notes), missing = list(o.missing),
        requires_approval = tostring(o.row.requires_approval) ~= "0" }
    elseif o.skipped then
      skipped[#skipped + 1] = { identifier = o.identifier, source = o.source, reason = o.skipped }
    else
      refused[#refused + 1] = { identifier = o.identifier, source = o.source, error = inert(o.refused, 2000),
        kind = o.kind or "invalid" }
    end
  end
  return { file = path, format = format or json.null, added = list(added), skipped = list(skipped),
    refused = list(refused) }
end

--- Run `add --from`. helpers: { usage = function(message) (raises), refuse = function(message, err) -> code,
--- OK, FAILED }.
-- @return exit code
function from_file.run(ctx, out, parsed, helpers)
  local flags = parsed.flags
  for flag in pairs(flags) do
    if flag ~= "--from" and flag ~= "--format" and flag ~= "--replace" and flag ~= "--input" then
      helpers.usage(string.format("--from adds the servers as the file describes them; %s goes with `mcpclient edit` "
        .. "after it.", flag))
    end
  end
  if parsed.argv then helpers.usage("--from takes no command after --.") end
  local path = flags["--from"]
  if path == "" then helpers.usage("--from needs the configuration file's path.") end
  local format
  if flags["--format"] ~= nil then
    format = from_file.FORMATS[flags["--format"]]
    if not format then helpers.usage("--format is claude, cursor, windsurf, vscode or server.json.") end
  end
  local answers = given_inputs(flags["--input"], helpers.usage)
  local entries, message, err = read_entries(ctx, path, format, parsed.args, answers)
  if not entries then return helpers.refuse(message, err) end
  local outcomes, failed = {}, false
  for i, entry in ipairs(entries) do
    outcomes[i] = add_one(ctx, entry, flags["--replace"] == true)
    if outcomes[i].refused then failed = true end
    if outcomes[i].id then outcomes[i].missing = still_needed(outcomes[i].row) end
  end
  if parsed.json then
    out:json(as_json(path, format, outcomes))
  else
    print_text(out, path, outcomes)
  end
  return failed and helpers.FAILED or helpers.OK
end

return from_file
