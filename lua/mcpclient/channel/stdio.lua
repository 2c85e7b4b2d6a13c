--- The stdio channel: a local MCP server as a supervised child process.
--
-- The server is a program the operator (or the host's code) named by its
-- argv: started without a shell, in a process group of its own, with an
-- allow-listed environment (csrc/core/process.c). Each JSON-RPC message is one
-- line on its stdin or stdout; its stderr is kept (the last 64 KiB) and
-- reaches a log line or a failure message only through the text rule.
--
-- It keeps the channel contract (docs/ARCHITECTURE.md): request, notify,
-- cancel, drain, end_session, close. Its own rules:
--
-- * Never twice. A request handed whole to the child's stdin may have run
--   (call.written). When the child dies, or its output breaks the framing,
--   after that, the request fails "interrupted" and is never written again.
-- * A new child per operation at most. The next operation after a child
--   ended starts a new one, once; only a request never written to any child
--   may go to it. A new child must be opened first (server/discover, or
--   initialize in the 2025 era): a request that is not an opening fails
--   unwritten with `session_lost` until the child it would go to has been
--   opened, and the session opens the era again (the opening starts the
--   child) and sends it then.
-- * Bounded. Every wait and write is bounded by the operation's budget and
--   polls its cancel hook; a child that stops reading stdin or stops
--   answering cannot hold a call past it, and stopping a broken child inside
--   a call waits at most half the budget left per step.
-- * One writer. The child's stdin is one pipe: a message (a request, a
--   notification, a cancel notice, the answer to a server request) is
--   written whole before any byte of another, in the order the writers came.
--   A writer that finds the pipe taken waits in line, one turn of the engine
--   at a time, within its operation's budget and polling its cancel hook; one
--   that gives up there (or whose connection is closed meanwhile) was never
--   written, and never is. A line begun is finished within the budget, or the
--   child is stopped (the framing is broken).
-- * Framing. A line over the read cap or a line that is not JSON breaks the
--   framing: the child is stopped, and the request it was read for fails
--   "interrupted" (it was written and may have run), naming the line
--   (clipped); an opening, which acts on nothing, fails "malformed".
-- * Answers nobody waits for. An answer to an id no request waits for (a
--   second answer to a finished request, an unknown id) is passed over and
--   counted (`dropped`; the trace line of the request that read it names it),
--   never charged to the request being read; a late answer to a request given
--   up on is passed over.
-- * Closed. Once the host closed the connection, every operation still
--   waiting on it (for its answer, for room in stdin, for its turn at the
--   pipe) fails "closed", and nothing is written or started any more.
-- * One pipe, both ways, for the child's whole life. What the child writes
--   between two answers (a 2025 server's change notices) waits (in the
--   child's line buffer, where any turn of the engine reads it, or in the
--   pipe) and is handed out, in order, to the next operation. A request the session
--   leaves open (`call.standing`: a 2026-07-28 subscriptions/listen) is
--   answered once it is settled (acknowledged), and stays open: every later
--   message naming it in `_meta["io.modelcontextprotocol/subscriptionId"]`
--   goes to its on_message, whichever request is being read, until the
--   session cancels it, the server answers it (ends it) or the child ends.
--   A message naming a subscription that is not open here is passed over.
--   What waits can also be taken without any request (`drain`: the line
--   buffer and the pipe, no wait), so a notice is seen before a cached answer.
local core = require "mcpclient.core"
local credentials = require "mcpclient.credentials"
local Deadline = require "mcpclient.deadline"
local engine = require "mcpclient.engine"
local errors = require "mcpclient.errors"

local json = core.json
local fail = errors.fail
local floor = math.floor
local turn = engine.turn

local stdio = {}

local Channel = {}
Channel.__index = Channel

local MAX_CONTAINERS = 65536
-- How long server/discover waits for an answer before the server is taken
-- for one of the 2025 era: such a server may stay silent.
local PROBE_SECONDS = 5
local NOTICE_SECONDS = 0.25     -- a cancel notice: its wait for the pipe and its write, fire and forget
-- A writer whose budget ran out this long ago and that still holds its place
-- (its coroutine is no longer resumed) is put out of line, so it holds up no
-- other writer for good.
local STALE_SECONDS = 1
local DROPPED_NAMED = 5         -- the ids of answers passed over one request names, at most
local STDERR_SHOWN = 400        -- bytes of a child's stderr a message or log line repeats
local METHOD_NOT_FOUND = -32601
local SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"
-- Requests that cannot act on anything: the opening of either era.
local OPENING = { initialize = true, ["server/discover"] = true }

--- @param config { identifier, command (argv), env (NAME = value or "env:VAR"), cwd, resolver,
---   log (function(level, text)), clock (the connection's: durations are measured on it),
---   spawn (core.spawn, or a fake of it) }
function stdio.new(config)
  return setmetatable({
    config = config,
    waiting = {},  -- id -> call: requests written and not yet answered
    abandoned = {},  -- id -> true: requests given up on, whose late answers are passed over
    streams = {},  -- id -> call: requests left open (standing) on the running child
    proc = nil,    -- the running child, if any
    opened = nil,  -- the child an opening (server/discover, or initialize and initialized) completed on
    pid = nil,     -- the running child's process id (read by conn:server())
    writer = nil,  -- the ticket writing to the child's stdin now
    queue = {},    -- the tickets waiting for the pipe, first come first served
    dropped = 0,   -- answers read that no request waited for, passed over
    closed = false,  -- the host closed the connection
  }, Channel)
end

---------------------------------------------------------------------------
-- The child
---------------------------------------------------------------------------

-- The tail of the child's stderr under the text rule, or nil when empty.
local function stderr_tail(proc)
  local text = proc:stderr()
  if text == "" then return nil end
  if #text > STDERR_SHOWN then text = text:sub(-STDERR_SHOWN) end
  return core.clip((text:gsub("%s+", " ")), STDERR_SHOWN)
end

-- The longest stderr line on_stderr is handed: a longer one is handed in parts.
local STDERR_LINE = 4096

-- What the child wrote to stderr since the last look, to the host's
-- on_stderr as whole lines (without their CR LF or LF) under the text rule,
-- each call after the engine's turn that read them, never from inside one.
-- A line not ended yet waits for its end (`final`: the child is gone, it is
-- handed as it is); one the 64 KiB ring lost part of is dropped. A handler
-- that raises is logged and changes nothing; it is never re-entered.
local function stderr_lines(self, proc, final)
  local handler = self.config.on_stderr
  if not handler or not proc or not proc.stderr_since or self.in_stderr then return end
  if self.stderr_of ~= proc then
    self.stderr_of, self.stderr_pos, self.stderr_partial, self.stderr_cut = proc, 0, "", nil
  end
  local text, pos, lost = proc:stderr_since(self.stderr_pos)
  self.stderr_pos = pos
  if lost > 0 then
    -- the ring dropped the start of what came: the line it cut is not handed over
    self.stderr_partial = ""
    local nl = text:find("\n", 1, true)
    text = nl and text:sub(nl + 1) or ""
    if not nl then self.stderr_cut = true end
  elseif self.stderr_cut then
    -- still the cut line: up to its end
    local nl = text:find("\n", 1, true)
    text = nl and text:sub(nl + 1) or ""
    if nl then self.stderr_cut = nil end
  end
  local buffered = self.stderr_partial .. text
  local lines, from = {}, 1
  -- a line over STDERR_LINE bytes, ended or not, goes in parts of that size
  local function add(line)
    while #line > STDERR_LINE do
      lines[#lines + 1] = line:sub(1, STDERR_LINE)
      line = line:sub(STDERR_LINE + 1)
    end
    return line
  end
  while true do
    local nl = buffered:find("\n", from, true)
    if not nl then break end
    local tail = add((buffered:sub(from, nl - 1):gsub("\r$", "")))
    lines[#lines + 1] = tail
    from = nl + 1
  end
  local rest = add(buffered:sub(from))
  if final and rest ~= "" then lines[#lines + 1], rest = rest, "" end
  self.stderr_partial = rest
  if #lines == 0 then return end
  self.in_stderr = true
  for _, line in ipairs(lines) do
    local ok, why = pcall(handler, core.inert(line))
    if not ok then
      pcall(self.config.log, "warning", string.format('MCP server "%s" (stdio): the on_stderr handler raised: %s',
        self.config.identifier, core.clip(tostring(why))))
    end
  end
  self.in_stderr = false
end

-- End the child (the whole shutdown) and forget it. Why it was ended,
-- with how it ended and its stderr's tail, goes to the log when `why` is
-- given (our own close gives none) and not `quiet` (a failure value says
-- it already: said once). Inside an operation each wait of the shutdown is
-- bounded by half the budget left.
-- @return how it ended ("exited with status 3"), the stderr tail
local function stop(self, why, op, quiet)
  local proc = self.proc
  if not proc then return nil end
  self.proc, self.opened, self.pid = nil, nil, nil
  self.stopped_why = why or "the server process was stopped"
  local tail = stderr_tail(proc)
  local grace
  if op then grace = math.max(0, math.min(2000, floor(op.deadline:remaining() * 500))) end
  local ending = proc:close(grace)
  stderr_lines(self, proc, true)
  for id, call in pairs(self.waiting) do
    self.waiting[id] = nil
    call.lost = call.lost or why or "the server process was stopped"
  end
  for id, call in pairs(self.streams) do
    self.streams[id] = nil
    call.ended = "the server process ended"
  end
  local log = self.config.log
  if why and log and not quiet then
    pcall(log, "warning", string.format('MCP server "%s" (stdio): the server process %s (%s)%s',
      self.config.identifier, ending, why, tail and ("; its stderr ends: " .. tail) or ""))
  end
  return ending, tail
end

-- A failure naming how the child ended and the tail of its stderr.
local function ended(self, op, kind, detail, fields)
  local proc = self.proc
  local tail = proc and stderr_tail(proc)
  local ending = stop(self, detail, op, true) or "had ended"  -- the failure says it: no warning too
  fields = fields or {}
  fields.server = self.config.identifier
  fields.detail = string.format("%s; the server process %s%s", detail, ending,
    tail and ("; its stderr ends: " .. tail) or "")
  return fail(kind, fields)
end

-- The failure of an operation the host's close ended: in flight when a
-- tools/call was written (the server may have acted on it).
local function closed(self, call)
  return fail("closed", { server = self.config.identifier,
    in_flight = call ~= nil and call.written == true and call.method == "tools/call" })
end

-- The env option with its references resolved: NAME = value | nil, reason
-- (naming the variable, never a value).
local function resolved_env(env, resolver)
  local out = {}
  for name, value in pairs(env or {}) do
    if value:match("^env:") then
      local secret, why = credentials.resolve(value, resolver)
      if not secret then return nil, string.format("env.%s: %s", name, why) end
      out[name] = secret
    else
      out[name] = value
    end
  end
  return out
end

-- Start a child for this operation: at most one per operation (a child that
-- ended at server/discover does not count: it ran nothing).
-- @return true | nil, message, err
local function start(self, op)
  if self.proc then return true end
  local config = self.config
  if op.stdio_started then
    return fail("transport", { server = config.identifier,
      detail = "the server process ended, and this operation has started one already" })
  end
  local env, why = resolved_env(config.env, config.resolver)
  if not env then return fail("credential", { server = config.identifier, detail = why }) end
  local proc, kind, detail = (config.spawn or core.spawn) { argv = config.command, env = env, cwd = config.cwd }
  if not proc then return fail(kind or "transport", { server = config.identifier, detail = detail }) end
  op.stdio_started = true
  self.proc, self.pid = proc, proc:pid()
  return true
end

-- Is the child still running, as far as the host knows? core.spawn's handle
-- answers without a system call while the engine watches the child's exit
-- (a child that exited since the engine's last turn is learnt of from its
-- stdin: see write_line); a stand-in for core.spawn is asked its status.
local function running(proc)
  if proc.running then return proc:running() end
  return proc:status() == "running"
end

-- May `call` go to the child now? An opening starts a child when there is
-- none. Any other request needs a child that has been opened: one that
-- ended took the era's state with it, so the request fails unwritten with
-- session_lost and the session opens the era again on the next child.
local function ready(self, op, call)
  if self.proc and not running(self.proc) then stop(self, "it ended between operations") end
  if OPENING[call.method] then return start(self, op) end
  if self.proc and self.opened == self.proc then return true end
  if self.proc then stop(self, nil) end
  local _, message, err = fail("transport", { server = self.config.identifier,
    detail = "the server process had ended; a new one is opened before it is asked anything" })
  err.session_lost = true
  return nil, message, err
end

---------------------------------------------------------------------------
-- Writing
---------------------------------------------------------------------------

-- The engine reads the child's stdout and stderr in each of its turns (the
-- C core owns both for the child's life), so a wait here is a turn of the
-- engine: no descriptor is watched or unwatched per wait, and a child
-- flooding stderr is never left blocked on it. Only a full stdin is waited
-- on by its descriptor, by the one writer that holds the pipe.
--
-- A writer holds a ticket: { channel, deadline (its operation's), proc (the
-- child its line began on), partial (part of its line is in the pipe, not
-- all of it) }.

-- Take `ticket` out of line, wherever it stands.
local function leave_line(self, ticket)
  local queue = self.queue
  for i = 1, #queue do
    if queue[i] == ticket then
      table.remove(queue, i)
      return
    end
  end
end

-- Give the pipe up. A line left cut off breaks the framing: the child it
-- began on is stopped (the next writer's bytes would join it).
local function release(self, ticket)
  if self.writer ~= ticket then return leave_line(self, ticket) end
  self.writer = nil
  if ticket.partial and ticket.proc == self.proc then
    ticket.partial = nil
    stop(self, "a message to it was left cut off mid-line")
  end
end

-- Writers whose budget ran out long ago and that still hold their place:
-- their coroutine is not resumed any more (a host dropped it), so they are
-- put out of line, the pipe freed (a half-written line stops the child).
local function clear_stale(self)
  local writer = self.writer
  if writer and writer.deadline:remaining() < -STALE_SECONDS then release(self, writer) end
  local queue = self.queue
  for i = #queue, 1, -1 do
    if queue[i].deadline:remaining() < -STALE_SECONDS then table.remove(queue, i) end
  end
end

-- The failure of a writer that gave up waiting for the pipe: nothing of it
-- was written.
local function unwritten(self, op, why)
  local identifier = self.config.identifier
  if why == "closed" then return closed(self, nil) end
  if why == "cancelled" then return fail("cancelled", { server = identifier, in_flight = false }) end
  return fail("deadline", { server = identifier, budget = errors.seconds(op.deadline.total) })
end

-- Why a writer waiting for the pipe stops waiting, or nil.
local function gives_up(self, op)
  if self.closed then return "closed" end
  if op.cancel and op.cancel() then return "cancelled" end
  if op.deadline:remaining() <= 0 then return "deadline" end
  return nil
end

-- A ticket gives the pipe up however its holder ends (to-be-closed). The
-- usual end, a holder whose line went whole, frees the pipe here.
local TICKET = { __close = function(ticket)
  local self = ticket.channel
  if self.writer == ticket and not ticket.partial then
    self.writer = nil
    return
  end
  release(self, ticket)
end }

-- Take the pipe: at once when nobody writes and nobody waits (the caller
-- has looked at the close and the cancel hook already, and the write looks
-- at the budget), else in line behind them, one turn of the engine at a
-- time, until the writers before have written. The ticket is to-be-closed:
-- however its holder ends (a raise, a coroutine closed by gather), it gives
-- the pipe up.
-- @return ticket | nil, message, err (gave up in line: closed, cancelled, the budget spent)
local function acquire(self, op)
  -- proc (set by write_line) is a field from the start: set later, it grew the table
  local ticket = setmetatable({ channel = self, deadline = op.deadline, proc = false }, TICKET)
  local queue = self.queue
  if self.writer or #queue > 0 then
    local why
    queue[#queue + 1] = ticket
    -- out of line if this wait ends by a raise or a closed coroutine
    local _ <close> = setmetatable({}, { __close = function()
      if self.writer ~= ticket then leave_line(self, ticket) end
    end })
    repeat
      why = gives_up(self, op)
      if why then
        leave_line(self, ticket)
        return unwritten(self, op, why)
      end
      turn(core.now() + op.deadline:remaining())
      clear_stale(self)
    until not self.writer and queue[1] == ticket
    table.remove(queue, 1)
  end
  self.writer = ticket
  return ticket
end

-- Wait until the child's stdin has room for more of the line, `until_s`
-- (core.now() seconds) has passed, or the child was stopped meanwhile (its
-- descriptor is then closed, and not looked at again).
local function writable(self, proc, fd, until_s)
  if core.fd_ready(fd, "w") then return end
  core.engine_watch(fd, "w")
  local _ <close> = setmetatable({}, { __close = function()
    if self.proc == proc then core.engine_watch(fd, nil) end
  end })
  repeat
    turn(until_s)
  until self.proc ~= proc or core.now() >= until_s or core.fd_ready(fd, "w")
end

-- Write one line whole while holding the pipe, within the budget, waiting
-- on the engine while the pipe is full. A line cut short breaks the framing:
-- the child is stopped, and what it got was no message, so nothing ran.
-- With `first` (a request's first try at this child): a child whose stdin
-- was closed at the very first write, because it had ended, got nothing of
-- the line; false is returned then, with the child left to the caller, which
-- treats it as ready() treats a child that ended between operations.
-- @return true | false (see first) | nil, message, err
local function write_line(self, op, ticket, line, first)
  local identifier = self.config.identifier
  local proc, written, tried, tried_before = self.proc, 0, false, false
  ticket.proc = proc
  while self.writer == ticket and self.proc == proc do
    local ms = op.deadline:left_ms()
    if not ms then break end
    tried = true
    local _, _, in_fd = proc:fds()
    local ok, kind, upto = proc:write(line, in_fd >= 0 and 0 or ms, written)
    if ok then
      ticket.partial = nil
      return true
    end
    if kind ~= "timeout" then
      ticket.partial = nil
      -- a child started by an earlier operation that ended since, found before any byte of the
      -- request went: the caller treats it as ready() would. One this operation started failed
      -- at its start: that failure, with its stderr and exit status, is the answer.
      if first and not tried_before and not op.stdio_started and proc:status() ~= "running" then return false end
      return ended(self, op, "transport", "the server process closed its input")
    end
    tried_before = true
    written = upto
    ticket.partial = written > 0 or nil
    if in_fd >= 0 then writable(self, proc, in_fd, core.now() + ms / 1000) end
  end
  ticket.partial = nil
  if self.closed then return closed(self, nil) end
  if self.proc ~= proc then
    return fail("transport", { server = identifier, detail = "the server process was stopped before the message "
      .. "was written whole (" .. tostring(self.stopped_why) .. "); nothing of it ran" })
  end
  if written > 0 then stop(self, "it stopped reading its input", op) end
  if not tried then
    return fail("deadline", { server = identifier, budget = errors.seconds(op.deadline.total) })
  end
  return fail("timeout", { server = identifier, budget = errors.seconds(op.deadline.total),
    detail = "the server process is not reading its input" })
end

---------------------------------------------------------------------------
-- Reading
---------------------------------------------------------------------------

-- The subscription a message names (`_meta`), or nil.
local function subscription_of(message)
  local params = message.params
  local meta = type(params) == "table" and params._meta
  if type(meta) ~= "table" then return nil end
  return meta[SUBSCRIPTION_ID]
end

-- An id as a trace line names it: an integer as it is, a string quoted
-- under the text rule, anything else by its kind.
local function id_named(id)
  if math.type(id) == "integer" then return tostring(id) end
  if type(id) == "string" then return '"' .. core.clip(id, 40) .. '"' end
  if id == nil or id == json.null then return "null" end
  return type(id)
end

-- An answer that no request waits for: passed over, counted on the channel,
-- and named on the call that read it (its trace line names it).
local function drop(self, call, id)
  self.dropped = self.dropped + 1
  local named = call.dropped
  if not named then
    named = { count = 0 }
    call.dropped = named
  end
  named.count = named.count + 1
  if #named < DROPPED_NAMED then named[#named + 1] = id_named(id) end
end

-- A line that is not the answer `call` waits for: a response to another
-- waiting call (kept for it, unless it has its answer already), the answer
-- that ends a standing request, a late answer to a request given up on
-- (passed over), an answer no request waits for (passed over, counted), or
-- a message for the session: one naming a standing request goes to that
-- request's on_message (one naming a subscription not open here is passed
-- over), any other (a server request, a notification) to the call's. A line
-- that is not JSON at all breaks the framing: false.
local function other(self, call, line)
  local message = json.decode(line)
  if message == nil then return false end
  if type(message) ~= "table" or json.is_array(message) then return true end
  if type(message.method) ~= "string" then
    local id = message.id
    local waiting, stream = self.waiting[id], self.streams[id]
    if waiting and not waiting.line then
      waiting.line = line
    elseif stream then
      self.streams[id] = nil
      stream.ended = "the server ended it"
    elseif id ~= nil and self.abandoned[id] then
      self.abandoned[id] = nil  -- its one late answer: a second one is counted
    else
      drop(self, call, id)
    end
    return true
  end
  local subscription = subscription_of(message)
  if subscription ~= nil then
    local stream = (math.type(subscription) == "integer" or type(subscription) == "string")
      and self.streams[subscription]
    if stream and stream.on_message then stream.on_message(message) end
    return true
  end
  if call.on_message then call.on_message(message) end
  return true
end

-- Is a standing request settled (its acknowledgment read)? `standing`:
-- the call's own test (call.standing), read once by the caller, or nil.
local function settled(standing)
  return standing ~= nil and standing() == true
end

-- What breaks the framing, named: a line the reader refused, or one that is
-- not JSON (clipped).
local function fault(why, line)
  return why or ("a line that is not JSON: " .. core.clip(line, 120))
end

-- Read the lines there are (waiting up to ms for the first) until `call`
-- has its answer line (or, `standing`, is settled). Returns true (answered or
-- not yet), or nil, kind, detail when the child's output ended or broke
-- (kind "malformed": the framing broke, detail names how).
local function pump(self, call, ms, standing, decoding)
  while not call.line and (standing == nil or not settled(standing)) do
    local proc = self.proc  -- read again each time: a handler may have waited, and the child ended meanwhile
    if not proc then return nil, "closed", call.lost or "the server process had ended" end
    local line, kind, detail = proc:read_line(ms)
    if not line then
      if kind == "timeout" then return true end
      return nil, kind, detail
    end
    ms = 0
    local class, a, b = core.rpc_classify(line, call.id, decoding, MAX_CONTAINERS)
    if class == "result" or class == "error" then
      call.line, call.answer_kind, call.answer_a, call.answer_b = line, class, a, b
    else
      local fine, why = other(self, call, line)
      if not fine then return nil, "malformed", fault(why, line) end
    end
  end
  return true
end

-- The failure of a written call whose child's output ended or broke. A
-- child that ends at server/discover is taken for a 2025-era server that
-- cannot bear the probe: it ran nothing, so the operation may start the
-- next. A broken framing after the request was written is a loss like a
-- child that died (it may have run): "interrupted", naming the fault; only
-- the opening, which acts on nothing, is "malformed".
local function lost(self, op, call, kind, detail)
  local identifier = self.config.identifier
  if self.closed then return closed(self, call) end
  if kind == "malformed" then
    if OPENING[call.method] then return ended(self, op, "malformed", "the server process wrote " .. detail) end
    return ended(self, op, "interrupted", "the server process wrote " .. detail .. " before answering "
      .. call.method)
  end
  if call.method == "server/discover" then
    stop(self, nil, op)
    op.stdio_started = nil
    return fail("rpc_error", { server = identifier, rpc_code = METHOD_NOT_FOUND,
      detail = "the server process ended at server/discover (taken for a 2025-era server)" })
  end
  local kind_of = OPENING[call.method] and "transport" or "interrupted"
  if not self.proc then
    return fail(kind_of, { server = identifier, detail = "the server process ended before answering "
      .. call.method .. " (" .. tostring(detail) .. ")" })
  end
  return ended(self, op, kind_of, "the server process closed its output before answering " .. call.method)
end

-- Wait for the call's answer line within the budget (and, for the probe,
-- its own shorter limit), polling the cancel hook. Each wait is one turn of
-- the engine, which reads the child's stdout as soon as it is written (and
-- its stderr), while HTTP transfers and the other tasks of gather move
-- meanwhile; the line is then taken from what the turn read. A standing
-- request waits until it is settled, or at most `call.settle_seconds`, and
-- is then left open.
-- @return line | true (standing, left open) | nil, message, err
local function await(self, op, call, standing, decoding)
  local identifier = self.config.identifier
  local probe_until = call.method == "server/discover" and core.now() + PROBE_SECONDS or nil
  local settle_until = standing and core.now() + (call.settle_seconds or 1) or nil
  local on_stderr = self.config.on_stderr
  while true do
    local ok, kind, detail = pump(self, call, 0, standing, decoding)
    if on_stderr then stderr_lines(self, self.proc) end
    if not ok then return lost(self, op, call, kind, detail) end
    local line = call.line
    if line then return line end
    if settle_until and (settled(standing) or core.now() >= settle_until) then return true end
    if self.closed then return closed(self, call) end
    if op.cancel and op.cancel() then
      return fail("cancelled", { server = identifier, in_flight = call.method == "tools/call" })
    end
    local ms = op.deadline:left_ms()
    if not ms then
      return fail("timeout", { server = identifier, budget = errors.seconds(op.deadline.total),
        detail = "no answer from the server process" })
    end
    local until_s = core.now() + ms / 1000
    if probe_until then
      if core.now() >= probe_until then
        return fail("rpc_error", { server = identifier, rpc_code = METHOD_NOT_FOUND, detail =
          "no answer to server/discover within " .. PROBE_SECONDS .. " seconds (taken for a 2025-era server)" })
      end
      if probe_until < until_s then until_s = probe_until end
    end
    if settle_until and settle_until < until_s then until_s = settle_until end
    local proc = self.proc
    if proc and proc:fds() >= 0 then turn(until_s) end  -- a fake process has no descriptors: it answers when read
  end
end

---------------------------------------------------------------------------
-- The contract
---------------------------------------------------------------------------

--- Write one request and read until its answer; a standing request
--- (`call.standing`, a function that says when it is settled) until it is
--- settled, and then it stays open (see the rules above). The request waits
--- its turn at the pipe first; a child is started (or found ended) only once
--- it has it.
-- @return reply { result, duration_ms, bytes, containers } (a standing request left open:
--   { standing = true, duration_ms, bytes = 0 }) | nil, message, err
function Channel:request(op, call)
  local identifier = self.config.identifier
  if self.closed then return closed(self, nil) end
  if op.cancel and op.cancel() then return fail("cancelled", { server = identifier, in_flight = false }) end
  local clock = self.config.clock or core.now
  local started
  do
    local ticket <close>, message, err = acquire(self, op)
    if not ticket then return nil, message, err end
    local ok
    ok, message, err = ready(self, op, call)
    if not ok then return nil, message, err end
    started = clock()
    local line = call.body .. "\n"
    ok, message, err = write_line(self, op, ticket, line, true)
    if ok == false then  -- it had ended before any byte of the request went: as ready() finds such a child
      stop(self, "it ended between operations")
      ok, message, err = ready(self, op, call)
      if not ok then return nil, message, err end
      started = clock()
      ok, message, err = write_line(self, op, ticket, line)
    end
    if not ok then return nil, message, err end
  end
  call.written = true
  -- the fields the reader looks at on every turn, read (or set) once: a call's
  -- table answers a missing field through a function (its lazy on_message)
  call.line = false
  local standing, decoding = call.standing, call.decoding
  self.waiting[call.id] = call
  if standing then self.streams[call.id] = call end
  local line, message, err = await(self, op, call, standing, decoding)
  self.waiting[call.id] = nil
  if line ~= true then self.streams[call.id] = nil end
  if not line then
    self.abandoned[call.id] = true  -- given up on: an answer that comes late is passed over
    return nil, message, err
  end
  if line == true then
    local ms = floor((clock() - started) * 1000 + 0.5)
    return { standing = true, bytes = 0, duration_ms = ms > 0 and ms or 0 }
  end
  if standing then call.ended = "the server answered it" end
  -- read once where it arrived; a line kept for this call by another's reader is read now
  local kind, a, b = call.answer_kind, call.answer_a, call.answer_b
  if not kind then kind, a, b = core.rpc_classify(line, call.id, decoding, MAX_CONTAINERS) end
  if kind == "error" then return fail("rpc_error", { server = identifier, rpc_code = a, detail = b }) end
  if kind ~= "result" then
    return fail("malformed", { server = identifier, detail = kind == "other" and ("the answer is " .. a) or a })
  end
  if call.method == "server/discover" then self.opened = self.proc end
  local ms = floor((clock() - started) * 1000 + 0.5)
  return { result = a, containers = b, bytes = #line, duration_ms = ms > 0 and ms or 0 }
end

--- Write one message that has no answer (a notification, or the answer to
--- a server request) to the running child, in its turn at the pipe; it
--- starts none (a message of the era's state means nothing to a new child),
--- and one whose child ended while it waited is not written.
--- notifications/initialized completes the 2025 opening on that child.
function Channel:notify(op, _, message)
  if self.closed then return closed(self, nil) end
  local proc = self.proc
  if not proc then
    return fail("transport", { server = self.config.identifier, detail = "the server process had ended" })
  end
  local ticket <close>, why, err = acquire(self, op)
  if not ticket then return nil, why, err end
  if self.proc ~= proc then
    return fail("transport", { server = self.config.identifier, detail = "the server process had ended" })
  end
  local ok
  ok, why, err = write_line(self, op, ticket, message.body .. "\n")
  if not ok then return nil, why, err end
  if message.method == "notifications/initialized" then self.opened = self.proc end
  return true
end

--- Tell the server a written request is abandoned: notifications/cancelled
--- in both eras (stdio has no stream to close), in line behind any message
--- being written, within 0.25 s for the wait and the write together; never
--- raises. A notice that finds no turn in time is not written; one cut off
--- mid-line stops the child.
function Channel:cancel(call, notice)
  self.waiting[call.id] = nil
  self.streams[call.id] = nil
  self.abandoned[call.id] = true
  local proc = self.proc
  if not proc or self.closed then return end
  local op = { deadline = Deadline.open(NOTICE_SECONDS, self.config.clock or core.now) }
  local ticket <close> = acquire(self, op)
  if not ticket or self.proc ~= proc then return end  -- no turn in time, or the child it was for ended
  write_line(self, op, ticket, notice.body .. "\n")
end

--- Take what the child has written already, waiting for nothing: the lines
--- in its buffer and what sits in the pipe (one turn of the engine that does
--- not wait). Each goes where a request's read would send it: an answer to
--- the request that waits for it, a message naming a standing request to
--- it, any other message to `call.on_message` (the session's, with no
--- request of its own). A line that breaks the framing stops the child.
function Channel:drain(_, call)
  local proc = self.proc
  if not proc or self.closed then return true end
  if proc:fds() >= 0 then core.engine_step(0) end
  stderr_lines(self, proc)
  while self.proc == proc do
    local line, kind, detail = proc:read_line(0)
    if not line then
      if kind == "malformed" then stop(self, "it wrote " .. detail) end
      return true
    end
    local fine, why = other(self, call, line)
    if not fine then
      stop(self, "it wrote " .. fault(why, line))
      return true
    end
  end
  return true
end

--- Nothing to end over stdio but the child itself (close does that).
function Channel.end_session()
  return true
end

--- Stop the child: close stdin, wait, SIGTERM the group, wait, SIGKILL, reap.
--- Idempotent. Every operation still waiting on the channel then fails
--- "closed", and nothing is written or started again.
function Channel:close()
  self.closed = true
  stop(self, nil)
  return true
end

return stdio
