--- mcpclient.agent.store: the catalogue, enablement, run and governance
-- repositories over one adapter.
--
--   local store = require "mcpclient.agent.store"
--   local s &lt;close&gt; = assert(store.open("mcp.db"))
--   local uid = assert(s:add_server{ identifier = "docs", name = "Docs", url = "https://..." })
--
-- Every repository method returns its value, or nil, message, err on a
-- database failure (errors.fail("store"): err.operation says what was being
-- done, err.sql_code is the database's own code); it never raises for one. Misuse
-- (wrong argument types, unknown fields, a closed store) raises. Every value
-- reaches the database as a bound parameter; the only names spliced into SQL
-- text are column names from the repositories' fixed lists.
--
-- This file is the facade: the one Store a caller holds, each method one
-- repository's of store/ (one file per kind of row), all over the SQL core
-- (store/core.lua: opening, migrations, transactions, statement helpers,
-- failures). The repositories speak only to an adapter (see
-- mcpclient.agent.store.sqlite for the interface); SQLite is the default one,
-- PostgreSQL (store.open with a "postgresql://" URI or a libpq key=value
-- string) the shared one, and store.open_adapter takes a host's. What
-- differs between the databases' SQL lives in mcpclient.agent.store.dialect.
local core = require "mcpclient.agent.store.core"
local migrations = require "mcpclient.agent.store.migrations"
local audit = require "mcpclient.agent.store.audit"
local grants = require "mcpclient.agent.store.grants"
local liveness = require "mcpclient.agent.store.liveness"
local runs = require "mcpclient.agent.store.runs"
local servers = require "mcpclient.agent.store.servers"
local tools = require "mcpclient.agent.store.tools"

local store = {
  migrations = migrations,
  SCHEMA_VERSION = #migrations,
  DEFAULT_BUSY_TIMEOUT_MS = core.DEFAULT_BUSY_TIMEOUT_MS,
  -- A contact is a stale timestamp at worst (store/liveness.lua).
  CONTACT_BUSY_TIMEOUT_MS = liveness.CONTACT_BUSY_TIMEOUT_MS,
  --- The kinds of offer an import keeps.
  OFFER_KINDS = tools.OFFER_KINDS,
}

local Store = {}
Store.__index = Store

--- The one rounding of an audited duration: milliseconds to two decimals,
--- a hundredth of a millisecond (the store applies it to every event; a
--- run's TOOL payload states the same value).
function store.audit_duration(ms)
  return core.audit_duration(ms)
end

--- Wrap a host adapter (see mcpclient.agent.store.sqlite for the interface).
-- options: migrate (default true; false when the host owns the schema),
-- migrations (default store.migrations), migrate_to (apply only the first N
-- migrations: for tests and tools that need a store from before a migration).
-- @return Store | nil, message, err
function store.open_adapter(adapter, options)
  return core.open_adapter(adapter, options, Store)
end

--- Open (creating and migrating) the store at `location`: an SQLite file
-- path (":memory:" works), or a PostgreSQL database given as a
-- "postgresql://" URI or a libpq key=value string (the password from the
-- PG* environment or ~/.pgpass; the string is never put in a message).
-- options: busy_timeout_ms (default 5000: the longest a statement, lock
-- waits included, may take), readonly (no migrations then), journal_mode
-- (SQLite: "wal" default), connect_timeout_ms (PostgreSQL, default 5000),
-- password and resolver (PostgreSQL: a credential reference such as
-- "env:NAME", resolved at every connect), migrate_to (tests and tools, see
-- open_adapter).
-- @return Store | nil, message, err
function store.open(path, options)
  return core.open(path, options, Store)
end

--- What an SQLite location names, told without opening it: "file" (a
-- regular file), "missing" (nothing yet), or nil, message, err (kind
-- "store") for a path store.open would refuse at once: a FIFO, a directory,
-- a device, a socket, one that cannot be reached. A PostgreSQL location is
-- "database" (its existence is the server's to tell).
function store.file_status(location)
  return core.file_status(location)
end

--- Whether `location` names a PostgreSQL store (a postgresql:// URI or a
--- libpq key=value string) rather than an SQLite file.
function store.is_postgres(location)
  return core.is_postgres(location)
end

--- `location` as a message may show it: a PostgreSQL connection string
-- with its password replaced by "***"; an SQLite path as it is.
function store.describe(location)
  return core.describe(location)
end

--- Is a fence one a new owner may take over: every call it names became a
--- task whose handle is stored (the entry carries its task_id), so the
--- outcome can be read from the server instead of guessed.
function store.followable(fence)
  return runs.followable(fence)
end

-- The store itself (store/core.lua)

--- Close the adapter. Idempotent; also __gc and __close.
function Store:close()
  return core.close(self)
end

Store.__gc = core.close
Store.__close = core.close

--- The highest migration applied to this store.
function Store:schema_version()
  return core.schema_version(self)
end

--- Run fn() inside a write transaction (a SAVEPOINT when nested): on SQLite
-- BEGIN IMMEDIATE takes the write lock at once; on PostgreSQL it is a READ
-- COMMITTED transaction whose writers serialise on the rows they change.
-- Rolls back when fn raises (the error is raised again) or returns
-- nil, message[, err] (returned as is). Returns fn's results, or true when
-- fn returned nothing.
function Store:transaction(fn)
  return core.transaction(self, fn)
end

-- OAuth grants (store/grants.lua; mcpclient.agent.grants speaks for them)

--- A server's grant rows { uid, server, resource, issuer, record (JSON), updated_at }, newest first.
function Store:grants(server)
  return grants.grants(self, server)
end

--- Keep a grant of `server` for (resource, issuer): it replaces the grant
-- held for the same resource, whichever authorization server issued that one
-- (a resource trusts one issuer at a time). → true
function Store:save_grant(server, resource, issuer, record)
  return grants.save_grant(self, server, resource, issuer, record)
end

--- Forget every grant of `server`. → the number forgotten
function Store:forget_grants(server)
  return grants.forget_grants(self, server)
end

-- Servers and the marks on their catalogues (store/servers.lua)

--- Add a server; unset fields take the table defaults. → uid
function Store:add_server(fields)
  return servers.add_server(self, fields)
end

--- Change editable fields of a live server and stamp updated_at. A new URL
--- forgets the server's OAuth grants (they were issued for the old one); a
--- new identifier carries them along. → true, the number of grants forgotten
function Store:update_server(uid, fields)
  return servers.update_server(self, uid, fields)
end

--- Soft delete (deleted = 1); the server's OAuth grants are forgotten with
--- it, so a server added later under its identifier never inherits them.
--- → true, the number of grants forgotten
function Store:remove_server(uid)
  return servers.remove_server(self, uid)
end

--- A live server's row, or nil (deleted or absent).
function Store:server(uid)
  return servers.server(self, uid)
end

--- Every live server, any enabled state, by identifier.
function Store:servers()
  return servers.servers(self)
end

--- Live servers switched on, by identifier.
function Store:enabled_servers()
  return servers.enabled_servers(self)
end

--- An import's outcome, a refusal included (status "error"). → true
function Store:record_import(uid, outcome)
  return servers.record_import(self, uid, outcome)
end

--- Mark a server's stored catalogue stale (its server said its tools,
--- resources or prompts changed) or current again. A stale mark also makes
--- a re-import due (reimport_pending 1), which a server set to re-import on
--- its own gets at the host's next safe point; with `due` false (a notice
--- heard on an import's own connection) the catalogue is stale and nothing
--- is due unless it was already (reimport_pending 2). Current again clears
--- both. → true | nil, message, err
function Store:set_catalogue_stale(uid, stale, due)
  return servers.set_catalogue_stale(self, uid, stale, due)
end

--- An import of server `uid` begins: it answers the notices heard so far
--- (reimport_pending back to 0). With `due_only`, only a due re-import is
--- taken (pending 1 → 0, one compare-and-set: of several processes that see
--- it due, exactly one gets it). → 1 taken, 0 not | nil, message, err
function Store:begin_import(uid, due_only)
  return servers.begin_import(self, uid, due_only)
end

--- An import of server `uid` ended well: its catalogue is current again,
--- unless a notice came after the import began (the listing may predate the
--- change): then it stays stale. → true | nil, message, err
function Store:settle_catalogue(uid)
  return servers.settle_catalogue(self, uid)
end

--- The live, enabled servers set to re-import on their own whose re-import
--- is due (a change notice since the last import), by identifier.
--- → rows | nil, message, err
function Store:reimports_due()
  return servers.reimports_due(self)
end

-- Liveness (store/liveness.lua)

--- Liveness: touches only last_contact and last_latency_ms, so a contact
--- never overwrites what an operator or an import wrote. → true
-- @param latency_ms whole milliseconds (the connection rounds once, before it
--   calls its recorder)
function Store:record_contact(uid, at, latency_ms)
  return liveness.record_contact(self, uid, at, latency_ms)
end

--- A recorder for mcp.connect{ health = ... }: stamps the contact and
-- raises when that fails, so the client logs its warning and the operation
-- still returns. `log`, when given, is told first as log("warning", message)
-- (a host that keeps its own log). A uid <= 0 records nothing.
function Store:health_recorder(server_uid, log)
  return liveness.health_recorder(self, server_uid, log)
end

-- Tools, offers and switches (store/tools.lua)

--- All tools of a server, live first, by tool_name.
function Store:tools_of(server_uid)
  return tools.tools_of(self, server_uid)
end

--- A server's live (not orphaned) tools by tool_name.
function Store:live_tools_of(server_uid)
  return tools.live_tools_of(self, server_uid)
end

--- The uid of the server owning a local tool name (orphaned rows count: the name stays taken), or nil.
function Store:tool_owner(tool_name)
  return tools.tool_owner(self, tool_name)
end

--- Upsert the accepted catalogue and sweep the rest into orphans, in one
-- transaction. → orphaned count (already-orphaned rows included)
function Store:reconcile(server_row, accepted, now)
  return tools.reconcile(self, server_row, accepted, now)
end

--- Switch a local tool on or off (the override row). → true
function Store:set_tool_enabled(tool_name, enabled)
  return tools.set_tool_enabled(self, tool_name, enabled)
end

--- true | false | nil (no override row)
function Store:tool_enabled(tool_name)
  return tools.tool_enabled(self, tool_name)
end

--- Switch a tool group on or off. → true
function Store:set_group_enabled(group, enabled)
  return tools.set_group_enabled(self, group, enabled)
end

--- true | false | nil (no override row: the group is on)
function Store:group_enabled(group)
  return tools.group_enabled(self, group)
end

--- Keep what a server lists of one kind ("resource", "template", "prompt"):
--- each entry { ident (uri, uriTemplate or prompt name), name, title,
--- description, mime_type, detail (JSON text: a prompt's arguments) } live,
--- every other row of that kind orphaned, in one transaction taken in turn
--- with the server's imports. → how many rows of the kind are orphaned
function Store:reconcile_offers(server_uid, kind, entries, now)
  return tools.reconcile_offers(self, server_uid, kind, entries, now)
end

--- The offers of one kind a server lists now (orphans left out), by ident;
--- with `all`, the orphans too. → rows | nil, message, err
function Store:offers_of(server_uid, kind, all)
  return tools.offers_of(self, server_uid, kind, all)
end

-- Runs, their leases and fences, and their tasks (store/runs.lua)

--- Insert a run; unset fields take the table defaults. → run uid
function Store:insert_run(fields)
  return runs.insert_run(self, fields)
end

--- A run's row, or nil.
function Store:run(uid)
  return runs.run(self, uid)
end

--- A run's row by its uuid, or nil.
function Store:run_by_uuid(uuid)
  return runs.run_by_uuid(self, uuid)
end

--- Change a run's fields and stamp updated_at. → true
function Store:update_run(uid, fields)
  return runs.update_run(self, uid, fields)
end

--- The lease-fenced write: changes the run only while it is in `status`
-- (default "running") and claimed by owner, so a worker that lost its lease
-- cannot overwrite the run another worker now owns. The check and the write
-- are one UPDATE (a compare-and-set): on PostgreSQL a concurrent writer of
-- the row waits for it, and the condition is judged again on the row it
-- committed, so of two workers only the one still named in claimed_by writes.
-- → rows changed (0: the lease is lost)
function Store:guarded_update_run(uid, owner, fields, status)
  return runs.guarded_update_run(self, uid, owner, fields, status)
end

--- Mark every run left behind failed: still running, its lease expired
-- before `now` (default: now), its fence set. Each gets a "recovered" event
-- naming its owner, its lease and its fence, which stays on the row so the
-- operator can tell which call may have run (see `mcpclient runs`). The store
-- does this itself when it is opened for writing and when a run is claimed.
-- → the uids marked (a list) | nil, message, err
function Store:recover_runs(now)
  return runs.recover_runs(self, now)
end

--- Take over a running run whose lease has expired (lease_expires < now),
-- or renew one's own: one compare-and-set, so of several workers that see
-- the same expired lease exactly one gets it, and the old owner's next
-- fenced write changes nothing. A run waiting for approval is taken over the
-- same way once its lease has expired (or its owner released it), provided
-- it kept what it waits on (pending_steps); its status stays waiting. A run
-- left behind with its fence set is not taken over: it is marked failed (see
-- recover_runs). → 1 claimed, 0 not (someone holds it, or it was left behind)
function Store:claim_run(uid, owner, lease_expires, now)
  return runs.claim_run(self, uid, owner, lease_expires, now)
end

--- Record a person's decision on what a waiting run waits for, from any
--- process: `approval` is "approved" or "denied" (the whole batch) or a JSON
--- object of decisions by step id; `expected` is the approval text the
--- decider read (default "": nothing decided yet); `pending_steps` is the text
--- the decider was shown (the row's), so a decision never lands on a later
--- suspension. One compare-and-set (the first decision wins), and the
--- `event` (an "approval" event) appended in the same transaction. With
--- `owner`, only while that owner holds the run (the holder's own decision).
--- → 1 recorded, 0 not (the run is not waiting on those steps, was decided
--- already, or is held by another owner) | nil, message, err
function Store:decide_run(uid, approval, pending_steps, event, owner, expected)
  return runs.decide_run(self, uid, approval, pending_steps, event, owner, expected)
end

--- The runs, newest first: every one, or (open = true) those an operator
-- may have to act on: still running or waiting for approval, or with their
-- fence set. → rows (as Store:run gives them)
function Store:runs(open)
  return runs.runs(self, open)
end

--- Ask a run to stop (a run's cancel hook polls this flag). → true
function Store:request_cancel(uid)
  return runs.request_cancel(self, uid)
end

--- Store a task's handle and, in the same transaction, the run's fence
--- naming it (`fence`: the fence's new text) under the run's lease. Either
--- both are written or neither. → task uid | nil, message, err (false when
--- the lease is lost: nothing written)
function Store:insert_task(fields, owner, fence)
  return runs.insert_task(self, fields, owner, fence)
end

--- Change a stored task's fields (its last status; closed and finished_by
--- once its step is recorded). → true
function Store:update_task(uid, fields)
  return runs.update_task(self, uid, fields)
end

--- Close a task once its step is recorded: who finished it and its last
--- status. Only an open task is closed, so of two owners that followed the
--- same task (a lease taken over while the first still waited) one records
--- its step. → 1 closed | 0 (closed already)
function Store:close_task(uid, finished_by, status)
  return runs.close_task(self, uid, finished_by, status)
end

--- The tasks not closed yet: of one run (`run_uid`), or every run's (nil),
--- optionally of one server; oldest first. → rows
function Store:open_tasks(run_uid, server)
  return runs.open_tasks(self, run_uid, server)
end

--- The stored tasks a server's task id names. A task id is the server's,
--- unique only per server (and, for a 2025-11-25 task, per session), so
--- two servers, or two runs, may each have a task of the same id: every
--- row is returned, of one server (`server`, its identifier) and of one run
--- (`run_uid`) when given, the open ones first (oldest first), then the
--- closed ones (newest first). The caller picks, or asks which. → rows
function Store:tasks_by_id(task_id, server, run_uid)
  return runs.tasks_by_id(self, task_id, server, run_uid)
end

-- The audit: a run's events and the governance log (store/audit.lua)

--- Append an event to a run's stream; the sequence is taken and written in
-- one statement, and on a database whose transactions do not serialise
-- writers (PostgreSQL) under a lock on the run's stream, so concurrent
-- writers on any host never share a number nor leave a gap. → sequence
function Store:append_event(run_uid, event)
  return audit.append_event(self, run_uid, event)
end

--- A run's events by sequence.
function Store:events(run_uid)
  return audit.events(self, run_uid)
end

--- Append a governance event (created_at defaults to now). → uid
function Store:insert_governance_event(fields)
  return audit.insert_governance_event(self, fields)
end

--- Every governance event by uid.
function Store:governance_events()
  return audit.governance_events(self)
end

return store
