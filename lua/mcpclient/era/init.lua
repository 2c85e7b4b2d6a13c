--- The protocol revisions, each one file of this folder, and what they share.
--
-- An era file (era/2025_11_25.lua, era/2026_07_28.lua) owns everything of
-- its revision: how it opens, what a request carries, how an answer reads,
-- its headers, listings, schemas, tasks and listening. Each fills the one
-- contract below (era.CONTRACT, held by spec/unit/era_contract_spec.lua), so
-- code outside this folder asks the era object of its state (era.of) and
-- never branches on the revision; a new revision is one new file here.
-- What the eras share is here: negotiation (which era a server speaks, found
-- once per connection), the reserved error codes, the lookups.
local errors = require "mcpclient.errors"

local fail = errors.fail

local era = {}

--- The contract: every slot an era file fills, and the type of its value.
era.CONTRACT = {
  name = "string",                    -- the era's name in reports ("modern" | "legacy")
  revision = "string",                -- the revision the file is named by
  versions = "table",                 -- the revisions it speaks, best first
  discovered = "boolean",             -- opened by server/discover (true) or a handshake (false)
  open = "function",                  -- open(host, op[, version]): the opening (see era.negotiate)
  state = "function",                 -- the state an opening leaves
  envelope = "function",              -- envelope(params, version, answers, asked): what a request carries
  capabilities = "function",          -- capabilities(answers, asked): what the client declares (answers:
                                      -- { elicitation, sampling, roots }, what the host gave)
  roots_notice = "boolean",           -- a change of the client's roots is announced (roots/list_changed)
  complete = "function",              -- complete(result, server, method, task_ok): is the answer final
  asks_input = "boolean",             -- a result may ask for input (input_required), answered in rounds
  ping_method = "string",             -- how the session asks whether the server is there
  refreshed = "function",             -- refreshed(state, result): the state after a ping's answer | nil
  answers_server_requests = "boolean", -- a server request on a response stream gets an answer
  headers_per_request = "boolean",    -- each request has HTTP header lines of its own
  request_headers = "function",       -- request_headers(list, call): the era's HTTP header lines of a request
  resumable = "boolean",              -- a response stream may be resumed (Last-Event-ID)
  cancel_notice = "boolean",          -- abandoning a written request over HTTP POSTs a notice
  listens = "string",                 -- how change notices come: "listen" (subscriptions/listen) | "stream"
  cache_by = "string",                -- a cached listing is fresh by "ttl" (its hint) | "notices" (list_changed)
  freshness = "function",             -- freshness(result): { ttl_ms, cache_scope } | nil
  schema_rule = "function",           -- the rule a kept schema (table form) is held to
  listing_decoding = "function",      -- listing_decoding(form): how a tools/list page is read
  keep_page = "function",             -- keep_page(page, form, decoding): the kept rule on a page read as text
  mirrors = "boolean",                -- tools' x-mcp-header markings are learned and mirrored
  header_params = "function",         -- header_params(schema): a tool's mirrored parameters
  task_of = "function",               -- task_of(result): the task a tools/call answer describes
  task_times = "function",            -- task_times(t): poll interval, time to live (ms)
  task_offered = "function",          -- task_offered(capabilities): may a tools/call go as a task
  ask_task = "function",              -- ask_task(params, how): a tools/call asked as a task
  task_outcome = "string",            -- where an ended task's outcome is read: "tasks/get" | "tasks/result"
  task_input = "string",              -- how a task's input is answered: "tasks/update" | "tasks/result"
  cancel_reads_task = "boolean",      -- a tasks/cancel answer describes the task
  task_listed_first = "boolean",      -- the tools are listed before a call asks for a task
  with_settings = "function",         -- with_settings(params, settings): the host's per-request settings added
  set_level = "function",             -- set_level(host, op, state, level): the server asked for a log level
  wire = "table",                     -- the revision's own helpers (encodings, discovery), for its specs
}

local modern = require "mcpclient.era.2026_07_28"
local legacy = require "mcpclient.era.2025_11_25"

--- The eras this client speaks, newest first.
era.ERAS = { modern, legacy }

-- Constants of the protocol that name no era: the reserved error codes and
-- the tasks extension's name.
era.HEADER_MISMATCH = modern.wire.HEADER_MISMATCH
era.MISSING_CAPABILITY = modern.wire.MISSING_CAPABILITY
era.UNSUPPORTED_VERSION = modern.wire.UNSUPPORTED_VERSION
era.TASKS = modern.wire.TASKS
era.recognised = modern.wire.recognised
era.versions_of = modern.wire.versions_of

local by_name = {}
for _, e in ipairs(era.ERAS) do by_name[e.name] = e end

--- The era of a report's or a handle's name ("modern", "legacy"), or nil.
function era.named(name)
  return by_name[name]
end

-- The era whose opening makes a session (a handshake): the one a state
-- built by hand, a session id and a revision, belongs to.
local with_sessions
for _, e in ipairs(era.ERAS) do
  if not e.discovered then with_sessions = with_sessions or e end
end

--- The era object of a session's state (nil: none open yet). A state made
--- by an opening names its era; one built by hand (a task's session kept by
--- its handle) is of the era that has sessions.
function era.of(state)
  if state == nil then return nil end
  return state.era or with_sessions
end

--- The era that speaks `version`, among `eras` (era.ERAS by default), or nil.
function era.speaking(version, eras)
  for _, e in ipairs(eras or era.ERAS) do
    for _, v in ipairs(e.versions) do
      if v == version then return e end
    end
  end
  return nil
end

--- The revisions the `protocol` option may name, and every revision spoken.
function era.revisions(eras)
  local list = {}
  for _, e in ipairs(eras or era.ERAS) do list[#list + 1] = e.revision end
  return list
end

-- The first of `ours` the server also names, or nil.
local function common(ours, theirs)
  local named = {}
  for _, v in ipairs(theirs) do named[v] = true end
  for _, v in ipairs(ours) do if named[v] then return v end end
  return nil
end

-- The versions of the eras opened by discovery (or of `pinned` alone), best first; and of the others.
local function versions_by_opening(eras, pinned)
  local discovered, handshake = {}, {}
  for _, e in ipairs(pinned and { pinned } or eras) do
    local into = e.discovered and discovered or handshake
    for _, v in ipairs(e.versions) do into[#into + 1] = v end
  end
  return discovered, handshake
end

---------------------------------------------------------------------------
-- Negotiation: found once per connection
---------------------------------------------------------------------------

-- Does this failure of the server/discover probe say the server is of an
-- era opened by a handshake? A refusal with a 4xx status whose body is no
-- recognised error of the reserved range, or a JSON-RPC error that is none,
-- says so. A credential refusal (401, 403), a rate limit and every failure
-- of the network, the budget or the cancel hook says nothing about the era:
-- it is returned as it is.
local NOT_ERA_EVIDENCE = { [401] = true, [403] = true, [407] = true, [408] = true, [429] = true }
function era.legacy_evidence(err)
  if era.recognised(err.rpc_code) then return false end
  if err.kind == "rpc_error" then return true end
  return err.kind == "http_status" and err.status >= 400 and err.status < 500 and not NOT_ERA_EVIDENCE[err.status]
end

era.NO_VERSIONS = "the server/discover result names no supportedVersions"

-- Discovery: the probe, its one retry with a version the server names, and
-- the verdict.
-- @return verdict { state, reply } | { handshake = true, evidence (the failure that said so, or nil) }
--   | nil, message, err
local function discover(host, op, eras, pinned)
  local ours, handshake_versions = versions_by_opening(eras, pinned)
  local version = ours[1]
  for _ = 1, 2 do
    local speaker = era.speaking(version, eras)
    local probed, message, err = speaker.open(host, op, version)
    local found = probed and probed.found
    if found and common({ version }, found.supported) then
      local state = speaker.state(version, found)
      state.era = speaker
      return { state = state, reply = probed.reply }
    end
    if probed and not found then return { handshake = true } end
    local offered = found and found.supported or (err.kind == "protocol_version" and err.offered_list)
    if not offered then
      if era.legacy_evidence(err) then return { handshake = true, evidence = err } end
      return nil, message, err
    end
    if found then
      _, message, err = fail("protocol_version", { server = host.identifier, requested = version,
        offered = table.concat(offered, ", "), offered_list = offered, supported = table.concat(ours, ", ") })
    end
    -- what the server names in common with this client: a revision opened by
    -- discovery (discover again with it) or by a handshake (when allowed)
    local next_version = common(ours, offered)
    if not next_version and not pinned and common(handshake_versions, offered) then
      return { handshake = true, evidence = err }
    end
    -- even the revision just refused, when the server's list names it: the
    -- refusal may have been a passing one, and a discovery acts on nothing
    if not next_version then return nil, message, err end
    version = next_version
  end
  return fail("malformed", { server = host.identifier, detail = "server/discover named a revision, then refused it" })
end

--[[
Find the era and open it: with protocol "auto" a server/discover first
(with the newest revision opened by discovery), its one retry with a
revision the server names, and when the server turned out to be of an era
opened by a handshake, that handshake (initialize). A pinned revision opens
its own era only: a handshake era's handshake at once; a discovered era's
discovery, whose refusal is returned.
`host`: { identifier, protocol ("auto" | a revision), answers (what the client answers: capabilities),
  send = function(op, state, method, params) -> reply | nil, message, err,
  notify = function(op, state, message) -> true | nil, message, err }
@param eras the eras to choose from (era.ERAS when nil), newest first
@return reply (of the opening), state (naming its era) | nil, message, err
]]
function era.negotiate(host, op, eras)
  eras = eras or era.ERAS
  local pinned = host.protocol ~= "auto" and era.speaking(host.protocol, eras) or nil
  local handshaker
  for _, e in ipairs(eras) do
    if not e.discovered then handshaker = handshaker or e end
  end
  if pinned and not pinned.discovered then return pinned.open(host, op) end
  local verdict, message, err = discover(host, op, eras, pinned)
  if not verdict then return nil, message, err end
  if verdict.state then return verdict.reply, verdict.state end
  if pinned then
    if verdict.evidence then return errors.pass(verdict.evidence) end
    return fail("malformed", { server = host.identifier, detail = era.NO_VERSIONS })
  end
  return handshaker.open(host, op)
end

--- The schema rule of the era a listing came from (list_tools' `era`).
function era.schema_for(name)
  return (by_name[name] or with_sessions).schema_rule
end

return era
