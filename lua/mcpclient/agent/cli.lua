--- The operator command, `mcpclient`: the readout, the connection test, the
--- live conformance run, the import, tool switches and server administration
--- over one database. `mcpclient help` and docs/CLI.md describe it.
--
-- Whoever can run the command and open its database is the local operator,
-- an administrator: running it is the admin check. The operator API beneath
-- (mcpclient.agent.operator) still takes an actor, and this module passes one.
--
-- Exit codes: 0 done, 1 failed (or an import was refused, or a check failed), 2 usage.
-- A refusal is printed once: on stderr as text, or with --json as one JSON
-- object { error, kind } on stdout.
local server_command = require "mcpclient.command"
local core = require "mcpclient.core"
local engine = require "mcpclient.engine"
local errors = require "mcpclient.errors"
local grants = require "mcpclient.agent.grants"
local from_file = require "mcpclient.agent.cli.from_file"
local help = require "mcpclient.agent.cli.help"
local login = require "mcpclient.agent.login"
local operator = require "mcpclient.agent.operator"
local render = require "mcpclient.agent.cli.render"
local catalogue_connect = require("mcpclient.agent.catalogue").connect
local store_module = require "mcpclient.agent.store"

local json = core.json
local inert, list, maybe, iso = render.inert, render.list, render.maybe, render.iso

local cli = {}

cli.OK, cli.FAILED, cli.USAGE = 0, 1, 2

-- The local operator (see the module comment).
local ACTOR = { name = "local operator", admin = true }

-- Raised by the parsers; main() turns it into exit code 2.
local Usage = {}
local function usage(message) error(setmetatable({ message = message }, Usage), 0) end

local names_like -- (below)

---------------------------------------------------------------------------
-- Argument parsing
---------------------------------------------------------------------------

-- Flags each command accepts: name -> "value" | "flag".
local SERVER_FLAGS = {
  ["--identifier"] = "value", ["--name"] = "value", ["--description"] = "value", ["--url"] = "value",
  ["--credential"] = "value", ["--placement"] = "value", ["--header-name"] = "value",
  ["--data-class"] = "value", ["--approval"] = "value", ["--enabled"] = "flag", ["--disabled"] = "flag",
  ["--env"] = "list", ["--cwd"] = "value", ["--reimport"] = "value",
  ["--proxy"] = "value", ["--ca-file"] = "value", ["--client-cert"] = "value", ["--client-key"] = "value",
  ["--header"] = "list", ["--root"] = "list",
}

-- add's own: the servers a configuration file names (agent/cli/from_file.lua)
local ADD_FLAGS = { ["--from"] = "value", ["--format"] = "value", ["--replace"] = "flag", ["--input"] = "list" }
for flag, kind in pairs(SERVER_FLAGS) do ADD_FLAGS[flag] = kind end

local COMMAND_FLAGS = {
  servers = {}, test = { ["--all"] = "flag", ["-a"] = "flag" }, tools = {}, remove = {}, help = {},
  resources = {}, prompts = {}, read = {},
  check = { ["--call"] = "value", ["--arguments"] = "value", ["--env"] = "list", ["--cwd"] = "value" },
  login = { ["--wait"] = "value", ["--port"] = "value", ["--client-id"] = "value", ["--client-secret"] = "value",
    ["--scope"] = "value" }, logout = {},
  import = { ["--all"] = "flag", ["-a"] = "flag", ["--server"] = "value" },
  enable = { ["--tool"] = "flag", ["--group"] = "flag" },
  disable = { ["--tool"] = "flag", ["--group"] = "flag" },
  add = ADD_FLAGS, edit = SERVER_FLAGS,
  runs = { ["--open"] = "flag", ["--waiting"] = "flag", ["--reason"] = "value" },
  approve = {}, deny = { ["--reason"] = "value" },
  tasks = { ["--server"] = "value", ["--run"] = "value" },
}

local GLOBAL_FLAGS = { "--db", "--json", "--budget", "--version", "--help" }

-- Commands that take the server as their first argument (a --server given to them is pointed there).
local SERVER_ARGUMENT = { servers = true, test = true, tools = true, check = true, edit = true, remove = true,
  resources = true, prompts = true, read = true, login = true, logout = true }

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys)
  return keys
end

-- " Did you mean X?" when `word` is a likely typo of a candidate, else "".
local function did_you_mean(word, candidates)
  local guess = help.suggest(word, candidates)
  return guess and string.format(' Did you mean "%s"?', guess) or ""
end

-- A global option's value: the next argument, or the text after "=".
local function global_value(argv, i, name)
  local inline = argv[i]:match("^" .. name:gsub("%-", "%%-") .. "=(.*)$")
  if inline then return inline, i end
  if i == #argv then usage(name .. " needs a value.") end
  return argv[i + 1], i + 1
end

local function budget_of(text)
  local n = tonumber(text)
  if not n or n ~= n or n <= 0 or n == math.huge then usage("--budget is a positive number of seconds.") end
  return n
end

-- Take the global options out of argv, wherever they stand; the rest, in
-- order, is the command and its own arguments.
local function parse_globals(argv, parsed)
  local rest, i = {}, 1
  while i <= #argv do
    local a = argv[i]
    if a == "--db" or a:match("^%-%-db=") then
      parsed.db, i = global_value(argv, i, "--db")
    elseif a == "--budget" or a:match("^%-%-budget=") then
      local text
      text, i = global_value(argv, i, "--budget")
      parsed.budget = budget_of(text)
    elseif a == "--json" then
      parsed.json = true
    elseif a == "--version" then
      parsed.version = true
    elseif a == "--help" or a == "-h" then
      parsed.help = true
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
  if not kind and name == "--server" and SERVER_ARGUMENT[parsed.command] then
    local value = inline or rest[i + 1]
    usage(string.format('"%s" takes the server as its argument, not --server: `mcpclient %s %s`.', parsed.command,
      parsed.command, value and not value:find("^%-") and inert(value, 64) or "<server>"))
  end
  if not kind then
    local shown = inert(name, 64)
    local candidates = sorted_keys(accepted)
    for _, g in ipairs(GLOBAL_FLAGS) do candidates[#candidates + 1] = g end
    usage(string.format('"%s" has no option %s.%s', parsed.command, shown, did_you_mean(name, candidates)))
  end
  if kind == "list" then  -- may be given again: each value adds one entry
    if not inline and i == #rest then usage(string.format("%s needs a value.", name)) end
    local given = parsed.flags[name] or {}
    given[#given + 1] = inline or rest[i + 1]
    parsed.flags[name] = given
    return inline and i + 1 or i + 2
  end
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

-- The command word, checked: an option where a command belongs is named as an option.
local function command_of(rest)
  local word = table.remove(rest, 1)
  if word == nil then usage("Name a command.") end
  if COMMAND_FLAGS[word] then return word end
  if word:sub(1, 1) == "-" and #word > 1 then
    usage(string.format("Unknown option %s.%s", inert(word, 64), did_you_mean(word, GLOBAL_FLAGS)))
  end
  usage(string.format('Unknown command "%s".%s', inert(word, 64), did_you_mean(word, sorted_keys(COMMAND_FLAGS))))
end

-- The env a stdio server is given: each --env NAME=VALUE (or NAME=env:VAR).
local function env_of(items)
  local env = {}
  for _, item in ipairs(items) do
    local name, value = item:match("^([^=]*)=(.*)$")
    if not name or not server_command.valid_env_name(name) then
      usage(string.format("--env takes NAME=VALUE or NAME=env:VAR (NAME: %s).", server_command.ENV_NAME_RULE))
    end
    if env[name] ~= nil then usage(string.format("--env names %s twice.", name)) end
    env[name] = value
  end
  return env
end

-- check's target when it is a command after --: that command, and its --env and --cwd
-- (which go with nothing else) as parsed.stdio.
local function check_target(parsed)
  local flags = parsed.flags
  if not parsed.argv then
    if flags["--env"] or flags["--cwd"] then usage("--env and --cwd go with a command after --.") end
    return
  end
  if #parsed.argv == 0 then usage("Give the program and its arguments after --.") end
  if #parsed.args > 0 then
    usage(string.format('"check" takes a server, a URL or a command after --, not two; unexpected "%s".',
      inert(parsed.args[1], 64)))
  end
  parsed.stdio = { command = parsed.argv, env = flags["--env"] and env_of(flags["--env"]) or nil,
    cwd = flags["--cwd"] }
end

-- Split argv into global options, the command, its flags and its positional arguments.
-- @return { db, json, budget, version, help, command, flags = {name -> value|true}, args = {...} }
--   (raises Usage)
local function parse(argv)
  local parsed = { flags = {}, args = {} }
  local rest = parse_globals(argv, parsed)
  if parsed.version or (parsed.help and #rest == 0) then return parsed end
  if #rest == 0 then
    parsed.bare = true  -- no command at all: main shows the usage summary
    return parsed
  end
  parsed.command = command_of(rest)
  if parsed.help then return parsed end
  local accepted = COMMAND_FLAGS[parsed.command]
  local i, only_positional = 1, false
  while i <= #rest do
    local a = rest[i]
    local takes_argv = accepted == SERVER_FLAGS or accepted == ADD_FLAGS or parsed.command == "check"
    if not only_positional and a == "--" and takes_argv then
      -- add, edit and check: everything after -- is the command of a stdio server, as it is
      parsed.argv = table.move(rest, i + 1, #rest, 1, {})
      break
    elseif not only_positional and a == "--" then
      only_positional = true
      i = i + 1
    elseif not only_positional and a:sub(1, 1) == "-" and #a > 1 then
      i = parse_flag(rest, i, accepted, parsed)
    else
      parsed.args[#parsed.args + 1] = a
      i = i + 1
    end
  end
  if parsed.command == "check" then check_target(parsed) end
  return parsed
end

local function no_more_than(parsed, count)
  if #parsed.args > count then
    usage(string.format('"%s" takes %s; unexpected "%s".', parsed.command,
      count == 0 and "no arguments" or count == 1 and "one argument" or count .. " arguments",
      inert(parsed.args[count + 1], 64)))
  end
end

-- The plain headers --header NAME=VALUE gives (each repeatable; one empty
-- --header "" is none, to clear them at edit).
local function headers_of(items)
  local headers = {}
  if #items == 1 and items[1] == "" then return headers end
  for _, item in ipairs(items) do
    local name, value = item:match("^([^=]*)=(.*)$")
    if not name or name == "" then usage("--header takes NAME=VALUE.") end
    for other in pairs(headers) do
      if other:lower() == name:lower() then usage(string.format("--header names %s twice.", inert(name, 64))) end
    end
    headers[name] = value
  end
  return headers
end

-- The roots --root URI[=NAME] gives, in order (the URI ends at the first "=";
-- one empty --root "" is none, to clear them at edit).
local function roots_of(items)
  local roots = {}
  if #items == 1 and items[1] == "" then return roots end
  for _, item in ipairs(items) do
    local uri, name = item:match("^([^=]*)=(.*)$")
    roots[#roots + 1] = { uri = uri or item, name = (name ~= nil and name ~= "") and name or nil }
  end
  return roots
end

-- The server fields the flags (and a command after --) set.
local function server_fields(flags, argv)
  local fields = {}
  if flags["--header"] then fields.headers = headers_of(flags["--header"]) end
  if flags["--root"] then fields.roots = roots_of(flags["--root"]) end
  if argv then
    if #argv == 0 then usage("Give the program and its arguments after --.") end
    fields.command = argv
  end
  if flags["--env"] then fields.env = env_of(flags["--env"]) end
  if flags["--cwd"] then fields.cwd = flags["--cwd"] end
  local map = {
    ["--identifier"] = "identifier", ["--name"] = "name", ["--description"] = "description", ["--url"] = "url",
    ["--credential"] = "auth_credential", ["--placement"] = "auth_placement",
    ["--header-name"] = "auth_header_name", ["--data-class"] = "data_class", ["--reimport"] = "reimport",
    ["--proxy"] = "proxy", ["--ca-file"] = "ca_file", ["--client-cert"] = "client_cert",
    ["--client-key"] = "client_key",
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
-- A failure message about to be shown: a library warning repeating it is not printed again.
function Out:said(message) self.refusals[#self.refusals + 1] = inert(message, 2000) end
function Out:json(value) self.stdout:write(json.encode(value), "\n") end

-- The failure value of a refusal the command makes itself, about its database.
local function database_failure(message)
  return select(3, errors.fail("store", { operation = "open the database", detail = message }))
end

-- A refusal, printed once: text on stderr, or { error, kind } on stdout with --json
-- (a refusal always has its kind: one the command makes itself is about the database).
local function refuse(out, parsed, message, err)
  out:said(message)
  if parsed.json then
    out:json { error = inert(message, 2000), kind = (err or database_failure(message)).kind }
  else
    out:err(message)
  end
  return cli.FAILED
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

-- Servers contacted at once by test --all and import --all.
local FAN_OUT = 4

-- Run work(item) for every item, at most FAN_OUT at once (each a task of
-- the engine, so a silent server holds up only its own worker); results in
-- the items' order. on_start(item, i) as each one begins.
local function fan_out(items, work, on_start)
  local results, taken = {}, 0
  local function worker()
    while taken < #items do
      taken = taken + 1
      local i = taken
      on_start(items[i], i)
      results[i] = work(items[i])
    end
  end
  local workers = {}
  for w = 1, math.min(FAN_OUT, #items) do workers[w] = worker end
  for _, outcome in ipairs(engine.gather(workers)) do
    if outcome.n == 0 and outcome.error ~= nil then error(outcome.error, 0) end
  end
  return results
end

---------------------------------------------------------------------------
-- Naming a server
---------------------------------------------------------------------------

-- The server `given` names (identifier or id) | nil, message, err. An
-- unknown name is echoed (clipped) with the way to list the servers.
local function server_named(ctx, given)
  local row, message, err = operator.find_server(ctx.store, given)
  if row then return row end
  if err.kind ~= "unknown_server" then return nil, message, err end
  local shown = inert(given, 64)
  if err.matches then
    local ids = {}
    for i, uid in ipairs(err.matches) do ids[i] = tostring(uid) end
    message = string.format('%d servers have the identifier "%s" (ids %s): name one by its id.', #ids, shown,
      table.concat(ids, ", "))
  else
    message = string.format('No MCP server is named "%s" (by identifier or id). List them with `mcpclient servers`.',
      shown)
  end
  return nil, message, err
end

local function need_server(parsed)
  if #parsed.args == 0 then
    usage(string.format('"%s" needs a server: an identifier or an id (see `mcpclient servers`).', parsed.command))
  end
  no_more_than(parsed, 1)
  return parsed.args[1]
end

---------------------------------------------------------------------------
-- Commands
---------------------------------------------------------------------------

local commands = {}

-- The cards `servers` shows: every server's, or (one argument) the named one's.
local function cards_of(ctx, parsed)
  no_more_than(parsed, 1)
  local cards, message, err = operator.readout(ctx.store)
  if not cards or parsed.args[1] == nil then return cards, message, err end
  local row
  row, message, err = server_named(ctx, parsed.args[1])
  if not row then return nil, message, err end
  for _, card in ipairs(cards) do
    if card.uid == row.uid then return { card } end
  end
  return {}
end

function commands.servers(ctx, out, parsed)
  local cards, message, err = cards_of(ctx, parsed)
  if not cards then return refuse(out, parsed, message, err) end
  if parsed.json then
    local shown = {}
    for i, card in ipairs(cards) do shown[i] = render.card_json(card) end
    out:json(list(shown))
    return cli.OK
  end
  if #cards == 0 then out:line(operator.NO_SERVERS); return cli.OK end
  for i, card in ipairs(cards) do
    if i > 1 then out:line() end
    render.card(out, card)
  end
  return cli.OK
end

-- After a failure to reach a server: what the operator can do about it, by its kind.
local function refusal_hint(out, err, row)
  if type(err) ~= "table" then return end
  local who = inert(row.identifier, 64)
  -- (an authorization_required failure's own message says how to log in already)
  if err.kind == "http_status" and err.status == 401 then
    out:err(string.format("If the server uses OAuth, log in first: `mcpclient login %s`.", who))
  elseif err.kind == "http_status" and err.status == 404 then
    -- (the failure's own message names the path already)
    out:err(string.format("Fix the URL with `mcpclient edit %s --url URL`.", who))
  elseif err.kind == "timeout" then
    out:err("The server did not answer in time and may still have acted on the request; a longer --budget "
      .. "gives it more time.")
  end
end

-- The connection test's data (see docs/CLI.md).
local function test_json(row, result)
  local reached = result.reached or {}
  local fresh = result.row or row
  return {
    server = row.identifier, id = row.uid, reachable = result.success == true,
    latency_ms = maybe(reached.latency_ms), protocol_version = maybe(reached.protocol_version),
    server_name = maybe(reached.server_name), server_version = maybe(reached.server_version),
    last_contact = iso(fresh.last_contact),
    error = result.success and json.null or inert(result.error, 2000),
    kind = maybe(result.err and result.err.kind),
  }
end

-- One server's test: the operator's result, with the row as it stands after it.
local function test_one(ctx, row)
  local result, message, err = operator.test(ctx.store, row.uid, ctx.options)
  if not result then result = { success = false, error = message, err = err } end
  result.row = ctx.store:server(row.uid)
  return result
end

-- test --all: every enabled server, FAN_OUT at once; one line (or JSON object) each.
local function test_all(ctx, out, parsed)
  no_more_than(parsed, 0)
  local rows, message, err = ctx.store:enabled_servers()
  if not rows then return refuse(out, parsed, message, err) end
  local show = progress(ctx)
  local results = fan_out(rows, function(row) return test_one(ctx, row) end,
    function(row, i) show(string.format("testing %s (%d of %d)…", inert(row.identifier, 64), i, #rows)) end)
  show()
  local failed, shown = 0, {}
  for i, result in ipairs(results) do
    local who = inert(rows[i].identifier, 64)
    if not result.success then failed = failed + 1 end
    if parsed.json then
      shown[i] = test_json(rows[i], result)
    else
      out:line(string.format("%s: %s", who, inert(result.success and result.report or result.error)))
    end
  end
  if parsed.json then out:json(list(shown)) end
  return failed == 0 and cli.OK or cli.FAILED
end

function commands.test(ctx, out, parsed)
  if parsed.flags["--all"] or parsed.flags["-a"] then return test_all(ctx, out, parsed) end
  local row, message, err = server_named(ctx, need_server(parsed))
  if not row then return refuse(out, parsed, message, err) end
  local show = progress(ctx)
  show(string.format("testing %s…", inert(row.identifier, 64)))
  local result
  result, message, err = operator.test(ctx.store, row.uid, ctx.options)
  show()
  if not result then return refuse(out, parsed, message, err) end
  result.row = ctx.store:server(row.uid)
  if parsed.json then
    out:json(test_json(row, result))
  elseif result.success then
    out:line(inert(result.report))
    out:line("Last contact: " .. result.contact)
  else
    out:err(result.error)
    refusal_hint(out, result.err, row)
  end
  return result.success and cli.OK or cli.FAILED
end

-- The tool `check` may call, from --call and --arguments.
local function call_of(flags)
  local name, text = flags["--call"], flags["--arguments"]
  if name == nil then
    if text ~= nil then usage("--arguments goes with --call TOOL.") end
    return nil
  end
  if name == "" then usage("--call needs a tool name as the server lists it.") end
  local arguments = {}
  if text ~= nil then
    local ok, value = pcall(json.decode, text)
    if not ok or type(value) ~= "table" or json.is_array(value) or value == json.null then
      usage("--arguments is a JSON object, such as '{\"message\": \"hi\"}'.")
    end
    arguments = value
  end
  return { name = name, arguments = arguments }
end

local STATUS_WIDTH = #"not applicable"

-- Whether `check` was given a URL rather than a configured server.
local function is_url(text)
  return type(text) == "string" and text:lower():match("^https?://") ~= nil
end

-- Whether `check` was given a server not configured: a URL, or a command after --.
local function throwaway_target(parsed)
  return parsed.command == "check" and (parsed.argv ~= nil or is_url(parsed.args[1]))
end

-- A store in memory holding one throwaway server: at the URL, or started from
-- the command after -- (check needs no configured server, and no database).
-- → store | nil, message, err
local function throwaway_store(parsed)
  local store, message, err = store_module.open(":memory:")
  if not store then return nil, message, err end
  local fields = { identifier = "check", enabled = true }
  if parsed.stdio then
    fields.name, fields.command, fields.env, fields.cwd = "the server the command given starts",
      parsed.stdio.command, parsed.stdio.env, parsed.stdio.cwd
  else
    fields.name, fields.url = "the server at the URL given", parsed.args[1]
  end
  local uid
  uid, message, err = operator.add(store, fields, { actor = ACTOR })
  if not uid then
    store:close()
    return nil, message, err
  end
  return store
end

-- How check's report names a server it was given, not a configured one.
local function throwaway_name(row)
  if type(row.command) == "table" and next(row.command) then return server_command.describe(row.command) end
  return row.url
end

function commands.check(ctx, out, parsed)
  local call = call_of(parsed.flags)
  local row, message, err
  if ctx.throwaway then
    row = ctx.store:servers()[1]
  else
    row, message, err = server_named(ctx, need_server(parsed))
  end
  if not row then return refuse(out, parsed, message, err) end
  local show = progress(ctx)
  local options = setmetatable({ call = call, progress = show }, { __index = ctx.options })
  local results, summary
  results, summary, err = operator.check(ctx.store, row.uid, options)
  show()
  if not results then return refuse(out, parsed, summary, err) end
  if parsed.json then
    out:json { server = ctx.throwaway and throwaway_name(row) or row.identifier,
      id = ctx.throwaway and json.null or row.uid,
      ok = summary.ok, passed = summary.passed, failed = summary.failed, not_applicable = summary.not_applicable,
      checks = list(results) }
  else
    local rows = {}
    for i, r in ipairs(results) do
      rows[i] = { r.status .. string.rep(" ", STATUS_WIDTH - #r.status), r.id, inert(r.detail) }
    end
    render.columns(out, rows)
    out:line(string.format("%s: %d passed, %d failed, %d not applicable",
      ctx.throwaway and inert(throwaway_name(row), 300) or inert(row.identifier, 64), summary.passed, summary.failed,
      summary.not_applicable))
  end
  return summary.ok and cli.OK or cli.FAILED
end

local function import_one(ctx, row)
  -- the tools it had before, so the hint after a re-import names only the new ones
  local before = {}
  for _, t in ipairs(operator.tools(ctx.store, row.uid) or {}) do before[t.tool_name] = true end
  local report, message, err = operator.import(ctx.store, row.uid, ctx.options)
  if not report then
    report = { server_uid = row.uid, imported = 0, skipped = 0, orphaned = 0, skip_reasons = { message },
      refused = true, err = err }
  end
  report.identifier = row.identifier
  report.before = before
  return report
end

-- Which servers `import` means: every enabled one (--all), or the one named.
-- @return rows | nil, message, err
local function import_targets(ctx, parsed)
  local all, named = parsed.flags["--all"] or parsed.flags["-a"], parsed.flags["--server"]
  no_more_than(parsed, 1)
  if parsed.args[1] and parsed.args[1] ~= "" then
    if named then usage("Name the server once: as the argument, or with --server.") end
    named = parsed.args[1]
  end
  if all and named then usage("Pass either a server or --all, not both.") end
  if not all and not named then
    usage("Name a server (identifier or id), or pass --all to import every enabled one.")
  end
  if all then return ctx.store:enabled_servers() end
  local row, message, err = server_named(ctx, named)
  if not row then return nil, message, err end
  return { row }
end

-- One server's outcome as people read it; a refusal goes to stderr, once, with what to do about it.
local function print_report(out, report)
  local who = inert(report.identifier, 64)
  if report.refused then
    local reason = report.skip_reasons[1]
    out:said(reason)
    out:err(string.format("%s: refused — %s", who, (reason and reason ~= "") and inert(reason) or "no reason given"))
    refusal_hint(out, report.err, { identifier = report.identifier })
    return
  end
  out:line(string.format("%s: %d imported, %d skipped, %d orphaned", who, report.imported, report.skipped,
    report.orphaned))
  for _, reason in ipairs(report.skip_reasons) do out:line("    skipped: " .. inert(reason)) end
end

-- The reports as data: the failure value is reduced to its kind (its
-- message is the first skip reason already).
local function json_reports(out, reports)
  local shown = {}
  for i, r in ipairs(reports) do
    shown[i] = { id = r.server_uid, server = r.identifier, imported = r.imported, skipped = r.skipped,
      orphaned = r.orphaned, skip_reasons = list(r.skip_reasons), refused = r.refused == true,
      kind = maybe(r.err and r.err.kind) }
  end
  out:json(list(shown))
end

-- The live tools of the server that are switched off and were not there
-- before the import (`before`: the names it had), sorted.
local function new_tools_off(ctx, uid, before)
  local off = {}
  for _, t in ipairs(operator.tools(ctx.store, uid) or {}) do
    if not t.orphaned and not t.enabled and not before[t.tool_name] then off[#off + 1] = t.tool_name end
  end
  table.sort(off)
  return off
end

-- After an import that brought tools in: where they stand and how to switch them on. A first
-- import may name the group (every tool on); a re-import names only its new tools, one by one,
-- so the hint never switches back on a tool the operator switched off.
local function switch_hint(ctx, out, reports)
  for _, r in ipairs(reports) do
    local off = (not r.refused and r.imported > 0) and new_tools_off(ctx, r.server_uid, r.before or {}) or {}
    local who = inert(r.identifier, 64)
    if #off > 0 and next(r.before or {}) == nil then
      out:line(string.format("Imported tools start switched off: `mcpclient enable <tool>` switches one on, "
        .. "`mcpclient enable mcp_%s` all of this server's (see `mcpclient tools %s`).", who, who))
    elseif #off > 0 then
      local shown = {}
      for i = 1, math.min(#off, 5) do shown[i] = "`mcpclient enable " .. inert(off[i], 64) .. "`" end
      out:line(string.format("New tools start switched off: %s%s switches %s on (see `mcpclient tools %s`).",
        table.concat(shown, ", "), #off > 5 and string.format(" (and %d more)", #off - 5) or "",
        #off == 1 and "it" or "each", who))
    end
  end
end

function commands.import(ctx, out, parsed)
  local targets, message, err = import_targets(ctx, parsed)
  if not targets then return refuse(out, parsed, message, err) end
  if #targets == 0 then
    if parsed.json then out:json(list {}) else out:err("No enabled MCP server to import.") end
    return cli.OK
  end
  local show = progress(ctx)
  local reports = fan_out(targets, function(row) return import_one(ctx, row) end,
    function(row, i) show(string.format("importing %s (%d of %d)…", inert(row.identifier, 64), i, #targets)) end)
  show()
  local refused = 0
  for _, report in ipairs(reports) do
    if report.refused then refused = refused + 1 end
    if not parsed.json then print_report(out, report) end
  end
  if parsed.json then
    json_reports(out, reports)
  else
    switch_hint(ctx, out, reports)
    if refused > 0 and #targets > 1 then
      out:err(string.format("%d of %d server(s) refused the import.", refused, #targets))
    end
  end
  return refused > 0 and cli.FAILED or cli.OK
end

function commands.tools(ctx, out, parsed)
  no_more_than(parsed, 1)
  local uid
  if parsed.args[1] then
    local row, message, err = server_named(ctx, parsed.args[1])
    if not row then return refuse(out, parsed, message, err) end
    uid = row.uid
  end
  local tools, message, err = operator.tools(ctx.store, uid)
  if not tools then return refuse(out, parsed, message, err) end
  if parsed.json then
    local shown = {}
    for i, t in ipairs(tools) do shown[i] = render.tool_json(t) end
    out:json(list(shown))
    return cli.OK
  end
  if #tools == 0 then out:line(operator.NO_TOOLS); return cli.OK end
  render.tools(out, tools)
  return cli.OK
end

-- The JSON-RPC codes a server answers a read of a URI it does not have with
-- (the protocol's resource-not-found, or invalid params).
local RESOURCE_NOT_FOUND, INVALID_PARAMS = -32002, -32602

-- What a server offers beside its tools, asked live (operator.offers).
local function offers_of(ctx, out, parsed, what, uri)
  local row, message, err = server_named(ctx, parsed.args[1])
  if not row then return nil, refuse(out, parsed, message, err) end
  local answer
  answer, message, err = operator.offers(ctx.store, row.uid, what, uri, ctx.options)
  if not answer and what ~= "read" and type(err) == "table" and err.kind == "not_offered" then
    -- a server without prompts (or resources) offers none: an empty listing, not a failure
    return { prompts = {}, resources = {}, templates = {}, not_offered = true }
  end
  if not answer and what == "read" and type(err) == "table" and err.kind == "rpc_error"
    and (err.rpc_code == RESOURCE_NOT_FOUND or err.rpc_code == INVALID_PARAMS) then
    local who = inert(row.identifier, 64)
    message = string.format('%s has no such resource: "%s" (its resources: `mcpclient resources %s`). It said: %s',
      who, inert(uri, 300), who, inert(errors.own_words(err.detail or "", err.rpc_code), 300))
  end
  if not answer then
    local code = refuse(out, parsed, message, err)
    if not parsed.json then refusal_hint(out, err, row) end
    return nil, code
  end
  return answer
end

function commands.resources(ctx, out, parsed)
  need_server(parsed)
  local answer, code = offers_of(ctx, out, parsed, "resources")
  if not answer then return code end
  if parsed.json then
    out:json(render.resources_json(answer.resources, answer.templates))
  elseif answer.not_offered then
    out:line("The server offers no resources.")
  else
    render.resources(out, answer.resources, answer.templates)
  end
  return cli.OK
end

function commands.prompts(ctx, out, parsed)
  need_server(parsed)
  local answer, code = offers_of(ctx, out, parsed, "prompts")
  if not answer then return code end
  if parsed.json then
    out:json(render.prompts_json(answer.prompts))
  elseif answer.not_offered then
    out:line("The server offers no prompts.")
  else
    render.prompts(out, answer.prompts)
  end
  return cli.OK
end

function commands.read(ctx, out, parsed)
  if #parsed.args < 2 then usage('"read" needs a server and a resource URI (see `mcpclient resources <server>`).') end
  no_more_than(parsed, 2)
  local answer, code = offers_of(ctx, out, parsed, "read", parsed.args[2])
  if not answer then return code end
  if parsed.json then out:json(render.read_json(parsed.args[2], answer.read)) else render.read(out, answer.read) end
  return cli.OK
end

-- Switch every tool of a group on, after the group itself.
-- @return the number switched | nil, message, err
local function group_tools_on(ctx, group)
  local tools, message, err = operator.tools(ctx.store)
  if not tools then return nil, message, err end
  local count = 0
  for _, t in ipairs(tools) do
    if t.group == group and not t.orphaned then
      local ok
      ok, message, err = operator.set_enabled(ctx.store, t.tool_name, true,
        setmetatable({ what = "tool" }, { __index = ctx.options }))
      if not ok then return nil, message, err end
      count = count + 1
    end
  end
  return count
end

-- " Did you mean …?" for a tool or group name no tool has: the tools whose
-- remote name it is (`echo` for mcp_ev_echo), else the closest tool or group
-- name by edit distance; "" when none is close.
names_like = function(ctx, name)
  local by_remote, candidates, seen = {}, {}, {}
  for _, t in ipairs(operator.tools(ctx.store) or {}) do
    if not t.orphaned then
      if t.remote_name == name then by_remote[#by_remote + 1] = t.tool_name end
      for _, candidate in ipairs { t.tool_name, t.group } do
        if type(candidate) == "string" and not seen[candidate] then
          seen[candidate] = true
          candidates[#candidates + 1] = candidate
        end
      end
    end
  end
  if #by_remote > 0 then
    table.sort(by_remote)
    local shown = {}
    for i = 1, math.min(#by_remote, 3) do shown[i] = '"' .. inert(by_remote[i], 64) .. '"' end
    return string.format(" Did you mean %s? (a tool is named mcp_<server>_<remote name>)",
      table.concat(shown, " or "))
  end
  table.sort(candidates)
  return did_you_mean(name, candidates)
end

-- The group that keeps a tool off although its own switch is on, or nil.
local function group_keeping_off(ctx, tool_name)
  for _, t in ipairs(operator.tools(ctx.store) or {}) do
    if t.tool_name == tool_name and t.group_state == false then return t.group end
  end
  return nil
end

local function switch(enabled)
  return function(ctx, out, parsed)
    if #parsed.args == 0 then usage(string.format('"%s" needs a tool name or a group name.', parsed.command)) end
    no_more_than(parsed, 1)
    if parsed.flags["--tool"] and parsed.flags["--group"] then usage("Pass --tool or --group, not both.") end
    local what = parsed.flags["--tool"] and "tool" or parsed.flags["--group"] and "group" or nil
    local options = setmetatable({ what = what }, { __index = ctx.options })
    local name = parsed.args[1]
    local done, message, err = operator.set_enabled(ctx.store, name, enabled, options)
    if not done then
      if type(err) == "table" and err.kind == "unknown_tool" then message = message .. names_like(ctx, name) end
      return refuse(out, parsed, message, err)
    end
    local count, group_off
    if done == "group" and enabled then
      count, message, err = group_tools_on(ctx, name)
      if not count then return refuse(out, parsed, message, err) end
    elseif done == "tool" and enabled then
      group_off = group_keeping_off(ctx, name)
    end
    if parsed.json then
      out:json { name = name, switch = done, enabled = enabled, tools_switched_on = maybe(count),
        group_off = maybe(group_off) }
    elseif group_off then
      out:line(string.format("Tool %s is switched on, but it stays off: its group %s is off. `mcpclient enable %s` "
        .. "switches the group on.", inert(name, 64), inert(group_off, 64), inert(group_off, 64)))
    elseif done == "tool" then
      out:line(string.format("Tool %s %s.", inert(name, 64), enabled and "on" or "off"))
    elseif enabled then
      out:line(string.format("Group %s on, and its %d tool(s) on.", inert(name, 64), count))
    else
      out:line(string.format("Group %s off: none of its tools is offered until the group is on again.",
        inert(name, 64)))
    end
    return cli.OK
  end
end
commands.enable = switch(true)
commands.disable = switch(false)

-- A value the store cannot take is a usage error; a conflict with other rows is a failure.
local function refused_edit(out, parsed, message, err)
  if err.kind == "invalid" then usage(message) end
  return refuse(out, parsed, message, err)
end

-- An identifier stored otherwise than given (trimmed, lower case): say so, once.
local function identifier_stored_as(out, given, row)
  if given == nil or row == nil or given == row.identifier then return end
  out:err(string.format('warning: the identifier "%s" is stored as "%s" (identifiers are lower case; its tools are '
    .. "named mcp_%s_<tool>).", inert(given, 64), inert(row.identifier, 64), inert(row.identifier, 64)))
end

-- What a just-added server still needs, and the commands that fix it.
local function after_add(out, row)
  local who = inert(row.identifier, 64)
  if tostring(row.requires_approval) ~= "0" then
    out:line(string.format("Approval: a human approves every call of its tools (the default), so an agent's turn "
      .. "waits for an approval; `mcpclient edit %s --approval no` lets them run without asking.", who))
  end
  local missing = operator.missing(row)
  if #missing == 0 then
    out:line(string.format("Next: `mcpclient import %s` fetches its tools.", who))
    return
  end
  out:line("Not usable yet:")
  for _, m in ipairs(missing) do
    out:line(string.format("  - %s: `mcpclient edit %s %s`", m.text, who, m.flags))
  end
end

function commands.add(ctx, out, parsed)
  if parsed.flags["--from"] ~= nil then
    return from_file.run(ctx, out, parsed, { usage = usage, OK = cli.OK, FAILED = cli.FAILED,
      refuse = function(message, err) return refuse(out, parsed, message, err) end })
  end
  for _, flag in ipairs { "--format", "--replace", "--input" } do
    if parsed.flags[flag] ~= nil then usage(flag .. " goes with --from FILE.") end
  end
  no_more_than(parsed, 0)
  local fields = server_fields(parsed.flags, parsed.argv)
  for _, required in ipairs { "identifier", "name" } do
    if fields[required] == nil then usage(string.format('"add" needs --%s.', required)) end
  end
  if (fields.url == nil) == (fields.command == nil) then
    usage('"add" needs --url, or the command of a stdio server after -- (not both).')
  end
  if fields.auth_credential == "" then
    usage("An empty --credential names nothing: leave it out for a server without a credential.")
  end
  local uid, message, err = operator.add(ctx.store, fields, ctx.options)
  if not uid and type(err) == "table" and err.kind == "conflict" and not parsed.json then
    local code = refused_edit(out, parsed, message, err)
    local who = inert(fields.identifier, 64)
    out:err(string.format("To change that server, `mcpclient edit %s …` (the same flags); to replace it, "
      .. "`mcpclient remove %s` first, then add again.", who, who))
    return code
  end
  if not uid then return refused_edit(out, parsed, message, err) end
  local row = ctx.store:server(uid)
  identifier_stored_as(out, fields.identifier, row)
  if parsed.json then
    local missing = {}
    for i, m in ipairs(operator.missing(row)) do
      missing[i] = { field = m.field, text = m.text,
        fix = string.format("mcpclient edit %s %s", row.identifier, m.flags) }
    end
    out:json { id = uid, identifier = row.identifier, usable = #missing == 0, missing = list(missing),
      requires_approval = tostring(row.requires_approval) ~= "0" }
    return cli.OK
  end
  out:line(string.format("Added server %d (%s).", uid, inert(row and row.identifier, 64)))
  after_add(out, row)
  return cli.OK
end

function commands.edit(ctx, out, parsed)
  local given = need_server(parsed)
  local fields = server_fields(parsed.flags, parsed.argv)
  if next(fields) == nil then usage('"edit" needs at least one server flag (see `mcpclient edit --help`).') end
  local row, message, err = server_named(ctx, given)
  if not row then return refuse(out, parsed, message, err) end
  local ok, forgotten
  ok, forgotten, err = operator.edit(ctx.store, row.uid, fields, ctx.options)
  if not ok then return refused_edit(out, parsed, forgotten, err) end
  local stored = ctx.store:server(row.uid)
  identifier_stored_as(out, fields.identifier, stored)
  local now = stored or row
  if parsed.json then
    out:json { id = row.uid, identifier = now.identifier, updated = true, grants_forgotten = forgotten or 0 }
  else
    out:line(string.format("Updated server %d (%s).", row.uid, inert(row.identifier, 64)))
    if (forgotten or 0) > 0 then
      out:line(string.format("Its stored OAuth authorization was for the old URL and is forgotten; "
        .. "log in again with `mcpclient login %s` if the new one needs it.", inert(now.identifier, 64)))
    end
  end
  return cli.OK
end

function commands.remove(ctx, out, parsed)
  local row, message, err = server_named(ctx, need_server(parsed))
  if not row then return refuse(out, parsed, message, err) end
  local ok, forgotten
  ok, forgotten, err = operator.remove(ctx.store, row.uid, ctx.options)
  if not ok then return refuse(out, parsed, forgotten, err) end
  if parsed.json then
    out:json { id = row.uid, identifier = row.identifier, removed = true, grants_forgotten = forgotten or 0 }
  else
    out:line(string.format("Removed server %d (%s).", row.uid, inert(row.identifier, 64)))
    if (forgotten or 0) > 0 then out:line("Its stored OAuth authorization is forgotten with it.") end
  end
  return cli.OK
end

-- Where the person goes: the authorization URL, where the browser comes back
-- to, and how to do it from another machine (the port forwarded over SSH).
local function announcer(out, parsed, row, wait, fixed)
  return function(url, port)
    local stream = parsed.json and out.err or out.line
    local who = inert(row.identifier, 64)
    stream(out, string.format("To log in to %s, open this URL in a browser:", who))
    stream(out, "  " .. inert(url, 4000))
    stream(out, string.format("Waiting up to %d s for the redirect to http://127.0.0.1:%d/callback …", wait, port))
    if fixed then
      stream(out, string.format("Over SSH, forward that port from the machine with the browser first: "
        .. "ssh -L %d:127.0.0.1:%d <this host>", port, port))
    else
      stream(out, string.format("Over SSH, run `mcpclient login %s --port 8765` instead and forward the port "
        .. "from the machine with the browser: ssh -L 8765:127.0.0.1:8765 <this host>", who))
    end
    -- a person (or a script) reads this while the command waits: no buffering
    if out.stdout.flush then out.stdout:flush() end
    if out.stderr.flush then out.stderr:flush() end
  end
end

-- The login's own options from its flags (usage errors raise).
local function login_options(flags)
  local wait = tonumber(flags["--wait"] or login.DEFAULT_WAIT)
  if not wait or wait <= 0 or wait > 3600 then usage("--wait is a number of seconds up to 3600.") end
  local port
  if flags["--port"] ~= nil then
    port = math.tointeger(tonumber(flags["--port"]))
    if not port or port < 1 or port > 65535 then usage("--port is a TCP port number, 1 to 65535.") end
  end
  local client_id, secret, scope = flags["--client-id"], flags["--client-secret"], flags["--scope"]
  if client_id == "" then usage("--client-id needs the client's identifier at the authorization server.") end
  if secret ~= nil then
    if not client_id then usage("--client-secret goes with --client-id.") end
    -- a reference only: the secret itself would sit in the shell's history and the process list
    if not secret:match("^env:[%a_][%w_]*$") then
      usage("--client-secret takes a reference, env:NAME (the variable that holds the secret), never the secret.")
    end
  end
  if scope ~= nil and (scope == "" or scope:find("[%c\"]")) then
    usage("--scope is a space-separated list of scopes.")
  end
  return { wait = wait, port = port, client_id = client_id, client_secret = secret, scope = scope }
end

function commands.login(ctx, out, parsed)
  local row, message, err = server_named(ctx, need_server(parsed))
  if not row then return refuse(out, parsed, message, err) end
  local options = setmetatable(login_options(parsed.flags), { __index = ctx.options })
  options.announce = announcer(out, parsed, row, options.wait, options.port ~= nil)
  local status
  status, message, err = login.run(ctx.store, row, options)
  grants.protect(ctx.path)
  if not status then return refuse(out, parsed, message, err) end
  if parsed.json then
    out:json { server = row.identifier, id = row.uid, authorization = render.grant_json(status) }
  else
    local card = operator.readout(ctx.store)
    for _, c in ipairs(card or {}) do
      if c.uid == row.uid and c.authorization then out:line("Logged in: " .. inert(c.authorization, 300)) end
    end
  end
  return cli.OK
end

function commands.logout(ctx, out, parsed)
  local row, message, err = server_named(ctx, need_server(parsed))
  if not row then return refuse(out, parsed, message, err) end
  local removed
  removed, message, err = grants.forget(ctx.store, row.identifier)
  if not removed then return refuse(out, parsed, message, err) end
  if parsed.json then
    out:json { server = row.identifier, id = row.uid, grants_removed = removed }
  elseif removed == 0 then
    out:line(string.format("%s had no stored authorization.", inert(row.identifier, 64)))
  else
    out:line(string.format("Logged out of %s: its stored authorization is removed.", inert(row.identifier, 64)))
  end
  return cli.OK
end

-- The agent runs and what to do about each (see docs/CLI.md, "Runs after a crash").
-- mcpclient runs approve|deny <run> [<step id>] [--reason TEXT] (also `mcpclient approve|deny ...`): a
-- person's decision on one waiting step of a run, or on every step not decided yet. An unknown run or
-- step id is refused, and nothing changes.
local function decide_run(ctx, out, parsed, verb, words)
  local spelled = words == 1 and verb or ("runs " .. verb)
  if #parsed.args < words then
    usage(string.format('"%s" needs a run id (see `mcpclient runs --waiting`).', spelled))
  end
  no_more_than(parsed, words + 1)
  local id = math.tointeger(tonumber(parsed.args[words]))
  if not id or id <= 0 then usage(string.format('"%s" needs a run id, a positive number.', spelled)) end
  local step = parsed.args[words + 1]
  local reason = parsed.flags["--reason"]
  if reason ~= nil and verb ~= "deny" then usage("--reason goes with deny.") end
  local user = os.getenv("USER")
  local by = "cli:" .. ((user and user ~= "") and user or "operator")
  local view, message, err = operator.decide(ctx.store, id, verb == "approve",
    { actor = ACTOR, by = by, id = step, reason = reason })
  if not view then return refuse(out, parsed, message, err) end
  if parsed.json then
    out:json(render.run_json(view))
  else
    out:line(string.format("Run %d%s is %s. %s", id, step and (" step " .. inert(step, 80)) or "",
      verb == "approve" and "approved" or "denied", view.next))
  end
  return cli.OK
end

function commands.approve(ctx, out, parsed) return decide_run(ctx, out, parsed, "approve", 1) end
function commands.deny(ctx, out, parsed) return decide_run(ctx, out, parsed, "deny", 1) end

function commands.runs(ctx, out, parsed)
  if parsed.args[1] == "approve" or parsed.args[1] == "deny" then
    return decide_run(ctx, out, parsed, parsed.args[1], 2)
  end
  no_more_than(parsed, 0)
  if parsed.flags["--reason"] ~= nil then usage("--reason goes with `runs deny`.") end
  local waiting_only = parsed.flags["--waiting"] == true
  local views, message, err = operator.runs(ctx.store, { open = parsed.flags["--open"] == true or waiting_only,
    waiting = waiting_only })
  if not views then return refuse(out, parsed, message, err) end
  if parsed.json then
    local shown = {}
    for i, view in ipairs(views) do shown[i] = render.run_json(view) end
    out:json(list(shown))
    return cli.OK
  end
  if #views == 0 then
    out:line(waiting_only and "No run waits for a person." or parsed.flags["--open"] and "No open run."
      or "No run yet.")
    return cli.OK
  end
  for i, view in ipairs(views) do
    if i > 1 then out:line() end
    render.run(out, view)
  end
  return cli.OK
end

---------------------------------------------------------------------------
-- Tasks: the open task-backed calls of the agent runs
---------------------------------------------------------------------------

-- One stored task as the listing shows it: status, age, run, call.
local function task_view(row, now)
  return { id = row.task_id, server = row.server, status = row.status, age_seconds = math.max(0, now - row.created_at),
    run = row.run, sequence = row.sequence, tool = row.tool, started_by = row.started_by }
end

-- The server --server names (its identifier), the run --run names (its
-- uid); nil for each not given. → server, run | nil, message, err
local function task_filters(ctx, parsed)
  local server, run_uid
  if parsed.flags["--server"] ~= nil then
    local row, message, err = server_named(ctx, parsed.flags["--server"])
    if not row then return nil, message, err end
    server = row.identifier
  end
  if parsed.flags["--run"] ~= nil then
    run_uid = math.tointeger(tonumber(parsed.flags["--run"]))
    if not run_uid or run_uid <= 0 then usage("--run is a run's id (see `mcpclient runs`).") end
  end
  return { server = server, run = run_uid }
end

-- mcpclient tasks [<server>]: the open tasks, oldest first.
local function list_tasks(ctx, out, parsed)
  no_more_than(parsed, 1)
  local filters, message, err = task_filters(ctx, parsed)
  if not filters then return refuse(out, parsed, message, err) end
  local server = filters.server
  if parsed.args[1] ~= nil then
    if server ~= nil then usage("Name the server once: as the argument, or with --server.") end
    local row
    row, message, err = server_named(ctx, parsed.args[1])
    if not row then return refuse(out, parsed, message, err) end
    server = row.identifier
  end
  local rows
  rows, message, err = ctx.store:open_tasks(filters.run, server)
  if not rows then return refuse(out, parsed, message, err) end
  local now = os.time()
  if parsed.json then
    local shown = {}
    for i, row in ipairs(rows) do shown[i] = task_view(row, now) end
    out:json(list(shown))
    return cli.OK
  end
  if #rows == 0 then
    out:line("No open task.")
    return cli.OK
  end
  for _, row in ipairs(rows) do
    local v = task_view(row, now)
    out:line(string.format("%s  %s  %s  %ds old  run %d (step %d, %s)  started by %s", inert(v.id, 80),
      inert(v.server, 64), inert(v.status, 20), v.age_seconds, v.run, v.sequence, inert(v.tool, 64),
      inert(v.started_by, 64)))
  end
  return cli.OK
end

-- The one stored task `id` names under the filters. A task id is its
-- server's, unique only per server (and per session), so rows of several
-- servers or runs may share it: an open row is taken over closed ones (a
-- closed row only when no row is open), and an id that still names more
-- than one row is refused with the choices, each server and run, and how
-- to pick one. → row | nil, message, err, choices
local function stored_task(ctx, id, filters)
  local rows, message, err = ctx.store:tasks_by_id(id, filters.server, filters.run)
  if not rows then return nil, message, err end
  local open = {}
  for _, row in ipairs(rows) do
    if not row.closed then open[#open + 1] = row end
  end
  local candidates = #open > 0 and open or rows
  if #candidates == 1 then return candidates[1] end
  if #candidates == 0 then
    local within = (filters.server and string.format(' of server "%s"', inert(filters.server, 64)) or "")
      .. (filters.run and string.format(" in run %d", filters.run) or "")
    local _, _, missing = errors.fail("task", { task_id = id, reason = "unknown", detail = "not stored" })
    return nil, string.format('No stored task%s has the id "%s". List them with `mcpclient tasks`.', within,
      inert(id, 80)), missing
  end
  local servers, choices, seen = {}, {}, {}
  for i, row in ipairs(candidates) do
    choices[i] = { server = row.server, run = row.run, status = row.status, closed = row.closed }
    if not seen[row.server] then
      seen[row.server] = true
      servers[#servers + 1] = row.server
    end
  end
  local shown = {}
  for i, c in ipairs(choices) do
    shown[i] = string.format('server "%s" (run %d, %s)', inert(c.server, 64), c.run,
      c.closed and "closed" or inert(c.status, 20))
  end
  local pick = #servers == #choices and "pick one with --server NAME"
    or #servers > 1 and "pick one with --server NAME and --run ID" or "pick one with --run ID"
  local _, _, ambiguous = errors.fail("invalid", { field = "task", detail = "ambiguous task id" })
  return nil, string.format('%d %s stored tasks have the id "%s": %s. A task id is unique only per server; %s.',
    #choices, #open > 0 and "open" or "closed", inert(id, 80), table.concat(shown, "; "), pick), ambiguous, choices
end

-- A task's statuses after which there is nothing to cancel.
local ENDED = { cancelled = true, completed = true, failed = true }

-- mcpclient tasks cancel <id> [--server NAME] [--run ID]: ask the task's
-- server to cancel it. The run that follows it (or takes it over) records
-- how it ended.
local function cancel_task(ctx, out, parsed)
  if #parsed.args < 2 then usage('"tasks cancel" needs a task id (see `mcpclient tasks`).') end
  no_more_than(parsed, 2)
  local id = parsed.args[2]
  local filters, message, err = task_filters(ctx, parsed)
  if not filters then return refuse(out, parsed, message, err) end
  local row, choices
  row, message, err, choices = stored_task(ctx, id, filters)
  if not row then
    if choices and parsed.json then
      out:said(message)
      out:json { error = inert(message, 2000), kind = err.kind, choices = list(choices) }
      return cli.FAILED
    end
    return refuse(out, parsed, message, err)
  end
  local server
  server, message, err = server_named(ctx, row.server)
  if not server then return refuse(out, parsed, message, err) end
  local handle_ok, handle = pcall(json.decode, row.handle)
  if not handle_ok or type(handle) ~= "table" then
    return refuse(out, parsed, string.format("The stored handle of task %s is unreadable.", inert(id, 80)))
  end
  if handle.id ~= row.task_id or (handle.server ~= nil and handle.server ~= row.server) then
    return refuse(out, parsed, string.format('The stored handle of task %s does not name it on server "%s".',
      inert(id, 80), inert(row.server, 64)))
  end
  local conn
  conn, message, err = catalogue_connect(server, setmetatable({ store = ctx.store }, { __index = ctx.options }))
  if not conn then return refuse(out, parsed, message, err) end
  local t = conn:task(handle)
  local ok
  ok, message, err = t:cancel()
  local now, already = nil, false
  if ok then
    now = t:status()
  elseif type(err) == "table" and err.kind == "task" and err.reason == "unknown" then
    -- a server refuses to cancel a task that has ended (a second cancel): ask where it stands
    now = t:status()
    already = now ~= nil and ENDED[now.status] == true
    if not already then now = nil end
  end
  conn:close()
  if not ok and not already then return refuse(out, parsed, message, err) end
  if now then ctx.store:update_task(row.uid, { status = now.status }) end
  local status = now and now.status or "cancel requested"
  if parsed.json then
    out:json { id = row.task_id, server = row.server, run = row.run, status = status, already_ended = already }
  elseif already then
    out:line(string.format("Task %s of %s (run %d) is already %s: there is nothing to cancel.", inert(id, 80),
      inert(row.server, 64), row.run, inert(status, 20)))
  else
    out:line(string.format("Asked %s to cancel task %s (run %d): now %s.", inert(row.server, 64), inert(id, 80),
      row.run, inert(status, 20)))
  end
  return cli.OK
end

function commands.tasks(ctx, out, parsed)
  if parsed.args[1] == "cancel" then return cancel_task(ctx, out, parsed) end
  return list_tasks(ctx, out, parsed)
end

---------------------------------------------------------------------------
-- The database
---------------------------------------------------------------------------

-- Commands that may create the database; every other one only reads an existing one.
local CREATES = { add = true }
-- Commands whose answer, without a database, is an empty list.
local EMPTY_WITHOUT = { servers = function(out, parsed)
  if parsed.json then out:json(list {}) else out:line(operator.NO_SERVERS) end
end, tools = function(out, parsed)
  if parsed.json then out:json(list {}) else out:line(operator.NO_TOOLS) end
end, runs = function(out, parsed)
  if parsed.json then out:json(list {}) else out:line("No run yet.") end
end, tasks = function(out, parsed)
  if parsed.json then out:json(list {}) else out:line("No open task.") end
end }

-- A shell word for `text` (single-quoted).
local function quoted(text)
  return "'" .. text:gsub("'", "'\\''") .. "'"
end

--- The database the command works on: --db, else $MCPCLIENT_DB, else the
--- XDG data directory ($XDG_DATA_HOME, else ~/.local/share)/mcpclient/mcpclient.db.
-- @return path | nil, message
function cli.database_path(parsed, getenv)
  local path = parsed.db or getenv("MCPCLIENT_DB")
  if path and path ~= "" then return path end
  local base = getenv("XDG_DATA_HOME")
  if not base or base:sub(1, 1) ~= "/" then
    local home = getenv("HOME")
    if not home or home == "" then return nil, "Neither XDG_DATA_HOME nor HOME is set: name the database with --db." end
    base = home .. "/.local/share"
  end
  return base .. "/mcpclient/mcpclient.db"
end

-- A URL (postgresql://...) goes to store.open unchanged; a file path may be missing.
local function is_file_path(path)
  return path:match("^%a[%w+.-]*://") == nil and not store_module.is_postgres(path)
end

-- Make the directory a new database file goes in (private to the user).
local function make_directory(path)
  local dir = path:match("^(.*)/[^/]+$")
  if not dir or dir == "" or os.execute("test -d " .. quoted(dir)) == true then return true end
  return os.execute("mkdir -p -m 700 " .. quoted(dir) .. " 2>/dev/null") == true
end

-- Is there a database file at `path`? Told without opening it (a FIFO opened
-- to look would block): true, false, or nil, message for a path that is not
-- a regular file and never can be one (refused at once).
local function database_file(path)
  local state, message, err = store_module.file_status(path)
  if not state then
    return nil, string.format('The database "%s" cannot be opened: %s', inert(path, 300),
      tostring(err and err.detail or message)), err
  end
  return state == "file"
end

-- Why a database could not be opened, said once (the store's own reason,
-- without repeating that it could not open it), and for PostgreSQL where
-- the password goes.
local function open_failure(path, message, err)
  local reason = tostring(err and err.detail or message)
  local text = string.format('The database "%s" cannot be opened: %s', inert(store_module.describe(path), 300), reason)
  if store_module.is_postgres(path) and reason:find("password", 1, true) then
    text = text .. " Give the password in PGPASSWORD or ~/.pgpass (a command line is not secret)."
  end
  return text
end

-- Open the store | nil, message; or false when the database is missing and this command only reads.
local function open_database(env, parsed)
  local getenv = env.getenv or os.getenv
  local path, why = cli.database_path(parsed, getenv)
  if not path then return nil, why end
  if is_file_path(path) then
    local present, refused, err = database_file(path)
    if present == nil then return nil, refused, err end
    if not present and not CREATES[parsed.command] then return false, path end
    if not present and not make_directory(path) then
      return nil, string.format('The directory for the database "%s" cannot be made.', inert(path, 300))
    end
  end
  local open = env.open_store or store_module.open
  local store, message, err = open(path)
  if store then
    grants.protect(path)   -- it may hold OAuth tokens: owner only
    return store, path
  end
  -- a connection string's password stays out of the message
  return nil, open_failure(path, message, err), err
end

---------------------------------------------------------------------------
-- Entry point
---------------------------------------------------------------------------

-- A usage error raised while parsing or running: exit code 2. Anything
-- else raised is a bug and goes on up.
local function usage_failed(out, raised, command, as_json)
  if getmetatable(raised) ~= Usage then error(raised, 0) end
  if as_json then
    -- a script asked for JSON: the refusal is JSON too (kind "invalid": the command line is)
    out:json { error = inert(raised.message, 2000), kind = "invalid", usage = true }
  end
  out:err(raised.message)
  out:err(command and string.format("Run `mcpclient %s --help` for its usage.", command)
    or "Run `mcpclient help` for usage.")
  return cli.USAGE
end

-- `help`, `help <command>`, `<command> --help`, `--version`.
local function informational(out, parsed)
  if parsed.version then out:line("mcpclient " .. tostring(core.version)); return cli.OK end
  local topic = parsed.help and parsed.command or (parsed.command == "help" and parsed.args[1]) or nil
  if parsed.help or parsed.command == "help" then
    if topic and not help.COMMANDS[topic] then
      usage(string.format('No help on "%s".%s', inert(topic, 64),
        did_you_mean(topic, sorted_keys(COMMAND_FLAGS))))
    end
    out:line(topic and help.COMMANDS[topic] or help.OVERVIEW)
    return cli.OK
  end
  return nil
end

-- What every command gets: the store, the operator options (the local
-- operator as actor, the budget; warnings to stderr unless the embedder logs them).
local function context(env, store, out, parsed, path)
  local options = setmetatable({ actor = ACTOR, budget = parsed.budget }, { __index = env.options or {} })
  if options.log == nil then
    options.log = function(_, message) out.warnings[#out.warnings + 1] = tostring(message) end
  end
  return { store = store, options = options, stderr = out.stderr, progress = env.progress, path = path,
    ask = env.ask or from_file.terminal_ask }
end

-- The library's warnings, after the command's own output, without those that
-- only repeat a failure the command printed (a refusal is printed once).
local function flush_warnings(out)
  for _, warning in ipairs(out.warnings) do
    local shown = inert(warning, 2000)
    local repeated = false
    for _, said in ipairs(out.refusals) do
      if said ~= "" and shown:find(said, 1, true) then repeated = true end
    end
    if not repeated then out:err("warning: " .. shown) end
  end
end

-- Open the database and run the parsed command on it.
local function run(env, out, parsed)
  local store, path, throwaway = env.store, nil, false
  if throwaway_target(parsed) then
    -- a URL or a command needs no configured server and no database
    local err
    store, path, err = throwaway_store(parsed)
    if not store then return refuse(out, parsed, path, err) end
    throwaway, path = true, nil
  elseif not store then
    local open_err
    store, path, open_err = open_database(env, parsed)
    if store == false then
      -- (a decision on a run is not a listing: without a database there is no run to decide on)
      if EMPTY_WITHOUT[parsed.command] and not (parsed.command == "runs" and #parsed.args > 0)
          and parsed.command ~= "approve" and parsed.command ~= "deny" then
        EMPTY_WITHOUT[parsed.command](out, parsed)
        return cli.OK
      end
      return refuse(out, parsed, string.format('No database at "%s" yet: nothing is configured. Add a server with '
        .. "`mcpclient add` (it creates the database), or name another with --db.", inert(path, 300)))
    end
    if not store then return refuse(out, parsed, path, open_err) end
  end
  local ctx = context(env, store, out, parsed, path)
  ctx.throwaway = throwaway
  local ran, code = pcall(commands[parsed.command], ctx, out, parsed)
  if store ~= env.store then store:close() end
  flush_warnings(out)
  if not ran then return usage_failed(out, code, parsed.command, parsed.json) end
  return code
end

--- Run the command.
-- @param argv the script's `arg` (arguments 1..n)
-- @param env optional, for embedding and specs: { stdout, stderr, getenv, store (an open store to use),
--   ask = function(question, secret) -> line | nil (nil: no one to ask; default: the terminal, if stdin is one),
--   open_store = function(path) -> store | nil, message, progress (boolean: force the progress line),
--   options (extra operator options: builtin_names, transport, clock, connect, ...) }
-- @return exit code
function cli.main(argv, env)
  env = env or {}
  local out = setmetatable({ stdout = env.stdout or io.stdout, stderr = env.stderr or io.stderr, warnings = {},
    refusals = {} }, Out)
  local args = {}
  for i = 1, #(argv or {}) do args[i] = argv[i] end
  local ok, parsed = pcall(parse, args)
  if not ok then
    local as_json = false
    for _, a in ipairs(args) do if a == "--json" then as_json = true end end
    return usage_failed(out, parsed, nil, as_json)
  end
  local shown
  ok, shown = pcall(informational, out, parsed)
  if not ok then return usage_failed(out, shown, nil, parsed.json) end
  if shown then return shown end
  if parsed.bare then
    -- no command: what the commands are (a usage error all the same)
    if parsed.json then out:json { error = "Name a command.", kind = "invalid", usage = true } end
    out.stderr:write(help.OVERVIEW, "\n")
    return cli.USAGE
  end
  return run(env, out, parsed)
end

return cli
