--- Runs: the one path an agent loop takes to a tool.
--
--   local run = require "mcpclient.agent.run"
--   local r = assert(run.start(store, { user = { name = "ops", uid = 1, admin = true },
--                                       configuration = config, providers = zones }))
--   local specs  = r:tools()                                -- what the model may be offered
--   local result = r:invoke("mcp_docs_read_page", { uid = 3 })   -- { text, is_error [, err] }
--   r:finish()                                              -- completed
--
-- This file is the public module; each job is a part in run/, and the parts
-- never require this file (the Run object is what they share):
--   run/setup.lua       options, tools, registry and gate; the Run object
--   run/lease.lua       identity, claim, lease writes, the write fence,
--                       the failures that end a run, the cancel flag
--   run/trail.lua       the run's events: steps, notes, reads (fail-closed
--                       for writes)
--   run/turn.lua        a turn's records: admit, refuse, hold for approval,
--                       execute in the model's order, record, results
--   run/reads.lua       resource reads and prompt gets through the gate
--   run/sampling.lua    a server's sampling requests through the gate, audited
--   run/approval.lua    waiting runs, decisions from any process, resume
--   run/take_over.lua   taking a run over from a process that is gone
--   run/safe_point.lua  re-import at run:tools(), then the offered tools
--
-- Results, one per call: { text, is_error [, err] [, suspended] [, stopped] }.
--   text, is_error  what the model reads.
--   err             the library's failure value (see mcpclient.errors), present
--                   exactly when something failed rather than answered: the
--                   call's own failure exactly as the connection returned it
--                   (result.err.kind == "cancelled" for a call cancelled in
--                   flight), or the failure that ended the run at this call
--                   (the same table as run.error). A refusal of the gate, an
--                   unknown tool, an exhausted budget, a denied approval and a
--                   server's isError answer are answers for the model, not
--                   failures of the API: they carry no err.
--   suspended       the call waits for approval (see below).
--   stopped         the run has ended (run.status); this call, and every later
--                   one, is not made. A call not made because the run had
--                   already failed carries run.error as err.
-- The three failures that end a run — a write with no lease
-- (write_without_durable_execution), a write whose record could not be
-- stored (audit_persistence_failed), a lost lease (run_lease_lost) — set
-- run.status to "failed" and run.error to their failure value (err.run_code is
-- the kind's fixed code).
--
-- Approval (run/approval.lua): a turn runs in the model's order and stops
-- at the first call that needs a person (the calls before it run; it and
-- those after it wait); run:pending() lists what waits, run:approve(id)/
-- deny(id, reason) (or the whole batch) and resume() continue it, a
-- decision may come from any process (run.decide), and another process may
-- take a waiting run over (run.take_over).
--
-- The safe point (run/safe_point.lua): run:tools() imports again the
-- catalogues a change notice made stale on servers set to re-import on their
-- own, before the gate decides the next turn's tools.
--
-- The rest of a Run: run:tools() (the specs the gate offers the model now),
-- run:events() (the trail), run:cancel(), run:renew() (the lease, while a
-- person takes long), run:release() (hand a waiting run over), run:finish()
-- (→ final status), run:close() (the connections of a provider the run opened itself); fields
-- run.uuid, run.uid (nil when unpersisted), run.persisted, run.owner,
-- run.status, run.error, run.round.
--
-- Cancellation: run.cancel(store, run_uid), from any process, sets the run's
-- persisted flag, which every call's cancel hook reads (run/lease.lua).
local default_log = require("mcpclient.log").default
local check_options = require("mcpclient.agent.options").check
local approval = require "mcpclient.agent.run.approval"
local lease = require "mcpclient.agent.run.lease"
local reads = require "mcpclient.agent.run.reads"
local safe_point = require "mcpclient.agent.run.safe_point"
local setup = require "mcpclient.agent.run.setup"
local take_over = require "mcpclient.agent.run.take_over"
local trail = require "mcpclient.agent.run.trail"
local turn = require "mcpclient.agent.run.turn"

local run = {}

run.LEASE_SECONDS = lease.LEASE_SECONDS
run.REMOTE_BUDGET = setup.REMOTE_BUDGET
run.CANCEL_POLL_SECONDS = lease.CANCEL_POLL_SECONDS
run.MAX_OWNER_LENGTH = lease.MAX_OWNER_LENGTH
-- Seconds a remote call of a run with tasks may take, polling its task
-- included (the run's longer horizon), and a take-over's wait for one.
run.TASK_BUDGET = setup.TASK_BUDGET

run.RUNNING = lease.RUNNING
run.WAITING = lease.WAITING
run.COMPLETED = lease.COMPLETED
run.FAILED = lease.FAILED
run.CANCELLED = lease.CANCELLED
-- The state of a Run object that handed its waiting run over (Run:release);
-- never a stored status.
run.RELEASED = lease.RELEASED

local Run = {}
Run.__index = Run

--- Start a run: insert its row RUNNING, claimed by `owner` for lease_seconds.
-- A run whose row could not be inserted is still returned, with
-- persisted = false and no lease: it can call tools without a side effect,
-- and the fence refuses every write.
-- @param store the store the run is kept in (mcpclient.agent.store)
-- @param options {
--   user          = { name, uid, admin } (nil: nobody, which is not an administrator; remote tools are
--                   offered to administrators only by default, see Run:tools),
--   configuration = the policy configuration (see mcpclient.agent.policy),
--   gate          = a policy Gate (default: the store's switches, refusals recorded as governance events),
--   providers, mode = for the default gate (provider zones; the dataClassEnforcement setting),
--   registry      = { get, names } — or the tools from:
--   provider      = a tool provider ({ tools = function() }, e.g. catalogue.provider(store, ...));
--                   default catalogue.provider(store), owned by the run and closed by finish/close,
--   tools         = a list of tools, added after the provider's,
--   builtins      = a list of the host's own tools (they win a name),
--   owner         = lease owner (default "interactive:&lt;hostname&gt;:&lt;pid&gt;", ≤ 64 characters),
--   now           = function() -> unix seconds (default os.time),
--   clock         = function() -> monotonic seconds (default core.now; durations, cancel polling),
--   lease_seconds = 900, remote_budget = 20 (remote calls per run segment),
--   uuid          = the run's uuid (default: a random one),
--   connect       = function(row) -> connection | nil, message, err: how read_resource,
--                   get_prompt and an automatic re-import reach a server (default
--                   catalogue.connect with the store's grants),
--   on_sampling   = function(request) -> message | nil, reason: the host's own model call for a
--                   server's sampling request (mcp.connect's on_sampling; the message may carry
--                   usage = { input_tokens, output_tokens } for the audit). Given, the connections the run
--                   opens itself (its default provider's, its reads') declare sampling, and each request
--                   is judged first (run/sampling.lua: the gate, approval, the remote budget) and audited
--                   as an event of kind "sampling"; a refusal answers the server with an error.
--   validate_output = false: the default provider's connections hand tool results over without
--                   checking structuredContent against each tool's imported outputSchema (by default
--                   a mismatch is the call's failure, invalid_output, recorded in the trail),
--   log           = function(level, message) (default: one line on stderr) }
-- @return Run | nil, message, err (the provider could not list its tools)
function run.start(store, options)
  options = setup.validate(store, check_options("run.start", options, setup.option_types))
  local log = options.log or default_log
  local tools, message, err = setup.tools_of(store, options, log)
  if not tools then return nil, message, err end
  local self = setup.new_run(store, options, log, tools,
    { uuid = options.uuid or lease.new_uuid(), tasks = options.tasks == true }, Run)
  lease.claim(self, options.owner or lease.default_owner())
  return self
end

--- Ask run `run_uid` to stop, from any process: sets its persisted cancel
--- flag. → true | nil, message, err
function run.cancel(store, run_uid)
  return store:request_cancel(run_uid)
end

--- The SHA-256 (lowercase hex) of a call's arguments as its audit step
--- records them (their JSON text; nil counts as {}). An audit step's
--- toolArguments, decoded and encoded again, give the same digest.
function run.digest(arguments)
  return lease.digest(arguments)
end

--- The calls a run's fence (its row's fence) names: a list of
--- { tool, arguments_sha256, sequence, task_id }, each a write that may have
--- been sent and whose audit step was to take that sequence (task_id: the
--- call became that task, whose handle the store keeps); {} when the fence is clear.
--- A fence this library did not write (an older version's "non_idempotent_write")
--- is one entry { unnamed = true, text = &lt;the text&gt; }.
function run.fence(text)
  return lease.fence(text)
end

--- A waiting run's row as a person decides on it: { round, steps (as
--- run:pending() lists them, under the text rule, each with its id,
--- needs_approval, reason, and the decision on it so far: decision
--- ("approved" | "denied" | nil), denial_reason), approval ("approved" or
--- "denied" when every step was decided alike at once, else nil) } | nil
--- when the row does not wait on steps it keeps.
function run.waiting(row)
  return approval.waiting(row)
end

--- A person's decision on a waiting run, from any process (the one that
--- holds the run, another, the operator's `mcpclient runs approve|deny`):
--- recorded on the run's row and as an "approval" event of its trail (`by`
--- names who decided). The first decision on a step wins. The run's holder applies it
--- on resume(); a process that takes the run over finds it there.
--- Options: by = who decided (default "operator"; under the text rule,
--- clipped to 64); id = the one waiting step decided (as run:pending() and
--- run.waiting list it; default: every step not decided yet); reason = why
--- a step was denied (it reaches the model in the step's answer); steps =
--- the pending_steps text the person was shown (default: the row's now).
--- A refusal (kind "invalid"): the run is not waiting on steps it keeps, it
--- waits on no step with that id, that step (or every step) was decided
--- already, or the run changed meanwhile; nothing is recorded.
-- @param store the store the run is on
-- @param run_uid the run's uid
-- @param approved true to approve, false to deny
-- @param options { by, id, reason, steps }
-- @return true | nil, message, err (kind "invalid" as above; "store")
function run.decide(store, run_uid, approved, options)
  return approval.decide(store, run_uid, approved, options)
end

--- Take over a run whose worker is gone (its lease expired): claim its
--- lease, then follow each task-backed call it left open to its end — the
--- same task on the server, never a second call — recording each step
--- (with its task id, who started it and who finished it) and clearing the
--- fence. The run is then this process's: RUNNING, ready for more turns or
--- finish(). A run whose fence names a call that did not become a stored
--- task was marked failed instead (it may or may not have run).
---
--- A run waiting for approval is taken over the same way once its lease has
--- expired or its holder released it (Run:release): the claim is the same
--- compare-and-set, so its old holder's approve/resume changes nothing
--- after it (run_lease_lost, nothing sent). Nothing of its waiting turn was
--- sent, so nothing is followed: the run is rebuilt from the steps its row
--- keeps and comes back WAITING, run:pending() listing them as before, with
--- the decision a person recorded meanwhile (run.decide) if there is one;
--- then approve() or deny() as needed, and resume() sends the approved steps
--- once (admitted by this process's gate again) under this process's lease.
---
--- The options are run.start's: the tools the run's tasks were called
--- through must be among them, and task_budget bounds the wait for each
--- task. The results are one per followed task, { text, is_error, err, open }
--- (open: still open, its fence kept).
-- @param store the store the run is on (mcpclient.agent.store)
-- @param run_uid the run's uid, an integer or as text ("5", as `mcpclient runs` prints it), or its UUID
-- @param options as run.start's
-- @return Run, results | nil, message, err (kind "run_lease_lost": another process holds it, no run has that UUID)
function run.take_over(store, run_uid, options)
  return take_over.run(store, run_uid, options, Run)
end

--- Stop this run: this object's own flag at once (an unpersisted run has
--- only that one), and the persisted flag when the run has a row — written
--- once this process's calls of the run in flight have told their servers.
function Run:cancel()
  return lease.request_cancel(self)
end

--- The run's trail, in order: one entry per event, { sequence, kind, round, duration_ms, payload
--- (JSON text), data (payload decoded) }. A persisted run reads the store; an
--- unpersisted one answers with what it kept in memory (nothing else keeps it).
-- @return list | nil, message, err
function Run:events()
  return trail.events(self)
end

--- The tools the gate offers to the model now, as { name, description,
--- parameters } (every enabled tool is decided; refusals are recorded: one
--- that cannot be recorded stops the run closed, and nothing is offered).
--- This is the run's safe point: first, the catalogues due a re-import are
--- imported again and the run's tools listed again from its provider (see
--- safe_point below).
--- `why` is a sentence the host can show the person beside the specs:
--- remote tools are for administrators only by default, so a run whose user
--- is not one is offered none of them and says so; nothing is offered at
--- all; or the run stopped. nil otherwise.
-- @return specs, why (a sentence when the run offers no remote tool or nothing at all, or stopped; else nil)
function Run:tools()
  return safe_point.tools(self)
end

--- One model turn: its tool calls in the model's order, admitted one by one up to the first that needs a
--- person; those before it executed at once (the trail keeps their order), it and the rest held (pending()).
--- Each call is { id = "&lt;the model's tool-call id&gt;" (optional, unique in
--- the turn), name = "&lt;tool&gt;", arguments = { ... } }.
-- @param calls a list of calls
-- @return results, one per call: { text, is_error [, err] [, suspended] [, stopped] }
function Run:turn(calls)
  turn.check_calls(calls)
  turn.check_not_waiting(self)
  self.round = self.round + 1
  if self.status == run.RUNNING and lease.cancel_requested(self) then lease.conclude(self, run.CANCELLED) end
  return turn.play(self, turn.new_turn(calls, self.round), false)
end

--- One tool call as a turn of its own. → result { text, is_error [, err] [, suspended] [, stopped] }
function Run:invoke(name, arguments)
  if type(name) ~= "string" then error("invoke: the tool name must be a string", 2) end
  if arguments ~= nil and type(arguments) ~= "table" then error("invoke: arguments must be a table", 2) end
  turn.check_not_waiting(self)
  return self:turn { { name = name, arguments = arguments } }[1]
end

--- What a suspended run waits on, in the model's order: one entry per
--- waiting call or read, { id, kind ("call" | "read" | "prompt"), tool,
--- server, uri, needs_approval, reason } (a call's name and arguments, a
--- prompt's name and arguments beside them). `id` is the call's id as the
--- host passed it in the turn ({ id = &lt;the model's tool-call id&gt;, name,
--- arguments }; "call-&lt;round&gt;-&lt;n&gt;" when it passed none), a read's an
--- id of its own ("read-&lt;round&gt;-&lt;n&gt;"); `reason` is "approval" for a step
--- that needs a person, "behind:&lt;id&gt;" for one that only waits behind
--- the step that stopped the turn. uri and name under the text rule.
function Run:pending()
  return approval.pending(self)
end

--- The host approves one waiting step (`id`, as pending() lists it), or,
--- with no id, every step not decided yet (then resume()). A persisted run
--- records the decision on its row (an "approval" event in its trail).
--- An id no step of the waiting turn has is misuse: it raises.
--- A refusal of kind "invalid": a person decided that step first, from
--- another process — that decision holds and resume() applies it; of kind
--- "run_lease_lost": another process holds the run now.
-- @return true | nil, message, err
function Run:approve(id) return approval.decide_approval(self, true, id) end

--- The host refuses one waiting step, or with no id every step not decided
--- yet; denying one denies no other. deny(id, reason) / deny(nil, reason);
--- deny(text) with one argument decides the step whose id is `text`, or,
--- when no step has that id, the whole batch with `text` as its reason.
--- After resume() a denied step answers with an error result (the reason
--- in it) and its denial is in the governance log.
-- @return as approve()
function Run:deny(id, reason)
  if reason == nil and type(id) == "string" then
    local named = false
    for _, entry in ipairs(approval.pending(self)) do
      if entry.id == id then named = true end
    end
    if not named then id, reason = nil, id end
  end
  return approval.decide_approval(self, false, id, reason)
end

--- Renew the run's lease for another lease_seconds, as each call does: for
--- a holder that waits for a person longer than its lease and means to keep
--- the run (once the lease has expired, another process may take it over).
--- A refusal of kind "run_lease_lost": another process holds it now, and
--- this object stops; "store": the row could not be written.
-- @return true | nil, message, err
function Run:renew()
  return approval.renew(self)
end

--- Hand a waiting run over: its lease ends now, so another process may take
--- it over at once (run.take_over) instead of after the lease expires, and
--- this object lets go of it (status "released": no more turns, reads or
--- resume here). Only a persisted run waiting for approval whose steps are on
--- its row can be released.
--- A refusal of kind "run_lease_lost": it was not this process's any more;
--- "store": the row could not be written, and the run stays this process's.
-- @return true | nil, message, err
function Run:release()
  return approval.release(self)
end

--- Continue a suspended run in a fresh segment: a new remote-call budget and
--- a renewed lease. The step that stopped the turn must be decided first.
--- The waiting steps go on in the model's order: approved ones are admitted
--- again (the gate may have changed its mind meanwhile) and sent once,
--- denied ones are refused (their denial in the governance log), and the
--- turn stops again at the next step that needs a person and was not decided.
-- @return the suspended turn's results, in call order (those sent before it stopped included)
function Run:resume()
  return approval.resume(self)
end

---------------------------------------------------------------------------
-- Ending
---------------------------------------------------------------------------

--- End the run: COMPLETED unless it already failed or was cancelled (a tool
--- that answered with an error, a server that was down, is not a failed run).
--- A run waiting for approval completes without its pending calls.
-- @return the final status
function Run:finish()
  if self.status == run.RUNNING or self.status == run.WAITING then
    lease.conclude(self, run.COMPLETED)
    self.waiting, self.decisions, self.reasons = nil, nil, nil
  end
  self:close()
  return self.status
end

--- Read a resource of server `identifier` through the gate: the server's
--- operator-set data class against the configuration's ceiling and zone,
--- remote reads for administrators only, as for its tools. A read needs no
--- approval unless the operator asked for it on the server; then it suspends
--- the run as a tool call does (run.status "waiting_approval", the read in
--- run:pending() as { kind = "read", server, uri }) and run:resume() after
--- approve() sends it once and returns its result (after deny(), a refusal
--- in the governance log, nothing sent). A resource_link a tool returned is
--- read this way: read_resource(nil, uri) reads it from the server whose
--- tool returned it (the run keeps each link's server; a uri no tool of the
--- run returned is refused as a read of an unknown server is, nothing read); naming a server reads from that
--- one, and the gate judges that one. Reads spend the remote-call budget as
--- calls do. Each read is an event of the run ("resource", its latency); a
--- refusal reaches the governance log.
-- @return { text (inert and bounded as a tool result), is_error [, err] [, suspended] }
function Run:read_resource(identifier, uri)
  if (identifier ~= nil and type(identifier) ~= "string") or type(uri) ~= "string" then
    error("read_resource: the server identifier (or nil) and the uri must be strings", 2)
  end
  turn.check_not_waiting(self)
  if identifier == nil then
    -- a link is read from the server whose tool returned it; naming another is the host's explicit choice
    identifier = self.links and self.links[uri]
    if not identifier then return turn.unlinked_read(self, uri) end
  end
  return turn.gated_read(self, "resource", identifier, uri, nil, reads.fetch_with("resource", uri))
end

--- Get a prompt of server `identifier` through the gate, as read_resource
--- (pending as { kind = "prompt", server, name, arguments }).
--- text is the messages as a model reads them (inert, bounded); turns are
--- { role, text, note } each (inert: the roles kept as structure).
-- @return { text, turns, is_error [, err] [, suspended] }
function Run:get_prompt(identifier, name, arguments)
  if type(identifier) ~= "string" or type(name) ~= "string" then
    error("get_prompt: the server identifier and the prompt name must be strings", 2)
  end
  turn.check_not_waiting(self)
  return turn.gated_read(self, "prompt", identifier, name, arguments, reads.fetch_with("prompt", name, arguments))
end

--- Close the connections the run opened itself (a provider's, and those of
--- its reads). Idempotent.
function Run:close()
  for uid, conn in pairs(self.offer_connections or {}) do
    self.offer_connections[uid] = nil
    pcall(conn.close, conn)
  end
  local provider = self.provider
  if provider then
    self.provider = nil
    provider.close()
  end
  return true
end

Run.__close = Run.close

function Run:__tostring()
  return string.format("run %s (%s)", self.uuid, self.status)
end

return run
