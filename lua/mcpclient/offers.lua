--- What a server offers beside its tools: resources, resource templates,
-- prompts, completion, subscriptions and the change notices.
--
-- These are operations of a connection (connection.lua installs them); they
-- are built on the protocol session only, so they work the same over every
-- channel. Each holds to the rules of list_tools and call_tool: one deadline
-- per operation, at most one health contact (when it completes), the paging
-- ceiling and the walk's bounds, the read cap of every page, and the text
-- rule on everything a person or a model may read. A request the server has
-- not advertised (its capability) is not sent: it fails "not_offered".
local core = require "mcpclient.core"
local errors = require "mcpclient.errors"
local era = require "mcpclient.era"

local json = core.json
local fail = errors.fail

local offers = {}

-- The whole walk of one listing, all pages together (as list_tools' bounds).
offers.MAX_LISTED = 10000
offers.MAX_LISTED_BYTES = 8 * 1024 * 1024
offers.MAX_LISTED_CONTAINERS = 131072
-- What completion/complete may hand back (the protocol's own ceiling).
offers.MAX_COMPLETIONS = 100
-- How much of a display field is kept: names and titles, descriptions.
local NAME_LIMIT, DESCRIPTION_LIMIT, VALUE_LIMIT = 200, 2000, 1000
-- How many links a tool result's note names.
local NAMED_LINKS = 10

-- The listings: the method, the result's array, the capability it needs,
-- the field that identifies an entry (kept exactly: it is what a later
-- request sends back) and the display fields the text rule applies to,
-- each with the code points it keeps.
local LISTINGS = {
  resources = { method = "resources/list", key = "resources", capability = "resources", id = "uri",
    what = "resource listing", display = { name = NAME_LIMIT, title = NAME_LIMIT, mimeType = NAME_LIMIT,
      description = DESCRIPTION_LIMIT } },
  templates = { method = "resources/templates/list", key = "resourceTemplates", capability = "resources",
    id = "uriTemplate", what = "resource template listing", display = { name = NAME_LIMIT, title = NAME_LIMIT,
      mimeType = NAME_LIMIT, description = DESCRIPTION_LIMIT } },
  prompts = { method = "prompts/list", key = "prompts", capability = "prompts", id = "name",
    what = "prompt listing", display = { title = NAME_LIMIT, description = DESCRIPTION_LIMIT }, arguments = true },
}
offers.LISTINGS = LISTINGS

-- The notice kind that makes each cached listing stale.
local STALE_BY = { resources = { "resources", "templates" }, prompts = { "prompts" } }

---------------------------------------------------------------------------
-- The capability rule
---------------------------------------------------------------------------

-- Has the server advertised `capability` (and `feature` inside it, when
-- given)? The era is opened first: the capabilities come with it.
-- @return true | nil, message, err
local function offered(conn, op, method, capability, feature)
  local ok, message, err = conn.session:open(op)
  if not ok then return nil, message, err end
  local caps = conn.session.state.capabilities or {}
  local cap = caps[capability]
  local has = type(cap) == "table" and cap ~= json.null
  if has and feature then has = cap[feature] == true end
  if not has then
    return fail("not_offered", { server = conn.identifier, method = method,
      capability = feature and (capability .. "." .. feature) or capability })
  end
  return true
end

-- One request for something the server must have advertised: the
-- capability checked first (nothing is sent without it), then the request.
-- @return reply | nil, message, err
local function ask(conn, op, method, capability, params)
  local ok, message, err = offered(conn, op, method, capability)
  if not ok then return nil, message, err end
  return conn.session:request(op, method, params)
end

---------------------------------------------------------------------------
-- The text rule on display fields
---------------------------------------------------------------------------

-- A display field under the text rule; anything that is not a string is
-- dropped rather than converted.
local function shown(value, limit)
  if type(value) ~= "string" then return nil end
  return core.clip(value, limit)
end

-- The prompt arguments' display fields under the text rule, for the
-- entries from..to of `list` (a prompt listing's, already cleaned).
local function clean_arguments(list, from, to)
  for i = from, to do
    local arguments = list[i].arguments
    if type(arguments) == "table" then
      for _, argument in ipairs(arguments) do
        if type(argument) == "table" then
          argument.title = shown(argument.title, NAME_LIMIT)
          argument.description = shown(argument.description, DESCRIPTION_LIMIT)
        end
      end
    end
  end
end

---------------------------------------------------------------------------
-- Listings
---------------------------------------------------------------------------

-- The freshness of a walk is that of its stalest page.
local function merge_hint(listing, hint)
  listing.ttl_ms = listing.ttl_ms and math.min(listing.ttl_ms, hint.ttl_ms) or hint.ttl_ms
  if listing.cache_scope ~= "private" then listing.cache_scope = hint.cache_scope or listing.cache_scope end
end

-- One page's entries, or a failure once the walk is over its bounds.
local function take_page(conn, spec, walk, reply)
  local page = reply.result[spec.key]
  if type(page) ~= "table" or not json.is_array(page) then
    return fail("malformed", { server = conn.identifier,
      detail = string.format('the %s carries no "%s" array', spec.what, spec.key) })
  end
  walk.entries = walk.entries + #page
  walk.bytes = walk.bytes + (reply.bytes or 0)
  walk.containers = walk.containers + (reply.containers or 0)
  if walk.entries > offers.MAX_LISTED or walk.bytes > offers.MAX_LISTED_BYTES
    or walk.containers > offers.MAX_LISTED_CONTAINERS then
    return fail("malformed", { server = conn.identifier, detail = string.format(
      "the %s exceeds %d entries, %d bytes or %d objects and arrays across its pages",
      spec.what, offers.MAX_LISTED, offers.MAX_LISTED_BYTES, offers.MAX_LISTED_CONTAINERS) })
  end
  return page
end

-- Walk every page of a listing into `items`. A cursor is opaque: an empty
-- string is a cursor too, and only its absence ends the walk.
-- @return listing { era, ttl_ms, cache_scope } | nil, message, err
local function walk(conn, op, spec, items, on_page)
  local ok, message, err = offered(conn, op, spec.method, spec.capability)
  if not ok then return nil, message, err end
  local state = { entries = 0, bytes = 0, containers = 0 }
  local listing, params = {}, {}
  for _ = 1, conn.MAX_PAGES do
    local reply, page
    reply, message, err = conn.session:request(op, spec.method, params)
    if not reply then return nil, message, err end
    page, message, err = take_page(conn, spec, state, reply)
    if not page then return nil, message, err end
    -- each page into `items`, or (with on_page) cleaned in place, handed on and dropped
    local into = on_page and page or items
    local first = on_page and 1 or #items + 1
    local last = core.clip_listed(page, into, spec.id, spec.display)
    if spec.arguments then clean_arguments(into, first, last) end
    if on_page then on_page(into) end
    local hint = era.of(conn.session.state).freshness(reply.result)
    if hint then merge_hint(listing, hint) end
    local cursor = reply.result.nextCursor
    if type(cursor) ~= "string" then
      conn.contact(reply.duration_ms)
      listing.era = era.of(conn.session.state).name
      return listing
    end
    params = { cursor = cursor }
  end
  return fail("malformed", { server = conn.identifier,
    detail = string.format("the %s did not end within %d pages", spec.what, conn.MAX_PAGES) })
end

--- One page of a listing: one request with `cursor` as it is (nil: the
--- first page), its entries shaped as a whole listing's (the text rule on
--- the display fields, an entry without its id left out). The server's
--- cursor is handed on verbatim; the absence of one ends the listing.
-- @return page { items, next_cursor, era, ttl_ms, cache_scope } | nil, message, err
function offers.page(conn, op, name, cursor)
  local spec = LISTINGS[name]
  local ok, message, err = offered(conn, op, spec.method, spec.capability)
  if not ok then return nil, message, err end
  local reply, page
  reply, message, err = conn.session:request(op, spec.method, cursor ~= nil and { cursor = cursor } or {})
  if not reply then return nil, message, err end
  page, message, err = take_page(conn, spec, { entries = 0, bytes = 0, containers = 0 }, reply)
  if not page then return nil, message, err end
  local items = json.array {}
  local last = core.clip_listed(page, items, spec.id, spec.display)
  if spec.arguments then clean_arguments(items, 1, last) end
  conn.contact(reply.duration_ms)
  local e = era.of(conn.session.state)
  local hint = e.freshness(reply.result) or {}
  local next_cursor = reply.result.nextCursor
  return { items = items, next_cursor = type(next_cursor) == "string" and next_cursor or nil, era = e.name,
    ttl_ms = hint.ttl_ms, cache_scope = hint.cache_scope }
end

-- May a cached listing of `name` be used now? In the 2026-07-28 era while
-- the server's ttlMs lasts; in the 2025 era (which has no freshness hint)
-- while the server promises list_changed notices for it. A notice of the
-- kind removes the entry (offers.notice).
local function fresh(conn, name, entry)
  if not entry then return false end
  local e = era.named(entry.listing.era)
  if e and e.cache_by == "ttl" then return conn.clock() < entry.expires end
  local state = conn.session.state
  local cap = state and state.capabilities and state.capabilities[LISTINGS[name].capability]
  return type(cap) == "table" and cap.listChanged == true
end

-- A copy of a cached listing, so a caller that changes what it got leaves
-- the cache as it was.
local function copied(entry)
  local items = json.array {}
  table.move(entry.items, 1, #entry.items, 1, items)
  local listing = {}
  for k, v in pairs(entry.listing) do listing[k] = v end
  listing.cached = true
  return items, listing
end

--- A listing: every page, in order, within the walk's bounds (or the cache's copy).
-- @return items, listing | nil, message, err
function offers.list(conn, op, name)
  local spec = LISTINGS[name]
  local cache = conn.cache
  -- what the server wrote already (a change notice over stdio) is read first: it may make the entry stale
  if cache and cache[name] then conn.session:drain(op) end
  if cache and fresh(conn, name, cache[name]) then return copied(cache[name]) end
  local items = json.array {}
  local listing, message, err = walk(conn, op, spec, items)
  if not listing then return nil, message, err end
  if cache then
    local kept = json.array {}
    table.move(items, 1, #items, 1, kept)
    cache[name] = { items = kept, listing = listing, expires = conn.clock() + (listing.ttl_ms or 0) / 1000 }
  end
  return items, listing
end

--- A listing page by page, never held whole: on_page(entries) with each
--- page's entries, as offers.list would give them. The cache is not used.
-- @return listing | nil, message, err
function offers.each_page(conn, op, name, on_page)
  return walk(conn, op, LISTINGS[name], nil, on_page)
end

--- A change notice: the cached listings it makes stale are dropped.
function offers.notice(cache, kind)
  for _, name in ipairs(cache and STALE_BY[kind] or {}) do cache[name] = nil end
end

---------------------------------------------------------------------------
-- Reading a resource
---------------------------------------------------------------------------

-- The content block a model would be told of for a non-text content.
local function dropped_kind(mime)
  if type(mime) == "string" then
    if mime:match("^image/") then return "image" end
    if mime:match("^audio/") then return "audio" end
  end
  return "other"
end

-- What a model reads of the contents: the texts joined, the rest named in
-- the note (the tool result's note), made inert and bounded as a tool
-- result is.
local function model_text(blocks)
  local flat, note = core.flatten(blocks)
  local answer = flat == "" and "The resource holds no textual content." or flat
  return core.inert(note and (note .. "\n" .. answer) or answer), note
end

--- resources/read: { contents = { { uri, mime_type, text | blob } ... }, text, note };
--- `contents` as the server sent them (its bytes), `text` what a model reads.
-- @return read | nil, message, err
function offers.read_resource(conn, op, uri)
  local reply, message, err = ask(conn, op, "resources/read", "resources", { uri = uri })
  if not reply then return nil, message, err end
  local list = reply.result.contents
  if type(list) ~= "table" or not json.is_array(list) then
    return fail("malformed", { server = conn.identifier, detail = 'the resource read carries no "contents" array' })
  end
  local contents, blocks = {}, json.array {}
  for _, item in ipairs(list) do
    if type(item) == "table" and not json.is_array(item) then
      local entry = { uri = type(item.uri) == "string" and item.uri or nil,
        mime_type = shown(item.mimeType, NAME_LIMIT) }
      if type(item.text) == "string" then
        entry.text = item.text
        blocks[#blocks + 1] = { type = "text", text = item.text }
      else
        entry.blob = type(item.blob) == "string" and item.blob or nil
        blocks[#blocks + 1] = { type = dropped_kind(entry.mime_type) }
      end
      contents[#contents + 1] = entry
    end
  end
  conn.contact(reply.duration_ms)
  local text, note = model_text(blocks)
  return { contents = contents, text = text, note = note, latency_ms = reply.duration_ms }
end

---------------------------------------------------------------------------
-- Prompts
---------------------------------------------------------------------------

-- The roles a prompt message may have: the protocol defines these two.
local ROLES = { user = true, assistant = true }

-- How a message's further lines are set off in a prompt's text: no line of
-- a message can begin a turn (a turn header is a role and a colon at the
-- very start of a line).
local INDENT = "  "

-- A role the prompt may not have, named for the failure under the text rule.
local function role_named(role)
  if type(role) == "string" then return '"' .. core.clip(role, NAME_LIMIT) .. '"' end
  return "a " .. (role == json.null and "null" or type(role) == "table" and "non-string" or type(role)) .. " role"
end

-- One message as a turn { role, text, note }: its text blocks joined and
-- inert, the blocks dropped named in its note; or nil and why.
local function turn_of(m)
  if type(m) ~= "table" or m == json.null or json.is_array(m) then return nil, "a message that is not an object" end
  if not ROLES[m.role] then return nil, "a message with " .. role_named(m.role) .. " (only user or assistant)" end
  local flat, note = core.flatten(json.array { m.content })
  return { role = m.role, text = core.inert(flat), note = note }
end

-- A turn as the prompt's text holds it: "role: " and the first line, each
-- further line indented, so only the role can start a line with "role:".
local function framed(turn)
  return turn.role .. ": " .. turn.text:gsub("\n", "\n" .. INDENT)
end

--- prompts/get: { description, messages, turns, text, note }. `messages` are
--- the server's own (its bytes); `turns` each message as a model reads it
--- ({ role, text (inert, bounded), note }); `text` the turns with text as
--- "role: " and the message's text, every further line of it indented by two
--- spaces (no message can write a line that reads as another turn), non-text
--- named in the leading note, inert and bounded as a tool result is. A
--- message whose role is not user or assistant fails the get (`malformed`).
-- @return prompt | nil, message, err
function offers.get_prompt(conn, op, name, arguments)
  local params = { name = name }
  if arguments ~= nil then params.arguments = arguments end
  local reply, message, err = ask(conn, op, "prompts/get", "prompts", params)
  if not reply then return nil, message, err end
  local messages = reply.result.messages
  if type(messages) ~= "table" or not json.is_array(messages) then
    return fail("malformed", { server = conn.identifier, detail = 'the prompt carries no "messages" array' })
  end
  local turns, lines, blocks = json.array {}, {}, json.array {}
  for i, m in ipairs(messages) do
    local turn, why = turn_of(m)
    if not turn then
      return fail("malformed", { server = conn.identifier, detail = string.format("the prompt holds %s (message %d)",
        why, i) })
    end
    turns[#turns + 1] = turn
    blocks[#blocks + 1] = m.content
    if turn.text ~= "" then lines[#lines + 1] = framed(turn) end
  end
  local _, note = core.flatten(blocks)
  local answer = #lines > 0 and table.concat(lines, "\n") or "The prompt holds no textual content."
  conn.contact(reply.duration_ms)
  return { description = shown(reply.result.description, DESCRIPTION_LIMIT), messages = messages, turns = turns,
    text = core.inert(note and (note .. "\n" .. answer) or answer), note = note, latency_ms = reply.duration_ms }
end

---------------------------------------------------------------------------
-- Completion
---------------------------------------------------------------------------

--- completion/complete: { values, total, has_more }; the values under the
--- text rule, at most 100.
-- @return completion | nil, message, err
function offers.complete(conn, op, ref, argument, context)
  local params = { ref = ref, argument = argument }
  if context ~= nil then params.context = { arguments = context } end
  local reply, message, err = ask(conn, op, "completion/complete", "completions", params)
  if not reply then return nil, message, err end
  local completion = reply.result.completion
  if type(completion) ~= "table" or type(completion.values) ~= "table" or not json.is_array(completion.values) then
    return fail("malformed", { server = conn.identifier, detail = 'the completion carries no "values" array' })
  end
  local values = json.array {}
  for _, v in ipairs(completion.values) do
    if type(v) == "string" and #values < offers.MAX_COMPLETIONS then values[#values + 1] = core.clip(v, VALUE_LIMIT) end
  end
  conn.contact(reply.duration_ms)
  local total = completion.total
  return { values = values, total = math.type(total) == "integer" and total >= 0 and total or nil,
    has_more = completion.hasMore == true }
end

---------------------------------------------------------------------------
-- Subscriptions
---------------------------------------------------------------------------

--- resources/subscribe or resources/unsubscribe for `uri`; the server must
--- advertise resources.subscribe. The 2026-07-28 era has no such methods: a
--- subscription is a URI the listen request names, so nothing is sent there
--- and the caller keeps it.
-- @return true | nil, message, err
function offers.subscription(conn, op, method, uri)
  local ok, message, err = offered(conn, op, method, "resources", "subscribe")
  if not ok or era.of(conn.session.state).listens == "listen" then return ok, message, err end
  local reply
  reply, message, err = conn.session:request(op, method, { uri = uri })
  if not reply then return nil, message, err end
  conn.contact(reply.duration_ms)
  return true
end

---------------------------------------------------------------------------
-- Tool results
---------------------------------------------------------------------------

--- The sentence naming the resources a tool result links or embeds (their
--- URIs under the text rule, at most ten), or nil when it has none: the
--- content keeps the blocks, and a host reads a link through its gate.
function offers.links_note(content)
  if type(content) ~= "table" then return nil end
  local named, more = nil, 0  -- made at the first link: most results name none
  for _, block in ipairs(content) do
    local uri = nil
    if type(block) == "table" and block.type == "resource_link" then
      uri = block.uri
    elseif type(block) == "table" and block.type == "resource" and type(block.resource) == "table" then
      uri = block.resource.uri
    end
    if type(uri) == "string" then
      named = named or {}
      if #named < NAMED_LINKS then named[#named + 1] = '"' .. core.clip(uri, NAME_LIMIT) .. '"'
      else more = more + 1 end
    end
  end
  if not named then return nil end
  return string.format("[The result names %s: %s%s.]", #named + more == 1 and "a resource" or "resources",
    table.concat(named, ", "), more > 0 and string.format(" and %d more", more) or "")
end

return offers
