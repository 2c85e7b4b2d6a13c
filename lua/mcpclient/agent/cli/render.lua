--- How the operator command shows things: the readout's cards and the
--- tools table as text, and every command's data as JSON (docs/CLI.md is the
--- schema: numbers as numbers, timestamps as ISO 8601 UTC, booleans, null
--- where there is nothing yet).
--
-- Everything printed that a server wrote or that came from the database
-- passes core.clip or core.label: control, C1 and bidi/invisible formatting
-- characters become spaces, so no escape sequence, line break or reordering
-- mark from a server reaches the terminal. JSON goes through the library's
-- encoder, which escapes the same characters.
local core = require "mcpclient.core"
local operator = require "mcpclient.agent.operator"

local json = core.json

local render = {}

--- Text made inert and bounded.
function render.inert(text, limit)
  if text == nil then return "" end
  return core.clip(tostring(text), limit or 1000)
end
local inert = render.inert

--- Unix seconds as people read them, the one text format of the command's
--- times: `2026-12-01 23:15:58 UTC` (operator.lua's readout uses the same).
function render.stamp(t)
  return os.date("!%Y-%m-%d %H:%M:%S UTC", t)
end

--- Unix seconds as ISO 8601 UTC, or JSON null.
function render.iso(t)
  if math.type(t) ~= "integer" or t <= 0 then return json.null end
  return os.date("!%Y-%m-%dT%H:%M:%SZ", t)
end

--- A list as JSON sees it ([] when empty, not {}).
function render.list(t) return json.array(t or {}) end

-- A value, or JSON null for nil.
local function maybe(v)
  if v == nil then return json.null end
  return v
end
render.maybe = maybe

---------------------------------------------------------------------------
-- The readout
---------------------------------------------------------------------------

-- The card's labelled lines: a "!" marks what the operator should look at.
local function print_fields(out, card)
  local function row(label, value, warning)
    out:line(string.format("  %-18s%s%s", label .. ":", warning and "! " or "", inert(value, 2048)))
  end
  if card.description and card.description ~= "" then row("Description", inert(card.description, 500)) end
  if card.command then
    row("Command", card.command)
    if #card.env_names > 0 then row("Environment", table.concat(card.env_names, ", ") .. " (values not shown)") end
    if card.cwd then row("Directory", card.cwd) end
  else
    row("Endpoint", card.url)
  end
  row("Transport", card.transport)
  if card.proxy then
    row("Proxy", card.proxy == "none" and "none (the environment's proxy settings are ignored)" or card.proxy)
  end
  if card.ca_file then row("CA file", card.ca_file) end
  if card.client_cert then row("Client cert", card.client_cert) end
  if card.client_key then row("Client key", card.client_key) end
  for _, h in ipairs(card.headers or {}) do row("Header", inert(h.name, 100) .. ": " .. inert(h.value, 500)) end
  for _, r in ipairs(card.roots or {}) do
    row("Root", inert(r.uri, 1000) .. (r.name and r.name ~= "" and (" (" .. inert(r.name, 200) .. ")") or ""))
  end
  row("Authentication", inert(card.authentication, 300), card.authentication_warning)
  if card.authorization then row("OAuth", inert(card.authorization, 300), card.authorization_warning) end
  row("Data class", card.data_class, card.data_class_warning)
  row("Approval", card.approval, card.approval_warning)
  row("Last import", card.last_import)
  row("Last contact", card.contact)
  row("Tools discovered", tostring(card.tool_count))
  row("Re-import", card.reimport == "auto" and "auto — a change notice re-imports the catalogue on its own"
    or "manual — a change notice marks the catalogue stale until `mcpclient import`")
  if card.catalogue_stale then
    row("Catalogue", "stale: the server said its tools, resources or prompts changed; `mcpclient import "
      .. inert(card.identifier, 64) .. "` brings it up to date", true)
  end
end

-- The last import's error, one clipped line per stored line.
local function print_import_error(out, card)
  if card.import_error == "" then return end
  out:line("  ! Last import error:")
  for text in (card.import_error .. "\n"):gmatch("(.-)\n") do out:line("      " .. inert(text)) end
end

--- One server's card as text.
function render.card(out, card)
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

--- A stored OAuth grant as data (never the token), or JSON null.
function render.grant_json(grant)
  if not grant then return json.null end
  return { state = grant.usable and "authorized" or "needs_login", scope = maybe(grant.scope),
    expires_at = render.iso(grant.expires_at), refreshable = grant.refreshable }
end

-- The plain headers as a JSON object (empty when none).
local function headers_json(headers)
  local map = {}
  for _, h in ipairs(headers or {}) do map[h.name] = h.value end
  return map
end

local function roots_json(roots)
  local list = {}
  for i, r in ipairs(roots or {}) do list[i] = { uri = r.uri, name = maybe(r.name) } end
  return render.list(list)
end

--- One server's card as data.
function render.card_json(card)
  local tools = {}
  for i, t in ipairs(card.tools) do
    tools[i] = { tool_name = t.tool_name, remote_name = t.remote_name, orphaned = t.orphaned }
  end
  return {
    id = card.uid, identifier = card.identifier, name = card.name, description = card.description or "",
    url = card.url, enabled = card.enabled, transport = card.command and "stdio" or "http",
    command = maybe(card.command), env = card.env_names and render.list(card.env_names) or nil,
    cwd = maybe(card.cwd),
    authentication = card.auth_placement or "none", authentication_warning = card.authentication_warning,
    data_class = maybe(card.declared_data_class), requires_approval = card.requires_approval,
    last_contact = render.iso(card.last_contact_at), latency_ms = maybe(card.latency_ms),
    last_import = render.iso(card.last_imported_at), import_status = maybe(card.import_status),
    import_error = card.import_error, tool_count = card.tool_count, catalogue_stale = card.catalogue_stale,
    reimport = card.reimport,
    proxy = maybe(card.proxy), ca_file = maybe(card.ca_file), client_cert = maybe(card.client_cert),
    client_key = maybe(card.client_key), headers = headers_json(card.headers), roots = roots_json(card.roots),
    tools = render.list(tools),
    authorization = render.grant_json(card.grant),
  }
end

---------------------------------------------------------------------------
-- Tables
---------------------------------------------------------------------------

--- Rows of cells as aligned columns (two spaces apart; the last column is
--- not padded). Cells are inert already.
function render.columns(out, rows)
  local widths = {}
  for _, row in ipairs(rows) do
    for i, cell in ipairs(row) do
      widths[i] = math.max(widths[i] or 0, utf8.len(cell) or #cell)
    end
  end
  for _, row in ipairs(rows) do
    local cells = {}
    for i, cell in ipairs(row) do
      local pad = i < #row and (widths[i] - (utf8.len(cell) or #cell)) or 0
      cells[i] = cell .. string.rep(" ", pad)
    end
    out:line((table.concat(cells, "  "):gsub("%s+$", "")))
  end
end

--- The tools list as a table with a header.
function render.tools(out, tools)
  local rows = { { "TOOL", "STATE", "SERVER", "REMOTE NAME", "DESCRIPTION" } }
  for _, t in ipairs(tools) do
    local state = t.enabled and "on" or "off"
    if t.orphaned then state = state .. " (gone)" end
    rows[#rows + 1] = { inert(t.tool_name, 64), state, inert(t.identifier, 64), inert(t.remote_name, 64),
      inert(t.description, 80) }
  end
  render.columns(out, rows)
end

---------------------------------------------------------------------------
-- Runs
---------------------------------------------------------------------------

-- One fenced call in words.
local function fence_line(entry)
  if entry.unnamed then
    return string.format("an unnamed write (%s): the audit cannot be matched to it", inert(entry.text, 64))
  end
  local state = entry.recorded and "in the audit" or "NOT in the audit (it may or may not have run)"
  if entry.task_id and not entry.recorded then
    state = string.format("running as task %s on its server, NOT in the audit yet", inert(entry.task_id, 80))
  end
  return string.format("%s, arguments sha256 %s, audit sequence %s: %s", inert(entry.tool, 64),
    inert(entry.arguments_sha256, 64), entry.sequence and tostring(entry.sequence) or "?", state)
end

-- One step a waiting run waits on, as a person reads it (every part inert).
-- Each starts with the step's id, what it waits for ("needs approval", or
-- "behind <id>") and the decision on it, if any.
local function step_line(step)
  local waits = step.reason == "approval" and "needs approval"
    or (step.reason or ""):match("^behind:") and ("behind " .. inert(step.reason:sub(8), 80)) or inert(step.reason, 80)
  local head = string.format("%s (%s%s) ", inert(step.id, 80), waits,
    step.decision and (", " .. step.decision .. (step.denial_reason and (": " .. inert(step.denial_reason, 200))
      or "")) or "")
  if step.kind == "call" then
    return head .. string.format("call %s %s", inert(step.name, 64),
      inert(json.try_encode(step.arguments) or "{}", 300))
  elseif step.kind == "read" then
    return head .. string.format("read %s from %s", inert(step.uri, 200), inert(step.server, 64))
  end
  return head .. string.format("prompt %s from %s %s", inert(step.name, 64), inert(step.server, 64),
    inert(json.try_encode(step.arguments) or "{}", 300))
end

-- A waiting run's steps and decision as data, or JSON null.
local function waiting_json(waiting)
  if not waiting then return json.null end
  local steps = {}
  for i, step in ipairs(waiting.steps) do
    steps[i] = { id = step.id, kind = step.kind, name = step.name, server = step.server, uri = step.uri,
      arguments = step.arguments and json.try_encode(step.arguments) and step.arguments or nil,
      needs_approval = step.needs_approval, reason = step.reason, decision = maybe(step.decision),
      denial_reason = step.denial_reason }
  end
  return { round = waiting.round, steps = render.list(steps), approval = maybe(waiting.approval) }
end

--- One run as text: its state, owner, lease, fence and next step.
function render.run(out, view)
  out:line(string.format("run %d  %s  [%s]", view.uid, inert(view.uuid, 64), inert(view.status, 32)))
  local function row(label, value)
    -- a row that goes on the one above (a second fenced call, a second waiting step) has no label
    out:line(string.format("  %-10s%s", label == "" and "" or (label .. ":"), value))
  end
  row("Owner", view.owner ~= "" and inert(view.owner, 64) or "(none)")
  local lease = render.iso(view.lease_expires) ~= json.null and render.stamp(view.lease_expires) or nil
  row("Lease", lease == nil and "(none)" or (lease .. (view.lease_expired and " (expired)" or "")))
  if view.user_name ~= "" then row("User", inert(view.user_name, 64)) end
  if view.cancel_requested then row("Cancel", "requested") end
  if #view.fence == 0 then
    row("Fence", "clear")
  else
    for i, entry in ipairs(view.fence) do row(i == 1 and "Fence" or "", fence_line(entry)) end
  end
  if view.waiting then
    for i, step in ipairs(view.waiting.steps) do row(i == 1 and "Waiting" or "", step_line(step)) end
    local decided = view.waiting.approval
    if not decided then
      for _, step in ipairs(view.waiting.steps) do
        if step.decision then decided = "step by step (above)" end
      end
    end
    row("Decision", decided or "none yet")
  end
  row("Next", view.next)
end

--- One run as data.
function render.run_json(view)
  local fence = {}
  for i, e in ipairs(view.fence) do
    fence[i] = e.unnamed and { unnamed = true, text = e.text, recorded = false }
      or { tool = e.tool, arguments_sha256 = e.arguments_sha256, sequence = maybe(e.sequence), recorded = e.recorded,
        task_id = e.task_id }
  end
  return { id = view.uid, uuid = view.uuid, status = view.status, owner = view.owner,
    lease_expires = render.iso(view.lease_expires), lease_expired = view.lease_expired, user = view.user_name,
    configuration = view.configuration, created = render.iso(view.created), updated = render.iso(view.updated),
    cancel_requested = view.cancel_requested, fence = render.list(fence), waiting = waiting_json(view.waiting),
    next = view.next }
end

--- A tool as data.
function render.tool_json(t)
  return { server_id = t.server_uid, server = t.identifier, tool_name = t.tool_name, remote_name = t.remote_name,
    description = t.description or "", enabled = t.enabled, orphaned = t.orphaned, group = t.group,
    tool_switch = maybe(t.tool_state), group_switch = maybe(t.group_state) }
end

---------------------------------------------------------------------------
-- What a server offers beside its tools
---------------------------------------------------------------------------

--- The resources and templates as a table (every cell inert).
function render.resources(out, resources, templates)
  if #resources == 0 and #templates == 0 then
    out:line("The server lists no resources.")
    return
  end
  local rows = { { "URI", "NAME", "TYPE", "DESCRIPTION" } }
  for _, r in ipairs(resources) do
    rows[#rows + 1] = { inert(r.uri, 200), inert(r.title or r.name, 64), inert(r.mimeType, 40),
      inert(r.description, 80) }
  end
  for _, t in ipairs(templates) do
    rows[#rows + 1] = { inert(t.uriTemplate, 200), inert(t.title or t.name, 64), "template", inert(t.description, 80) }
  end
  render.columns(out, rows)
end

-- A string field as JSON: inert text, or null.
local function text_or_null(v, limit)
  if type(v) ~= "string" then return json.null end
  return inert(v, limit)
end

--- The resources and templates as data.
function render.resources_json(resources, templates)
  local r, t = {}, {}
  for i, e in ipairs(resources) do
    r[i] = { uri = inert(e.uri, 2048), name = text_or_null(e.name, 200), title = text_or_null(e.title, 200),
      mime_type = text_or_null(e.mimeType, 200), description = text_or_null(e.description, 2000),
      size = math.type(e.size) == "integer" and e.size or json.null }
  end
  for i, e in ipairs(templates) do
    t[i] = { uri_template = inert(e.uriTemplate, 2048), name = text_or_null(e.name, 200),
      title = text_or_null(e.title, 200), mime_type = text_or_null(e.mimeType, 200),
      description = text_or_null(e.description, 2000) }
  end
  return { resources = render.list(r), templates = render.list(t) }
end

-- A prompt's arguments as "name*" (required) words.
local function argument_names(p)
  local names = {}
  if type(p.arguments) == "table" then
    for _, a in ipairs(p.arguments) do
      if type(a) == "table" and type(a.name) == "string" then
        names[#names + 1] = inert(a.name, 64) .. (a.required == true and "*" or "")
      end
    end
  end
  return names
end

--- The prompts as a table.
function render.prompts(out, prompts)
  if #prompts == 0 then
    out:line("The server lists no prompts.")
    return
  end
  local rows = { { "PROMPT", "ARGUMENTS (* required)", "DESCRIPTION" } }
  for _, p in ipairs(prompts) do
    rows[#rows + 1] = { inert(p.name, 64), table.concat(argument_names(p), " "), inert(p.description, 80) }
  end
  render.columns(out, rows)
end

--- The prompts as data.
function render.prompts_json(prompts)
  local list = {}
  for i, p in ipairs(prompts) do
    local arguments = {}
    if type(p.arguments) == "table" then
      for _, a in ipairs(p.arguments) do
        if type(a) == "table" and type(a.name) == "string" then
          arguments[#arguments + 1] = { name = inert(a.name, 200), required = a.required == true,
            description = text_or_null(a.description, 2000) }
        end
      end
    end
    list[i] = { name = inert(p.name, 200), title = text_or_null(p.title, 200),
      description = text_or_null(p.description, 2000), arguments = render.list(arguments) }
  end
  return render.list(list)
end

--- A read resource as text: what a model reads (the note first), each line inert.
function render.read(out, read)
  for text in (read.text .. "\n"):gmatch("(.-)\n") do out:line(inert(text, 50000)) end
end

--- A read resource as data: each content's uri, type, its text (inert) or the blob's size.
function render.read_json(uri, read)
  local contents = {}
  for i, c in ipairs(read.contents) do
    contents[i] = { uri = text_or_null(c.uri, 2048), mime_type = text_or_null(c.mime_type, 200),
      text = c.text and inert(c.text, 50000) or json.null, blob_bytes = c.blob and #c.blob or json.null }
  end
  return { uri = inert(uri, 2048), contents = render.list(contents), note = text_or_null(read.note, 1000) }
end

return render
