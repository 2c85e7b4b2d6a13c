--- A run's lease and its write fence (mcpclient.agent.run).
--
-- Identity: a run has a uuid, and the process that holds it a lease owner
-- ("interactive:&lt;hostname&gt;:&lt;pid&gt;"). The run's row is claimed RUNNING by that
-- owner for lease_seconds, and every write of the row afterwards is one
-- compare-and-set on the status and the owner (under_lease), so a worker that
-- lost its lease changes nothing and stops (run_lease_lost).
--
-- The write fence: a write needs a persisted row and a lease to fence it
-- with. Before a write is sent it is named in the row's fence (the tool, the
-- digest of its arguments, the audit sequence its step is to take); the fence
-- is cleared only once every write of the turn is recorded. A run whose
-- worker vanished with its fence set is marked failed by the next process
-- (store:recover_runs): the call may or may not have run.
--
-- Fail closed: the three failures that end a run — a write with no lease
-- (write_without_durable_execution), a write or refusal whose record could
-- not be stored (audit_persistence_failed), a lost lease (run_lease_lost) —
-- set run.status to "failed" and run.error to their failure value.
--
-- Cancellation. run.cancel(store, run_uid), from any process, sets the run's
-- persisted flag. The cancel hook of every call reads it (at most once per
-- 10 ms); the connection polls the hook during the transfer, aborts, tells the
-- server and returns kind "cancelled" (in_flight: the server may already have
-- acted). That step is recorded, never retried, and the run ends "cancelled".
local core = require "mcpclient.core"
local errors = require "mcpclient.errors"

local json = core.json

local lease = {}

lease.LEASE_SECONDS = 900
lease.CANCEL_POLL_SECONDS = 0.01
lease.MAX_OWNER_LENGTH = 64

lease.RUNNING = "running"
lease.WAITING = "waiting_approval"
lease.COMPLETED = "completed"
lease.FAILED = "failed"
lease.CANCELLED = "cancelled"
-- The state of a Run object that handed its waiting run over (Run:release);
-- never a stored status.
lease.RELEASED = "released"

-- What an audit step and a digest say for arguments that cannot be encoded.
lease.UNENCODABLE = "(the arguments could not be encoded)"
local FENCE_ORDER = { "tool", "arguments_sha256", "sequence", "task_id" }

--- A warning in the run's log; a log that raises changes nothing.
function lease.warn(log, message)
  pcall(log, "warning", message)
end
local warn_to = lease.warn

---------------------------------------------------------------------------
-- Identity: uuid and lease owner
---------------------------------------------------------------------------

local function read_file(path, bytes)
  local f = io.open(path, "rb")
  if not f then return nil end
  local data = f:read(bytes or "l")
  f:close()
  return data
end

-- A random (version 4) UUID; /dev/urandom, else Lua's generator.
local function new_uuid()
  local raw = read_file("/dev/urandom", 16)
  local bytes = {}
  for i = 1, 16 do
    bytes[i] = raw and #raw == 16 and raw:byte(i) or math.random(0, 255)
  end
  bytes[7] = (bytes[7] & 0x0f) | 0x40
  bytes[9] = (bytes[9] & 0x3f) | 0x80
  local hex = string.format(string.rep("%02x", 16), table.unpack(bytes))
  return string.format("%s-%s-%s-%s-%s", hex:sub(1, 8), hex:sub(9, 12), hex:sub(13, 16), hex:sub(17, 20),
    hex:sub(21, 32))
end

-- The lease owner of a run started by this process: "interactive:<hostname>:<pid>",
-- at most 64 characters (the width of the row's claimed_by column).
local function default_owner()
  local segment = "interactive"
  local host = read_file("/proc/sys/kernel/hostname") or read_file("/etc/hostname") or "localhost"
  host = host:gsub("%s", "")
  if host == "" then host = "localhost" end
  local pid = (read_file("/proc/self/stat") or ""):match("^(%d+)") or "0"
  -- the pid is what tells two processes apart: keep it, shorten the host
  local keep = lease.MAX_OWNER_LENGTH - #segment - #pid - 2
  return string.format("%s:%s:%s", segment, host:sub(1, keep), pid)
end

local function lease_until(self)
  return math.floor(self.now() + self.lease_seconds)
end

-- Insert the run's row RUNNING, claimed by `owner`. A run whose row could not
-- be inserted goes on unpersisted, holding no lease (the fence refuses its
-- writes), and says so in the log.
local function claim(self, owner)
  local user_name = type(self.user) == "table" and self.user.name or nil
  local configuration = type(self.configuration) == "table" and self.configuration.identifier or nil
  local uid, message = self.store:insert_run {
    uuid = self.uuid, status = lease.RUNNING, claimed_by = owner, lease_expires = lease_until(self),
    user_name = type(user_name) == "string" and user_name or "",
    configuration = type(configuration) == "string" and configuration or "",
  }
  if uid then
    self.uid, self.owner, self.persisted, self.lease_expires = uid, owner, true, lease_until(self)
  else
    warn_to(self.log, string.format("Run %s has no persisted row and holds no lease: %s", self.uuid,
      tostring(message)))
  end
end


---------------------------------------------------------------------------
-- The write fence, as the store keeps it
---------------------------------------------------------------------------

-- The SHA-256 (lowercase hex) of a call's arguments as its audit step
-- records them (their JSON text; nil counts as {}). An audit step's
-- toolArguments, decoded and encoded again, give the same digest.
function lease.digest(arguments)
  if arguments == nil then arguments = {} end
  local text = json.try_encode(arguments) or json.encode(lease.UNENCODABLE)
  return (core.crypto.sha256(text):gsub(".", function(c) return string.format("%02x", c:byte()) end))
end

-- The calls a run's fence (its row's fence) names: a list of
-- { tool, arguments_sha256, sequence, task_id }, each a write that may have
-- been sent and whose audit step was to take that sequence (task_id: the
-- call became that task, whose handle the store keeps); {} when the fence is clear.
-- A fence this library did not write (an older version's "non_idempotent_write")
-- is one entry { unnamed = true, text = <the text> }.
function lease.fence(text)
  if type(text) ~= "string" then error("run.fence: text must be a string", 2) end
  if text == "" then return {} end
  local ok, list = pcall(json.decode, text)
  local entries = {}
  if ok and type(list) == "table" and json.is_array(list) then
    for i, e in ipairs(list) do
      if type(e) ~= "table" or type(e.tool) ~= "string" then entries = nil; break end
      entries[i] = { tool = e.tool, arguments_sha256 = tostring(e.arguments_sha256 or ""),
        sequence = math.tointeger(e.sequence), task_id = type(e.task_id) == "string" and e.task_id or nil }
    end
    if entries and #entries > 0 then return entries end
  end
  return { { unnamed = true, text = text } }
end

-- The fence's entry for one write: its local tool name, the digest of its
-- arguments (run.digest), and the audit sequence its step is to take.
local function fence_entry(rec, sequence)
  return json.set_key_order({ tool = core.repair_utf8(rec.call.name),
    arguments_sha256 = lease.digest(rec.call.arguments), sequence = sequence }, FENCE_ORDER)
end


---------------------------------------------------------------------------
-- Lease and status writes
---------------------------------------------------------------------------

-- A write of the run's row under its lease: the store's guarded update, one
-- compare-and-set on the status the run is in (RUNNING, or WAITING for an
-- approval) and the owner, which holds across processes on any host.
-- → true | false, err (err: the store failed; none: the row is not ours any more)
local function under_lease(self, fields)
  local store, uid, owner = self.store, self.uid, self.owner
  if not (self.persisted and owner) then return false end
  local status = self.status == lease.WAITING and lease.WAITING or lease.RUNNING
  local changed, _, err = store:guarded_update_run(uid, owner, fields, status)
  if changed == 1 and fields.lease_expires then self.lease_expires = fields.lease_expires end
  return changed == 1, err
end

-- The run stops for good: `kind` names why; run.error is its failure value.
-- `store_error` is the store's own failure behind it, when there was one.
local function fail(self, kind, detail, store_error)
  local _, _, err = errors.fail(kind, { detail = detail, run_uuid = self.uuid, store_error = store_error })
  self.error = err
  if kind ~= "run_lease_lost" then
    -- a lost lease means the row is someone else's now: leave it alone
    under_lease(self, { status = lease.FAILED, lease_expires = math.floor(self.now()) })
  end
  self.status = lease.FAILED
  warn_to(self.log, err.message)
  return err
end

-- The run stops because the store failed under a write of its row: run.error
-- is the store's own failure value, unchanged (kind "store"). The row is
-- marked failed if the store takes that write; if not, it stays running with
-- its fence, and the next process that opens the store once the lease has
-- expired marks it failed (see store:recover_runs).
local function store_failed(self, name, err)
  self.error = err
  under_lease(self, { status = lease.FAILED, lease_expires = math.floor(self.now()) })
  self.status = lease.FAILED
  warn_to(self.log, string.format("Run %s stops because its row could not be written; %s. %s", self.uuid,
    name and string.format('"%s" was not called', name) or "it stops here", err.message))
  return err
end

-- A lease write changed nothing (`err` nil: another owner holds the run) or
-- failed (`err`: the store's failure). Either way the run stops here.
local function lease_trouble(self, name, err)
  if err then return store_failed(self, name, err) end
  return fail(self, "run_lease_lost", string.format("Run %s lost its execution lease; %s.", self.uuid,
    name and string.format('"%s" was not called', name) or "it stops here"))
end

-- A refusal whose governance event could not be recorded: the run stops
-- closed, as for an executed write whose step could not be. → err
local function unrecorded_refusal(self, name, store_error)
  return fail(self, "audit_persistence_failed", string.format("The refusal of %s could not be recorded as a "
    .. "governance event in run %s; the run stops because a refusal must not go unrecorded.",
    name and string.format('tool "%s"', name) or "a tool", self.uuid), store_error)
end

-- The run ends as `status` (completed or cancelled), its fence cleared. A
-- store that fails that write fails the run (run.error: its failure value):
-- the row still says running, and only this process knows why.
local function conclude(self, status)
  local ok, err = under_lease(self, { status = status, fence = "", lease_expires = math.floor(self.now()) })
  self.status = status
  if ok or not self.persisted then
    self.fenced = {}
  elseif err then
    self.error, self.status = err, lease.FAILED
    warn_to(self.log, string.format("Run %s ended %s but its row could not be updated: %s", self.uuid, status,
      err.message))
  else
    warn_to(self.log, string.format("Run %s ended %s but its row could not be updated: the lease is held by "
      .. "another owner", self.uuid, status))
  end
end

-- Has someone asked this run to stop? Reads the persisted flag at most once
-- per 10 ms (the connection polls its cancel hook that often during a transfer).
-- A run that waits on a server (a slow call, a task followed for longer
-- than the lease) keeps its lease: the row read for the cancel flag also
-- renews the lease once half of it has passed, so no other process takes
-- over a run whose worker is alive. A renewal that fails changes nothing
-- here: the write after the call finds the lease lost or the store failing.
local function keep_lease(self)
  if self.status ~= lease.RUNNING or not self.lease_expires then return end
  if self.now() < self.lease_expires - self.lease_seconds / 2 then return end
  under_lease(self, { lease_expires = lease_until(self) })
end

local function cancel_requested(self)
  if self.cancel_seen then return true end
  if not self.persisted then return false end
  local t = self.clock()
  if self.last_poll and t - self.last_poll < lease.CANCEL_POLL_SECONDS then return false end
  self.last_poll = t
  local row = self.store:run(self.uid)
  if row and row.cancel_requested then self.cancel_seen = true end
  keep_lease(self)
  return self.cancel_seen == true
end

-- A person's cancel reaches the servers before it is written down. Calls of
-- this run on the wire in this process see the flag at their next poll and
-- tell their servers at once; a store write holds this thread for as long as
-- the disk takes (a commit waits for fsync), and no notice could leave
-- meanwhile. So while calls are on the wire the flag is written when the
-- last of them returns; otherwise at once. → true | nil, message, err
local function request_cancel(self)
  self.cancel_seen = true
  if not self.persisted then return true end
  if (self.on_the_wire or 0) > 0 then
    self.cancel_unsaved = true
    return true
  end
  return self.store:request_cancel(self.uid)
end

local wire_guard = { __close = function(guard)
  local self = guard.run
  self.on_the_wire = self.on_the_wire - 1
  if self.on_the_wire > 0 or not self.cancel_unsaved then return end
  self.cancel_unsaved = nil
  local ok, message = self.store:request_cancel(self.uid)
  if not ok then
    warn_to(self.log, string.format("Run %s was cancelled but its row could not say so: %s", self.uuid,
      tostring(message)))
  end
end }

-- Held (as a to-be-closed value) while a call or read of the run is on the wire.
local function on_the_wire(self)
  self.on_the_wire = (self.on_the_wire or 0) + 1
  return setmetatable({ run = self }, wire_guard)
end

lease.new_uuid, lease.default_owner, lease.lease_until, lease.claim = new_uuid, default_owner, lease_until, claim
lease.under_lease, lease.fail, lease.store_failed, lease.lease_trouble = under_lease, fail, store_failed, lease_trouble
lease.unrecorded_refusal, lease.conclude, lease.cancel_requested = unrecorded_refusal, conclude, cancel_requested
lease.fence_entry = fence_entry
lease.request_cancel, lease.on_the_wire = request_cancel, on_the_wire

return lease
