--- The runs repository of the store: a run's row (agent_run) with its
-- execution lease, its write fence and what a waiting run waits on, and the
-- handles of its task-backed calls (agent_task).
--
-- Rules: every write a run's holder makes is a compare-and-set on the
-- status and the owner (guarded_update_run), so a worker that lost its
-- lease changes nothing; a run left behind with its fence set is marked
-- failed with a "recovered" event, never taken over as if nothing happened
-- (unless every call its fence names became a stored task: that is
-- followed); a task's handle is stored with the fence naming it, both or
-- neither.
local mcp_core = require "mcpclient.core"
local core = require "mcpclient.agent.store.core"

local json = mcp_core.json
local check_uid, check_time, adapter_of, fail = core.check_uid, core.check_time, core.adapter_of, core.fail
local encode_fields, append, exec, insert = core.encode_fields, core.append, core.exec, core.insert
local insert_sql, update_sql, select_rows, select_one = core.insert_sql, core.update_sql, core.select_rows,
  core.select_one

local runs = {}

local hydrate_run = core.hydrator {
  uid = "integer", uuid = "string", status = "string", claimed_by = "string", lease_expires = "integer",
  fence = "string", cancel_requested = "boolean", user_name = "string", configuration = "string",
  created_at = "integer", updated_at = "integer", pending_steps = "string", approval = "string",
}

local hydrate_task = core.hydrator {
  uid = "integer", run = "integer", sequence = "integer", server = "string", task_id = "string", tool = "string",
  arguments_sha256 = "string", arguments = "string", round = "integer", handle = "string", status = "string",
  started_by = "string", finished_by = "string", closed = "boolean", created_at = "integer", updated_at = "integer",
}

local run_fields = {
  uuid = "string", status = "string", claimed_by = "string", lease_expires = "integer", fence = "string",
  user_name = "string", configuration = "string", cancel_requested = "flag", pending_steps = "string",
  approval = "string",
}

--- Insert a run; unset fields take the table defaults. → run uid
function runs.insert_run(self, fields)
  local columns, values = encode_fields(fields, run_fields, "insert_run")
  local now = os.time()
  append(columns, values, "created_at", now)
  append(columns, values, "updated_at", now)
  return insert(self, "insert a run", insert_sql("agent_run", columns), values)
end

-- Change one row's fields by its uid and stamp updated_at (a run's, a task's). → true
local function update_by_uid(self, what, tbl, allowed, uid, fields)
  check_uid(uid, nil, 3)
  local columns, values = encode_fields(fields, allowed, "update_" .. what)
  append(columns, values, "updated_at", os.time())
  values[#values + 1] = uid
  return exec(self, "update " .. what .. " " .. uid, update_sql(tbl, columns, "uid = ?"), values)
end

--- A run's row, or nil.
function runs.run(self, uid)
  check_uid(uid)
  return select_one(self, "read run " .. uid, "SELECT * FROM agent_run WHERE uid = ?", { uid }, hydrate_run)
end

--- A run's row by its uuid, or nil.
function runs.run_by_uuid(self, uuid)
  if type(uuid) ~= "string" or uuid == "" then error("uuid must be a non-empty string", 2) end
  return select_one(self, "read run " .. uuid, "SELECT * FROM agent_run WHERE uuid = ?", { uuid }, hydrate_run)
end

--- Change a run's fields and stamp updated_at. → true
function runs.update_run(self, uid, fields)
  return update_by_uid(self, "run", "agent_run", run_fields, uid, fields)
end

--- The lease-fenced write: changes the run only while it is in `status`
-- (default "running") and claimed by owner, so a worker that lost its lease
-- cannot overwrite the run another worker now owns. The check and the write
-- are one UPDATE (a compare-and-set): on PostgreSQL a concurrent writer of
-- the row waits for it, and the condition is judged again on the row it
-- committed, so of two workers only the one still named in claimed_by writes.
-- → rows changed (0: the lease is lost)
function runs.guarded_update_run(self, uid, owner, fields, status)
  check_uid(uid)
  if type(owner) ~= "string" then error("owner must be a string", 2) end
  if status ~= nil and type(status) ~= "string" then error("status must be a string", 2) end
  local columns, values = encode_fields(fields, run_fields, "guarded_update_run")
  append(columns, values, "updated_at", os.time())
  values[#values + 1] = uid
  values[#values + 1] = status or "running"
  values[#values + 1] = owner
  local adapter = adapter_of(self)
  local ok, message, code = adapter:exec(
    update_sql("agent_run", columns, "uid = ? AND status = ? AND claimed_by = ?"), values)
  if not ok then return fail("update run " .. uid .. " under its lease", message, code) end
  return adapter:changes()
end

-- A run left behind: still running, its lease expired, and its fence set
-- (a write may have run whose step is not in the audit). Nobody may take it
-- over and go on as if nothing happened.
local LEFT_BEHIND = "status = 'running' AND lease_expires < ? AND fence <> ''"
local RECOVERED_ORDER = { "kind", "reason", "owner", "leaseExpires", "fence" }

-- Mark one run left behind failed (one compare-and-set: of several
-- processes that find it, one marks it) and append a "recovered" event that
-- says why and repeats the fence. → true marked | false (not left behind any
-- more) | nil, message, err
local function fail_closed(self, row, now)
  local what = "mark run " .. row.uid .. " failed"
  return self:transaction(function()
    local adapter = adapter_of(self)
    local ok, message, code = adapter:exec("UPDATE agent_run SET status = 'failed', updated_at = ? WHERE uid = ? AND "
      .. "claimed_by = ? AND " .. LEFT_BEHIND, { now, row.uid, row.claimed_by, now })
    if not ok then return fail(what, message, code) end
    if adapter:changes() ~= 1 then return false end
    local payload = json.set_key_order({ kind = "recovered", reason = "the lease expired while a fenced write "
      .. "was unrecorded: the call may or may not have run", owner = mcp_core.repair_utf8(row.claimed_by),
      leaseExpires = row.lease_expires, fence = mcp_core.repair_utf8(row.fence) }, RECOVERED_ORDER)
    local sequence, event_message, err = self:append_event(row.uid, { kind = "recovered",
      payload = json.encode(payload) })
    if not sequence then return nil, event_message, err end
    return true
  end)
end

--- Is a fence one a new owner may take over: every call it names became a
--- task whose handle is stored (the entry carries its task_id), so the
--- outcome can be read from the server instead of guessed.
function runs.followable(fence)
  local ok, list = pcall(json.decode, fence)
  if not ok or type(list) ~= "table" or not json.is_array(list) or #list == 0 then return false end
  for _, entry in ipairs(list) do
    if type(entry) ~= "table" or type(entry.task_id) ~= "string" or entry.task_id == "" then return false end
  end
  return true
end

--- Mark every run left behind failed: still running, its lease expired
-- before `now` (default: now), its fence set. Each gets a "recovered" event
-- naming its owner, its lease and its fence, which stays on the row so the
-- operator can tell which call may have run (see `mcpclient runs`). The store
-- does this itself when it is opened for writing and when a run is claimed.
-- → the uids marked (a list) | nil, message, err
function runs.recover_runs(self, now)
  now = check_time(now, "now")
  local rows, message, err = select_rows(self, "find the runs left behind", "SELECT * FROM agent_run WHERE "
    .. LEFT_BEHIND .. " ORDER BY uid ASC", { now }, hydrate_run)
  if not rows then return nil, message, err end
  local marked = {}
  for _, row in ipairs(rows) do
    local done, done_message, done_err = false, nil, nil
    if not runs.followable(row.fence) then done, done_message, done_err = fail_closed(self, row, now) end
    if done == nil then return nil, done_message, done_err end
    if done then marked[#marked + 1] = row.uid end
  end
  return marked
end

--- Take over a running run whose lease has expired (lease_expires < now),
-- or renew one's own: one compare-and-set, so of several workers that see
-- the same expired lease exactly one gets it, and the old owner's next
-- fenced write changes nothing. A run waiting for approval is taken over the
-- same way once its lease has expired (or its owner released it), provided
-- it kept what it waits on (pending_steps); its status stays waiting. A run
-- left behind with its fence set is not taken over: it is marked failed (see
-- recover_runs). → 1 claimed, 0 not (someone holds it, or it was left behind)
function runs.claim_run(self, uid, owner, lease_expires, now)
  check_uid(uid)
  if type(owner) ~= "string" then error("owner must be a string", 2) end
  check_uid(lease_expires, "lease_expires")
  now = check_time(now, "now")
  local row, message, err = self:run(uid)
  if row == nil and message ~= nil then return nil, message, err end
  if row and row.claimed_by ~= owner and row.status == "running" and row.lease_expires < now
      and row.fence ~= "" and not runs.followable(row.fence) then
    local marked
    marked, message, err = fail_closed(self, row, now)
    if marked == nil then return nil, message, err end
  end
  local adapter = adapter_of(self)
  local ok, code
  ok, message, code = adapter:exec("UPDATE agent_run SET claimed_by = ?, lease_expires = ?, updated_at = ? "
    .. "WHERE uid = ? AND (status = 'running' OR (status = 'waiting_approval' AND pending_steps <> '')) "
    .. "AND (claimed_by = ? OR lease_expires < ?)",
    { owner, lease_expires, now, uid, owner, now })
  if not ok then return fail("claim run " .. uid, message, code) end
  return adapter:changes()
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
function runs.decide_run(self, uid, approval, pending_steps, event, owner, expected)
  check_uid(uid)
  if approval ~= "approved" and approval ~= "denied" and not (type(approval) == "string" and approval:sub(1, 1) == "{")
  then
    error('decide_run: approval must be "approved", "denied" or a JSON object of decisions by step id', 2)
  end
  if expected ~= nil and type(expected) ~= "string" then error("decide_run: expected must be a string", 2) end
  if type(pending_steps) ~= "string" or pending_steps == "" then
    error("decide_run: pending_steps must be the waiting run's steps", 2)
  end
  if type(event) ~= "table" then error("decide_run: event must be a table", 2) end
  if owner ~= nil and type(owner) ~= "string" then error("decide_run: owner must be a string", 2) end
  local sql = "UPDATE agent_run SET approval = ?, updated_at = ? WHERE uid = ? AND status = 'waiting_approval' AND "
    .. "approval = ? AND pending_steps = ?"
  local params = { approval, os.time(), uid, expected or "", pending_steps }
  if owner then
    sql = sql .. " AND claimed_by = ?"
    params[#params + 1] = owner
  end
  return self:transaction(function()
    local adapter = adapter_of(self)
    local ok, message, code = adapter:exec(sql, params)
    if not ok then return fail("record the decision on run " .. uid, message, code) end
    if adapter:changes() ~= 1 then return 0 end
    local sequence, event_message, err = self:append_event(uid, event)
    if not sequence then return nil, event_message, err end
    return 1
  end)
end

--- The runs, newest first: every one, or (open = true) those an operator
-- may have to act on: still running or waiting for approval, or with their
-- fence set. → rows (as Store:run gives them)
function runs.runs(self, open)
  if open ~= nil and type(open) ~= "boolean" then error("runs: open must be a boolean", 2) end
  local where = open and " WHERE status IN ('running', 'waiting_approval') OR fence <> ''" or ""
  return select_rows(self, "list the runs", "SELECT * FROM agent_run" .. where .. " ORDER BY uid DESC", {},
    hydrate_run)
end

--- Ask a run to stop (a run's cancel hook polls this flag). → true
function runs.request_cancel(self, uid)
  check_uid(uid)
  return exec(self, "request the cancellation of run " .. uid,
    "UPDATE agent_run SET cancel_requested = 1, updated_at = ? WHERE uid = ?", { os.time(), uid })
end


---------------------------------------------------------------------------
-- Tasks: the handles of a run's task-backed calls
---------------------------------------------------------------------------

local task_fields = {
  run = "integer", sequence = "integer", server = "string", task_id = "string", tool = "string",
  arguments_sha256 = "string", arguments = "string", round = "integer", handle = "string", status = "string",
  started_by = "string", finished_by = "string", closed = "flag",
}

--- Store a task's handle and, in the same transaction, the run's fence
--- naming it (`fence`: the fence's new text) under the run's lease. Either
--- both are written or neither. → task uid | nil, message, err (false when
--- the lease is lost: nothing written)
function runs.insert_task(self, fields, owner, fence)
  if type(owner) ~= "string" or type(fence) ~= "string" then error("insert_task: owner and fence are text", 2) end
  local columns, values = encode_fields(fields, task_fields, "insert_task")
  local now = os.time()
  append(columns, values, "created_at", now)
  append(columns, values, "updated_at", now)
  return self:transaction(function()
    local changed, message, err = self:guarded_update_run(fields.run, owner, { fence = fence })
    if changed == nil then return nil, message, err end
    if changed ~= 1 then return false end
    return insert(self, "store the handle of task " .. tostring(fields.task_id), insert_sql("agent_task", columns),
      values)
  end)
end

--- Change a stored task's fields (its last status; closed and finished_by
--- once its step is recorded). → true
function runs.update_task(self, uid, fields)
  return update_by_uid(self, "task", "agent_task", task_fields, uid, fields)
end

--- Close a task once its step is recorded: who finished it and its last
--- status. Only an open task is closed, so of two owners that followed the
--- same task (a lease taken over while the first still waited) one records
--- its step. → 1 closed | 0 (closed already)
function runs.close_task(self, uid, finished_by, status)
  check_uid(uid)
  if type(finished_by) ~= "string" or type(status) ~= "string" then
    error("close_task: finished_by and status are text", 2)
  end
  local adapter = adapter_of(self)
  local ok, message, code = adapter:exec("UPDATE agent_task SET closed = 1, finished_by = ?, status = ?, "
    .. "updated_at = ? WHERE uid = ? AND closed = 0", { finished_by, status, os.time(), uid })
  if not ok then return fail("close task " .. uid, message, code) end
  return adapter:changes()
end

--- The tasks not closed yet: of one run (`run_uid`), or every run's (nil),
--- optionally of one server; oldest first. → rows
function runs.open_tasks(self, run_uid, server)
  local where, params = { "closed = 0" }, {}
  if run_uid ~= nil then
    check_uid(run_uid, "run_uid")
    where[#where + 1] = "run = ?"
    params[#params + 1] = run_uid
  end
  if server ~= nil then
    if type(server) ~= "string" then error("open_tasks: server must be a string", 2) end
    where[#where + 1] = "server = ?"
    params[#params + 1] = server
  end
  return select_rows(self, "list the open tasks", "SELECT * FROM agent_task WHERE " .. table.concat(where, " AND ")
    .. " ORDER BY uid ASC", params, hydrate_task)
end

--- The stored tasks a server's task id names. A task id is the server's,
--- unique only per server (and, for a 2025-11-25 task, per session), so
--- two servers, or two runs, may each have a task of the same id: every
--- row is returned, of one server (`server`, its identifier) and of one run
--- (`run_uid`) when given, the open ones first (oldest first), then the
--- closed ones (newest first). The caller picks, or asks which. → rows
function runs.tasks_by_id(self, task_id, server, run_uid)
  if type(task_id) ~= "string" then error("tasks_by_id: task_id must be a string", 2) end
  local where, params = { "task_id = ?" }, { task_id }
  if server ~= nil then
    if type(server) ~= "string" then error("tasks_by_id: server must be a string", 2) end
    where[#where + 1] = "server = ?"
    params[#params + 1] = server
  end
  if run_uid ~= nil then
    check_uid(run_uid, "run_uid")
    where[#where + 1] = "run = ?"
    params[#params + 1] = run_uid
  end
  -- open (closed = 0) before closed; open oldest first, closed newest first
  return select_rows(self, "read the tasks of id " .. mcp_core.clip(task_id, 80), "SELECT * FROM agent_task WHERE "
    .. table.concat(where, " AND ") .. " ORDER BY closed ASC, CASE WHEN closed = 0 THEN uid ELSE -uid END ASC",
    params, hydrate_task)
end

return runs
