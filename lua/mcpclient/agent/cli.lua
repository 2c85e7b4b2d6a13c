--- The operator command, `mcpclient`: the readout, the connection test, the
--- import, tool switches and server administration over one database.
--
-- Whoever can run the command and open its database is the local operator,
-- an administrator: running it is the admin check. The operator API beneath
-- (mcpclient.agent.operator) still takes an actor, and this module passes one.
--
-- Exit codes: 0 done, 1 failed (or an import was refused), 2 usage.
-- Everything printed that a server wrote or that came from the database
-- (server names and versions, tool names, descriptions, skip reasons, error
-- messages) passes core.clip or core.label: control, C1 and bidi/invisible
-- formatting characters become spaces, so no escape sequence, line break or
-- reordering mark from a server reaches the terminal. --json output goes
-- through the library's JSON encoder, which escapes the same characters.
local core = require "mcpclient.core"
local operator = require "mcpclient.agent.operator"

local json = core.json

local cli = {}

cli.OK, cli.FAILED, cli.USAGE = 0, 1, 2

local USAGE_TEXT = [[
usage: mcpclient [--db PATH] [--json] <command> [arguments]

  servers                         every server, as the operator readout shows it
  test <server-id>                is the server there? (one handshake; stores only the contact)
  import <identifier> | --all     import the catalogue of an enabled server, or of every one
  import --server <server-id>     import one server by id, enabled or not
  tools [<server-id>]             the imported tools and whether each is switched on
  enable <tool-name|group>        switch a tool (or every tool of mcp_<identifier>) on
  disable <tool-name|group>       ... or off    (--tool / --group when a name is both)
  add --identifier ID --name NAME --url URL [server flags]
  edit <server-id> [server flags]
  remove <server-id>
  help

server flags:
  --identifier ID          1-32 of a-z 0-9 _ - (names the tools: mcp_<ID>_<remote name>)
  --name NAME              --description TEXT         --url URL (http or https)
  --credential REF         a reference such as env:NAME, never the secret itself ("" for none)
  --placement bearer|header                          --header-name NAME
  --data-class CLASS       publicContent editorContent sourceCode internalConfiguration
                           systemDiagnostics secretAdjacent ("" to withdraw it)
  --approval yes|no        whether a human approves every call (default yes)
  --enabled / --disabled

The database is --db, else $MCPCLIENT_DB, else ./mcpclient.db. --json prints
JSON on every read command. Exit status: 0 done, 1 failed, 2 usage.
Whoever can run this command on the database acts as its administrator: access
to the command and the database file is the admin check.
]]

-- The local operator (see the module comment).
local ACTOR = { name = "local operator", admin = true }

local function inert(text, limit)
  if text == nil then return "" end
  return core.clip(tostring(text), limit or 1000)
end

-- Raised by the parsers; main() turns it into exit code 2.
local Usage = {}
local function usage(message) error(setmetatable({ message = message }, Usage), 0) end

---------------------------------------------------------------------------
-- Argument parsing
---------------------------------------------------------------------------

-- Flags each command accepts: name -> "value" | "flag".
local SERVER_FLAGS = {
  ["--identifier"] = "value", ["--name"] = "value", ["--description"] = "value", ["--url"] = "value",
  ["--credential"] = "value", ["--placement"] = "value", ["--header-name"] = "value",
  ["--data-class"] = "value", ["--approval"] = "value", ["--enabled"] = "flag", ["--disabled"] = "flag",
}

local COMMAND_FLAGS = {
  servers = {}, test = {}, tools = {}, remove = {}, help = {},
  import = { ["--all"] = "flag", ["-a"] = "flag", ["--server"] = "value" },
  enable = { ["--tool"] = "flag", ["--group"] = "flag" },
  disable = { ["--tool"] = "flag", ["--group"] = "flag" },
  add = SERVER_FLAGS, edit = SERVER_FLAGS,
}

-- Take the global options (--db, --json, --help) out of argv, wherever they
-- stand; the rest, in order, is the command and its own arguments.
local function parse_globals(argv, parsed)
  local rest, i = {}, 1
  while i <= #argv do
    local a = argv[i]
    if a == "--db" then
      if i == #argv then usage("--db needs a path.") end
      parsed.db = argv[i + 1]
      i = i + 1
    elseif a:match("^%-%-db=") then
      parsed.db = a:sub(6)
    elseif a == "--json" then
      parsed.json = true
    elseif a == "--help" or a == "-h" then
      parsed.command = "help"
    else
      rest[#rest + 1] = a
    end
    i = i + 1
  end
  return rest
end

-- Read one flag at rest[i] into parsed.flags; returns the index after it.
local function parse_flag(rest, i, accepted, parsed)
  local a = rest[i]
  local name, inline = a:match("^(%-%-[^=]+)=(.*)$")
  name = name or a
  local kind = accepted[name]
  if not kind then usage(string.format('"%s" does not take the option %s.', parsed.command, inert(name, 64))) end
  if parsed.flags[name] ~= nil then usage(string.format("%s is given twice.", inert(name, 64))) end
  if kind == "flag" then
    if inline then usage(string.format("%s takes no value.", name)) end
    parsed.flags[name] = true
    return i + 1
  elseif inline then
    parsed.flags[name] = inline
    return i + 1
  end
  if i == #rest then usage(string.format("%s needs a value.", name)) end
  parsed.flags[name] = rest[i + 1]
  return i + 2
end

-- Split argv into global options, the command, its flags and its positional arguments.
-- @return { db, json, command, flags = {name -> value|true}, args = {...} } (raises Usage)
local function parse(argv)
  local parsed = { flags = {}, args = {} }
  local rest = parse_globals(argv, parsed)
  if parsed.command == "help" then return parsed end
  parsed.command = table.remove(rest, 1)
  if parsed.command == nil then usage("Name a command.") end
  local accepted = COMMAND_FLAGS[parsed.command]
  if not accepted then usage(string.format('Unknown command "%s".', inert(parsed.command, 64))) end
  local i, only_positional = 1, false
  while i <= #rest do
    local a = rest[i]
    if not only_positional and a == "--" then
      only_positional = true
      i = i + 1
    elseif not only_positional and a:sub(1, 1) == "-" and #a > 1 then
      i = parse_flag(rest, i, accepted, parsed)
    else
      parsed.args[#parsed.args + 1] = a
      i = i + 1
    end
  end
  return parsed
end

local function no_more_than(parsed, count)
  if #parsed.args > count then
    usage(string.format('"%s" takes %s; unexpected "%s".', parsed.command,
      count == 0 and "no arguments" or count == 1 and "one argument" or count .. " arguments",
      inert(parsed.args[count + 1], 64)))
  end
end

-- The server fields the flags set.
local function server_fields(flags)
  local fields = {}
  local map = {
    ["--identifier"] = "identifier", ["--name"] = "name", ["--description"] = "description", ["--url"] = "url",
    ["--credential"] = "auth_credential", ["--placement"] = "auth_placement",
    ["--header-name"] = "auth_header_name", ["--data-class"] = "data_class",
  }
  for flag, field in pairs(map) do
    if flags[flag] ~= nil then fields[field] = flags[flag] end
  end
  local approval = flags["--approval"]
  if approval ~= nil then
    if approval == "yes" then
      fields.requires_approval = "1"
    elseif approval == "no" then
      fields.requires_approval = "0"
    else
      usage("--approval is yes or no.")
    end
  end
  if flags["--enabled"] and flags["--disabled"] then usage("Pass --enabled or --disabled, not both.") end
  if flags["--enabled"] then fields.enabled = true end
  if flags["--disabled"] then fields.enabled = false end
  return fields
end

---------------------------------------------------------------------------
-- Output
---------------------------------------------------------------------------

local Out = {}
Out.__index = Out

function Out:line(text) self.stdout:write(text or "", "\n") end
-- A message on stderr: failure messages quote server text, so they pass the text rule too.
function Out:err(text) self.stderr:write(inert(text, 2000), "\n") end
function Out:json(value) self.stdout:write(json.encode(value), "\n") end

-- A list as JSON sees it ([] when empty, not {}).
local function list(t) return json.array(t) end

-- The card's labelled lines: a "!" marks what the operator should look at.
local function print_fields(out, card)
  local function row(label, value, warning)
    out:line(string.format("  %-18s%s%s", label .. ":", warning and "! " or "", inert(value, 2048)))
  end
  if card.description and card.description ~= "" then row("Description", inert(card.description, 500)) end
  row("Endpoint", card.url)
  row("Transport", card.transport)
  row("Authentication", inert(card.authentication, 300), card.authentication_warning)
  row("Data class", card.data_class, card.data_class_warning)
  row("Approval", card.approval, card.approval_warning)
  row("Last import", card.last_import)
  row("Last contact", card.contact)
  row("Tools discovered", tostring(card.tool_count))
end

-- The last import's error, one clipped line per stored line.
local function print_import_error(out, card)
  if card.import_error == "" then return end
  out:line("  ! Last import error:")
  for text in (card.import_error .. "\n"):gmatch("(.-)\n") do out:line("      " .. inert(text)) end
end

local function print_card(out, card)
  local badges = { "[" .. card.state .. "]" }
  if card.never_reached then badges[#badges + 1] = "[Never reached]" end
  out:line(string.format("%s  %s (id %d)  %s", inert(card.identifier, 64), inert(card.name, 255), card.uid,
    table.concat(badges, " ")))
  print_fields(out, card)
  print_import_error(out, card)
  if #card.tools == 0 then
    out:line("  " .. operator.NO_TOOLS)
    return
  end
  out:line("  Imported tools:")
  for _, t in ipairs(card.tools) do
    out:line(string.format("    %s  (%s)%s", inert(t.tool_name, 64), inert(t.remote_name, 190),
      t.badge and ("  [" .. t.badge .. "]") or ""))
  end
end

---------------------------------------------------------------------------
-- Commands
---------------------------------------------------------------------------

local commands = {}

function commands.help(_, out)
  out:line(USAGE_TEXT:sub(1, -2))
  return cli.OK
end

function commands.servers(ctx, out, parsed)
  no_more_than(parsed, 0)
  local cards, message = operator.readout(ctx.store)
  if not cards then out:err(message); return cli.FAILED end
  if parsed.json then
    for _, card in ipairs(cards) do card.tools = list(card.tools) end
    out:json(list(cards))
    return cli.OK
  end
  if #cards == 0 then out:line(operator.NO_SERVERS); return cli.OK end
  for i, card in ipairs(cards) do
    if i > 1 then out:line() end
    print_card(out, card)
  end
  return cli.OK
end

local function need_server_id(parsed)
  if #parsed.args == 0 then
    usage(string.format('"%s" needs a server id (see `mcpclient servers`).', parsed.command))
  end
  no_more_than(parsed, 1)
  return parsed.args[1]
end

function commands.test(ctx, out, parsed)
  local id = need_server_id(parsed)
  local result, message, err = operator.test(ctx.store, id, ctx.options)
  if not result then
    result = { success = false, error = message, err = err }
  end
  if parsed.json then
    out:json { success = result.success, error = result.error, kind = result.err and result.err.kind or nil,
      report = result.report, contact = result.contact }
  elseif result.success then
    out:line(inert(result.report))
    out:line("Last contact: " .. result.contact)
  else
    out:err(result.error)
  end
  return result.success and cli.OK or cli.FAILED
end

-- A progress line, only for a person watching (stderr is a terminal).
local function progress(ctx)
  if ctx.progress == nil then ctx.progress = os.execute("test -t 2") == true end
  if not ctx.progress then return function() end end
  return function(text)
    ctx.stderr:write("\r\27[K", text or "")
    ctx.stderr:flush()
  end
end

local function import_one(ctx, row)
  local report, message, err = operator.import(ctx.store, row.uid, ctx.options)
  if not report then
    report = { server_uid = row.uid, imported = 0, skipped = 0, orphaned = 0, skip_reasons = { message },
      refused = true, err = err }
  end
  report.identifier = row.identifier
  return report
end

-- The one enabled server with that identifier | nil, message.
local function enabled_by_identifier(enabled, identifier)
  local targets = {}
  for _, row in ipairs(enabled) do
    if row.identifier == identifier then targets[#targets + 1] = row end
  end
  if #targets == 1 then return targets[1] end
  if #targets == 0 then
    return nil, string.format('No enabled MCP server has the identifier "%s".', inert(identifier, 64))
  end
  return nil, string.format('%d enabled servers share the identifier "%s". Identifiers name the imported tools, '
    .. "so they must be unique among enabled servers.", #targets, inert(identifier, 64))
end

-- Which servers `import` means: by id, every enabled one, or one by identifier.
-- @return rows | nil, message
local function import_targets(ctx, parsed)
  local all, by_id = parsed.flags["--all"] or parsed.flags["-a"], parsed.flags["--server"]
  no_more_than(parsed, 1)
  local identifier = parsed.args[1] ~= "" and parsed.args[1] or nil
  local given = (all and 1 or 0) + (by_id and 1 or 0) + (identifier and 1 or 0)
  if given > 1 then
    usage(by_id and "Pass one of an identifier, --all or --server, not more." or
      "Pass either an identifier or --all, not both.")
  end
  if given == 0 then usage("Name a server identifier, or pass --all to import every enabled server.") end
  if by_id then
    local uid, row, err = operator.server_id(by_id, ctx.store)
    if not uid then return nil, row, err end
    return { row }
  end
  local enabled, message, err = ctx.store:enabled_servers()
  if not enabled or all then return enabled, message, err end
  local row
  row, message = enabled_by_identifier(enabled, identifier)
  return row and { row }, message
end

-- One server's outcome as people read it.
local function print_report(out, report)
  local who = inert(report.identifier, 64)
  if report.refused then
    local reason = report.skip_reasons[1]
    out:line(string.format("%s: refused — %s", who, (reason and reason ~= "") and inert(reason) or "no reason given"))
    return
  end
  out:line(string.format("%s: %d imported, %d skipped, %d orphaned", who, report.imported, report.skipped,
    report.orphaned))
  for _, reason in ipairs(report.skip_reasons) do out:line("    skipped: " .. inert(reason)) end
end

-- The reports as JSON: the failure value is reduced to its kind (its
-- message is the first skip reason already).
local function json_reports(out, reports)
  for i, r in ipairs(reports) do
    reports[i] = { server_uid = r.server_uid, identifier = r.identifier, imported = r.imported, skipped = r.skipped,
      orphaned = r.orphaned, skip_reasons = list(r.skip_reasons), refused = r.refused,
      kind = r.err and r.err.kind or nil }
  end
  out:json(list(reports))
end

function commands.import(ctx, out, parsed)
  local targets, message = import_targets(ctx, parsed)
  if not targets then out:err(message); return cli.FAILED end
  if #targets == 0 then
    if parsed.json then out:json(list {}) end
    out:err("No enabled MCP server to import.")
    return cli.OK
  end
  local show = progress(ctx)
  local reports, refused = {}, 0
  for i, row in ipairs(targets) do
    show(string.format("importing %s (%d of %d)…", inert(row.identifier, 64), i, #targets))
    reports[i] = import_one(ctx, row)
    show()
    if reports[i].refused then refused = refused + 1 end
    if not parsed.json then print_report(out, reports[i]) end
  end
  if parsed.json then json_reports(out, reports) end
  if refused > 0 then
    out:err(string.format("%d of %d server(s) refused the import.", refused, #targets))
    return cli.FAILED
  end
  return cli.OK
end

function commands.tools(ctx, out, parsed)
  no_more_than(parsed, 1)
  local tools, message = operator.tools(ctx.store, parsed.args[1])
  if not tools then out:err(message); return cli.FAILED end
  if parsed.json then out:json(list(tools)); return cli.OK end
  if #tools == 0 then out:line(operator.NO_TOOLS); return cli.OK end
  for _, t in ipairs(tools) do
    local description = inert(t.description, 100)
    out:line(string.format("%-40s %-3s  %s  (%s)%s%s", inert(t.tool_name, 64), t.enabled and "on" or "off",
      inert(t.identifier, 64), inert(t.remote_name, 190), t.orphaned and ("  [" .. operator.GONE .. "]") or "",
      description ~= "" and ("  " .. description) or ""))
  end
  return cli.OK
end

local function switch(enabled)
  return function(ctx, out, parsed)
    if #parsed.args == 0 then usage(string.format('"%s" needs a tool name or a group name.', parsed.command)) end
    no_more_than(parsed, 1)
    if parsed.flags["--tool"] and parsed.flags["--group"] then usage("Pass --tool or --group, not both.") end
    local what = parsed.flags["--tool"] and "tool" or parsed.flags["--group"] and "group" or nil
    local options = setmetatable({ what = what }, { __index = ctx.options })
    local name = parsed.args[1]
    local done, message = operator.set_enabled(ctx.store, name, enabled, options)
    if not done then out:err(message); return cli.FAILED end
    out:line(string.format("%s %s %s.", done == "tool" and "Tool" or "Group", inert(name, 64),
      enabled and "on" or "off"))
    return cli.OK
  end
end
commands.enable = switch(true)
commands.disable = switch(false)

-- A value the store cannot take is a usage error; a conflict with other rows is a failure.
local function refused_edit(out, message, err)
  if err.kind == "invalid" then usage(message) end
  out:err(message)
  return cli.FAILED
end

function commands.add(ctx, out, parsed)
  no_more_than(parsed, 0)
  local fields = server_fields(parsed.flags)
  for _, required in ipairs { "identifier", "name", "url" } do
    if fields[required] == nil then usage(string.format('"add" needs --%s.', required)) end
  end
  local uid, message, err = operator.add(ctx.store, fields, ctx.options)
  if not uid then return refused_edit(out, message, err) end
  local row = ctx.store:server(uid)
  out:line(string.format("Added server %d (%s).", uid, inert(row and row.identifier, 64)))
  return cli.OK
end

function commands.edit(ctx, out, parsed)
  local id = need_server_id(parsed)
  local fields = server_fields(parsed.flags)
  if next(fields) == nil then usage('"edit" needs at least one server flag.') end
  local ok, message, err = operator.edit(ctx.store, id, fields, ctx.options)
  if not ok then return refused_edit(out, message, err) end
  out:line(string.format("Updated server %s.", inert(id, 32)))
  return cli.OK
end

function commands.remove(ctx, out, parsed)
  local id = need_server_id(parsed)
  local ok, message = operator.remove(ctx.store, id, ctx.options)
  if not ok then out:err(message); return cli.FAILED end
  out:line(string.format("Removed server %s.", inert(id, 32)))
  return cli.OK
end

---------------------------------------------------------------------------
-- Entry point
---------------------------------------------------------------------------

-- A usage error raised while parsing or running: exit code 2. Anything
-- else raised is a bug and goes on up.
local function usage_failed(out, raised)
  if getmetatable(raised) ~= Usage then error(raised, 0) end
  out:err(raised.message)
  out:err("Run `mcpclient help` for usage.")
  return cli.USAGE
end

-- The database the command works on: --db, else $MCPCLIENT_DB, else ./mcpclient.db.
-- @return store | nil, message
local function open_database(env, parsed)
  local path = parsed.db or (env.getenv or os.getenv)("MCPCLIENT_DB") or "./mcpclient.db"
  if path == "" then path = "./mcpclient.db" end
  local open = env.open_store or function(p) return require("mcpclient.agent.store").open(p) end
  local store, message = open(path)
  if store then return store end
  return nil, string.format('The database "%s" cannot be opened: %s', inert(path, 300), tostring(message))
end

-- What every command gets: the store, the operator options (the local
-- operator as actor; warnings to stderr unless the embedder logs them).
local function context(env, store, out)
  local options = setmetatable({ actor = ACTOR }, { __index = env.options or {} })
  if options.log == nil then
    options.log = function(_, message) out:err("warning: " .. tostring(message)) end
  end
  return { store = store, options = options, stderr = out.stderr, progress = env.progress }
end

--- Run the command.
-- @param argv the script's `arg` (arguments 1..n)
-- @param env optional, for embedding and specs: { stdout, stderr, getenv, store (an open store to use),
--   open_store = function(path) -> store | nil, message, progress (boolean: force the progress line),
--   options (extra operator options: builtin_names, transport, clock, connect, ...) }
-- @return exit code
function cli.main(argv, env)
  env = env or {}
  local out = setmetatable({ stdout = env.stdout or io.stdout, stderr = env.stderr or io.stderr }, Out)
  local args = {}
  for i = 1, #(argv or {}) do args[i] = argv[i] end
  local ok, parsed = pcall(parse, args)
  if not ok then return usage_failed(out, parsed) end
  if parsed.command == "help" then return commands.help(nil, out) end
  local store = env.store
  if not store then
    local message
    store, message = open_database(env, parsed)
    if not store then out:err(message); return cli.FAILED end
  end
  local ran, code = pcall(commands[parsed.command], context(env, store, out), out, parsed)
  if store ~= env.store then store:close() end
  if not ran then return usage_failed(out, code) end
  return code
end

return cli
