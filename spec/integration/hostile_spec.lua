-- The client against a server that misbehaves at the socket and HTTP level
-- (spec/support/hostile_server.mjs, started and stopped by this file on
-- 127.0.0.1). Each case: a clear outcome of the right kind, within the
-- operation's budget, and the same connection usable afterwards — the server
-- misbehaves only for the tool "hostile", so "echo" on the same path shows the
-- connection still works.
local mcp = require "mcpclient"
local core = require "mcpclient.core"

local json = core.json
local SECRET = "hostile-spec-secret-7f3a9c"

local server

local hostile = require "support.hostile"
local read_all = require("support.shell").read_all
local wait_for = require("support.wait").for_value
local start_server, stop_server = hostile.start, hostile.stop

local function url(path) return hostile.url(server, path) end
-- What the server saw on one path (see hostile_server.mjs, GET /_state).
local function state(path) return hostile.state(server, path) end
local function requests_of(path, method) return hostile.requests_of(server, path, method) end

-- How many tools/call requests for one tool reached the server on a path.
local function calls_of(path, name)
  local n = 0
  for _, r in ipairs(requests_of(path, "tools/call")) do
    if r.name == name then n = n + 1 end
  end
  return n
end

local function connect(path, extra)
  local options = {
    url = url(path), identifier = "hostile", health = mcp.health.memory(),
    auth = { credential = "vault:hostile" },
    resolver = function(reference) return reference == "vault:hostile" and SECRET or nil end,
  }
  for k, v in pairs(extra or {}) do options[k] = v end
  return mcp.connect(options)
end

-- The peak resident set of this process so far, in KiB.
local function peak_rss_kib()
  local status = read_all("/proc/self/status")
  return tonumber(status:match("VmHWM:%s*(%d+)")) or 0
end

-- A failure every case must show: kind, the server named, one clipped line.
local function assert_clear(kind, result, message, err)
  assert.is_nil(result)
  assert.is_table(err, "expected the failure triple, got " .. tostring(message))
  assert.equal(kind, err.kind, message)
  assert.equal("hostile", err.server)
  assert.truthy(message:find('"hostile"', 1, true), message)
  assert.is_nil(message:find("%c"), "control characters in: " .. message)
  assert.truthy(#message < 1000, "message of " .. #message .. " bytes")
  assert.is_nil(message:find(SECRET, 1, true), "the credential leaked into the message")
end

--[[
One case: warm the connection with a good call, time the hostile call (with
`budget` seconds), then make sure a good call on the same connection works.
Returns { out, message, err } of the hostile call, its wall time (elapsed)
and the connection (conn), which usable_afterwards closes.
]]
local function hostile_call(path, budget, extra)
  local conn = connect(path, extra)
  local warm = assert(conn:call_tool("echo", { text = "warm" }))
  assert.equal("echo: warm", warm.text)
  local t0 = core.now()
  local out, message, err = conn:call_tool("hostile", {}, { budget = budget })
  local elapsed = core.now() - t0
  -- Whatever the server does, the operation ends within its budget (plus scheduling slack).
  assert.truthy(elapsed < budget + 0.5, string.format("the call took %.2f s on a %g s budget", elapsed, budget))
  return { out = out, message = message, err = err, elapsed = elapsed, conn = conn }
end

-- A good call on the same connection succeeds; then the connection is closed
-- (unless keep_open).
local function usable_afterwards(conn, text, keep_open)
  text = text or "after"
  local after, message = conn:call_tool("echo", { text = text })
  assert.is_table(after, "the connection is not usable afterwards: " .. tostring(message))
  assert.equal("echo: " .. text, after.text)
  if not keep_open then conn:close() end
end

describe("a hostile server #integration", function()
  setup(function() server = start_server() end)
  teardown(function() stop_server(server) end)

  describe("at the socket", function()
    -- Every loss after the request left is "interrupted" (the server may have
    -- acted on it), never "could not be reached", which would invite a resend.
    it("resets the connection in the middle of a declared body: interrupted, at once", function()
      local r = hostile_call("/reset-mid-body", 5)
      assert_clear("interrupted", r.out, r.message, r.err)
      assert.truthy(r.message:find("may have acted on it", 1, true), r.message)
      assert.truthy(r.elapsed < 1, r.elapsed)
      usable_afterwards(r.conn)
    end)

    -- The stream had an event id when it broke: like a stream that ended, it is
    -- resumed with GET + Last-Event-ID (MCP 2025-11-25, SEP-1699), and the
    -- server answers there.
    it("resets an event stream after an event id: resumed, at once", function()
      local r = hostile_call("/reset-mid-stream", 5)
      -- a broken stream after an event id is resumed like one that ended (SEP-1699)
      assert.equal("resumed", assert(r.out, r.message).text)
      assert.equal(1, #requests_of("/reset-mid-stream", "GET"))
      assert.truthy(r.elapsed < 1, r.elapsed)
      usable_afterwards(r.conn)
    end)

    it("answers one byte per second: the budget, not a per-read timeout, ends it", function()
      local r = hostile_call("/one-byte-per-second", 3)
      assert_clear("timeout", r.out, r.message, r.err)
      assert.truthy(r.elapsed >= 2.9 and r.elapsed < 4, string.format("took %.2f s", r.elapsed))
      assert.truthy(r.message:find("3-second operation budget", 1, true), r.message)
      usable_afterwards(r.conn)
    end)

    for _, case in ipairs {
      { "/sse-trickle", "keeps an event stream alive with one comment byte per second: bounded by the budget" },
      { "/never-answers", "never answers: timeout within the budget" },
      { "/headers-without-end", "sends headers that never end: timeout within the budget" },
    } do
      it(case[2], function()
        local r = hostile_call(case[1], 2)
        assert_clear("timeout", r.out, r.message, r.err)
        assert.truthy(r.elapsed >= 1.9 and r.elapsed < 3, string.format("took %.2f s", r.elapsed))
        usable_afterwards(r.conn)
      end)
    end

    it("floods header lines: refused at the header cap, at once (interrupted: the request had left)", function()
      local r = hostile_call("/header-flood", 5)
      assert_clear("interrupted", r.out, r.message, r.err)
      assert.truthy(r.elapsed < 2, r.elapsed)
      usable_afterwards(r.conn)
    end)

    it("answers with something that is not HTTP: interrupted", function()
      local r = hostile_call("/garbage-status", 5)
      assert_clear("interrupted", r.out, r.message, r.err)
      assert.truthy(r.elapsed < 2, r.elapsed)
      usable_afterwards(r.conn)
    end)

    it("breaks the chunked encoding: interrupted", function()
      local r = hostile_call("/bad-chunk", 5)
      assert_clear("interrupted", r.out, r.message, r.err)
      assert.truthy(r.message:find("chunk", 1, true), r.message)
      usable_afterwards(r.conn)
    end)

    -- With the forgeries arriving later, Debian's libcurl 7.88 reuses the idle
    -- connection although bytes are waiting on it, and reads them as the answer
    -- to the next request (newer libcurl refuses such a connection). This case
    -- fails until the leg (csrc/net/http_pool.c) stops reusing a connection with input
    -- pending (the mend: poll the last socket before a send; FRESH_CONNECT).
    for _, late in ipairs { false, true } do
      local how = late and "later, into the idle connection" or "with the answer"
      it("sends forged responses after a short Content-Length (" .. how .. "): never read as answers", function()
        local path = "/smuggle/" .. tostring(late)
        local r = hostile_call(path .. (late and "?late=1" or ""), 5)
        assert.is_table(r.out, r.message)
        assert.equal("first", r.out.text)
        if late then
          -- the forgeries are in the idle connection before the next request goes out (written
          -- 100 ms after the answer: arriving once that request is out, no client could tell
          -- them from its answer)
          wait_for("the server to write its forgeries", 30, function() return state(path).forged_sent end)
        end
        -- The forgeries carry the next ids and the text SMUGGLED.
        for i = 1, 3 do usable_afterwards(r.conn, "after " .. i, i < 3) end
      end)
    end
  end)

  describe("bodies", function()
    it("sends 3 MiB chunked without a length: the 2 MiB cap ends it as malformed", function()
      local r = hostile_call("/chunked-3mib", 5)
      assert_clear("malformed", r.out, r.message, r.err)
      assert.truthy(r.elapsed < 2, r.elapsed)
      usable_afterwards(r.conn)
    end)

    it("streams 3 MiB of notifications without the answer: malformed at the cap", function()
      local r = hostile_call("/sse-3mib", 5)
      assert_clear("malformed", r.out, r.message, r.err)
      assert.truthy(r.message:find("exceeded 2097152 bytes", 1, true), r.message)
      usable_afterwards(r.conn)
    end)

    it("never asks for compression, and reads an unrequested gzip answer as raw bytes", function()
      local r = hostile_call("/gzip-answer", 5)
      -- Decompressed, the answer would be a valid "decompressed" result.
      assert_clear("malformed", r.out, r.message, r.err)
      for _, req in ipairs(requests_of("/gzip-answer")) do
        assert.equal(json.null, req.accept_encoding, "the client offered an encoding")
      end
      usable_afterwards(r.conn)
    end)

    it("reads an unrequested deflate answer as raw bytes", function()
      local r = hostile_call("/deflate-answer", 5)
      assert_clear("malformed", r.out, r.message, r.err)
      usable_afterwards(r.conn)
    end)

    for _, case in ipairs {
      { path = "/bomb/gzip", query = "?encoding=gzip", kind = "malformed" },
      { path = "/bomb/deflate", query = "?encoding=deflate", kind = "malformed" },
      { path = "/bomb/sse", query = "?encoding=gzip&type=text/event-stream", kind = "malformed" },
    } do
      it("is not decompress-bombed (" .. case.path .. ": 0.5 MiB that expand to 512 MiB)", function()
        local before = peak_rss_kib()
        -- The server compresses its bomb once, on first use: a generous budget.
        local r = hostile_call(case.path .. case.query, 30)
        assert_clear(case.kind, r.out, r.message, r.err)
        local grown = peak_rss_kib() - before
        assert.truthy(grown < 64 * 1024, string.format("peak RSS grew by %d KiB", grown))
        usable_afterwards(r.conn)
      end)
    end
  end)

  describe("JSON-RPC", function()
    it("answers another request's id (plain JSON): malformed", function()
      local r = hostile_call("/wrong-id", 5)
      assert_clear("malformed", r.out, r.message, r.err)
      assert.truthy(r.message:find("another request", 1, true), r.message)
      usable_afterwards(r.conn)
    end)

    it("streams answers to other ids (number, string, null) and ends: malformed, no response", function()
      local r = hostile_call("/wrong-id-sse", 5)
      assert_clear("malformed", r.out, r.message, r.err)
      assert.truthy(r.message:find("carried no response", 1, true), r.message)
      usable_afterwards(r.conn)
    end)

    it("interleaves notifications, a server request and junk before the answer: the answer wins", function()
      local r = hostile_call("/notifications-first", 5)
      assert.is_table(r.out, r.message)
      assert.equal("the answer", r.out.text)
      assert.is_false(r.out.is_error)
      assert.truthy(r.elapsed < 2, r.elapsed)
      usable_afterwards(r.conn)
    end)

    it("repeats a key at the top of the answer: malformed", function()
      local r = hostile_call("/duplicate-keys/top", 5)
      assert_clear("malformed", r.out, r.message, r.err)
      assert.truthy(r.message:find("duplicate", 1, true), r.message)
      usable_afterwards(r.conn)
    end)

    it("repeats a key inside a content block: malformed", function()
      local r = hostile_call("/duplicate-keys/nested?where=nested", 5)
      assert_clear("malformed", r.out, r.message, r.err)
      assert.truthy(r.message:find("duplicate", 1, true), r.message)
      usable_afterwards(r.conn)
    end)

    it("sends invalid UTF-8: malformed", function()
      local r = hostile_call("/invalid-utf8", 5)
      assert_clear("malformed", r.out, r.message, r.err)
      usable_afterwards(r.conn)
    end)

    it("fills serverInfo and an error message with terminal escapes: nothing raw reaches the caller", function()
      local conn <close> = connect("/terminal-escapes")
      local report = assert(conn:ping())
      for _, field in ipairs { "server_name", "server_version", "protocol_version" } do
        assert.is_nil(report[field]:find("%c"), field .. " carries control characters: " .. report[field])
      end
      assert.truthy(report.server_name:find("Evil", 1, true))
      local r = hostile_call("/terminal-escapes", 5)
      assert_clear("rpc_error", r.out, r.message, r.err)
      assert.truthy(r.message:find("boom", 1, true), r.message)
      assert.truthy(#r.message < 500, #r.message)
      usable_afterwards(r.conn)
    end)
  end)

  describe("redirects", function()
    for _, status in ipairs { 302, 307, 308 } do
      it("answers " .. status .. " to another port: never followed, no credential goes there", function()
        local path = "/redirect/" .. status
        local before = #state(path).other.contacts
        local r = hostile_call(path .. "?status=" .. status, 5)
        assert_clear("http_status", r.out, r.message, r.err)
        assert.truthy(r.message:find(tostring(status), 1, true), r.message)
        local seen = state(path)
        assert.equal(before, #seen.other.contacts, "the redirect target was contacted")
        for _, contact in ipairs(seen.other.contacts) do
          assert.is_nil(tostring(contact.authorization):find(SECRET, 1, true), "the credential reached the other host")
        end
        -- The credential did go to the configured server, so there was one to leak.
        assert.equal("Bearer " .. SECRET, seen.requests[#seen.requests].authorization)
        usable_afterwards(r.conn)
        assert.equal(before, #state(path).other.contacts)
      end)
    end
  end)

  describe("streams and sessions", function()
    it("closes a priming-only stream and answers the resumption GET with 405: interrupted", function()
      local r = hostile_call("/priming-only/405?resume=405", 5)
      assert_clear("interrupted", r.out, r.message, r.err)
      assert.truthy(r.message:find("405", 1, true), r.message)
      local gets = requests_of("/priming-only/405", "GET")
      assert.equal(1, #gets)
      assert.equal("prime-1", gets[1].last_event_id)
      assert.truthy(r.elapsed >= 0.09 and r.elapsed < 2, r.elapsed) -- waited the server's retry: 100 ms
      usable_afterwards(r.conn)
    end)

    it("closes a priming-only stream and answers the resumption with the answer: success", function()
      local r = hostile_call("/priming-only/stream?resume=stream", 5)
      assert.is_table(r.out, r.message)
      assert.equal("resumed", r.out.text)
      local gets = requests_of("/priming-only/stream", "GET")
      assert.equal(1, #gets)
      assert.equal("prime-1", gets[1].last_event_id)
      assert.is_string(gets[1].session)
      usable_afterwards(r.conn)
    end)

    it("answers every resumption with another priming-only stream: at most two, then interrupted", function()
      local r = hostile_call("/priming-only/again?resume=priming", 5)
      assert_clear("interrupted", r.out, r.message, r.err)
      assert.truthy(r.message:find("without the response", 1, true), r.message)
      assert.equal(2, #requests_of("/priming-only/again", "GET"))
      usable_afterwards(r.conn)
    end)

    it("spends the budget, not more, waiting to resume", function()
      -- retry is 100 ms; a budget of 0.05 s cannot wait for it.
      local conn <close> = connect("/priming-only/budget?resume=stream")
      assert(conn:call_tool("echo", { text = "warm" }))
      local t0 = core.now()
      local out, message, err = conn:call_tool("hostile", {}, { budget = 0.05 })
      -- "interrupted" (the wait would outlast the budget, and the server has the
      -- request); "timeout" only if the POST itself took 50 ms
      assert_clear(err and err.kind == "timeout" and "timeout" or "interrupted", out, message, err)
      assert.truthy(core.now() - t0 < 0.5)
      assert.equal(0, #requests_of("/priming-only/budget", "GET"))
    end)

    for _, variant in ipairs { { "/session-vanish", 404 }, { "/session-vanish-400", 400 } } do
      it("forgets the session (" .. variant[2] .. " next time): the client re-initializes once and retries", function()
        local path = variant[1]
        local r = hostile_call(path, 5)
        assert.is_table(r.out, r.message)
        assert.equal("hostile answered", r.out.text)
        usable_afterwards(r.conn, "after the loss")
        assert.equal(2, state(path).initializes)
        local calls = requests_of(path, "tools/call")
        -- warm, hostile, the refused echo, then the same echo again on a new session.
        assert.equal(4, #calls)
        assert.is_string(calls[2].session)
        assert.equal(calls[2].session, calls[3].session)
        assert.is_string(calls[4].session)
        assert.are_not.equal(calls[3].session, calls[4].session)
        assert.equal("after the loss", calls[3].arguments.text)
        assert.equal("after the loss", calls[4].arguments.text)
      end)
    end

    -- Once the server has the request (a 2xx, any byte of an event stream, or
    -- just the request on the wire), a loss ends the operation: nothing is sent again.
    it("closes a priming-only tools/call stream and answers the resumption GET with 404 session not found: "
      .. "interrupted, the call reached the server once", function()
      local path = "/priming-only/404"
      local r = hostile_call(path .. "?resume=404&retry=50", 5)
      assert_clear("interrupted", r.out, r.message, r.err)
      assert.truthy(r.message:find("may have acted on it", 1, true), r.message)
      assert.equal(1, calls_of(path, "hostile"))
      assert.equal(1, #requests_of(path, "GET"))
      assert.equal(1, state(path).initializes)
      usable_afterwards(r.conn) -- the next call's POST is refused (404) and may be sent again
      assert.equal(1, calls_of(path, "hostile"))
    end)

    it("reads the request and closes the connection without a byte of answer: interrupted, sent once", function()
      local path = "/drop-after-request/a"
      local r = hostile_call(path, 5)
      assert_clear("interrupted", r.out, r.message, r.err)
      assert.truthy(r.message:find("may have acted on it", 1, true), r.message)
      assert.is_nil(r.message:find("could not be reached", 1, true), r.message)
      assert.equal(1, calls_of(path, "hostile"))
      usable_afterwards(r.conn)
    end)

    it("forgets every session at once: one re-initialization per operation, then http_status 404", function()
      local conn <close> = connect("/session-amnesia")
      local t0 = core.now()
      local out, message, err = conn:call_tool("echo", { text = "x" }, { budget = 5 })
      assert_clear("http_status", out, message, err)
      assert.truthy(message:find("404", 1, true), message)
      assert.truthy(core.now() - t0 < 2)
      local seen = state("/session-amnesia")
      assert.equal(2, seen.initializes)
      assert.equal(2, #requests_of("/session-amnesia", "tools/call"))
    end)
  end)

  describe("server requests, cancellation, sessions", function()
    it("asks for a ping and a sampling on the response stream: both answered at once, the call goes on", function()
      local path = "/server-requests/a"
      local r = hostile_call(path, 5)
      assert.equal("after the answers", assert(r.out, r.message).text)
      assert.truthy(r.elapsed < 1, r.elapsed)
      local answers = {}
      for _, q in ipairs(requests_of(path, "POST")) do
        if q.method == json.null and q.id ~= json.null then answers[q.id] = q end
      end
      assert.same({}, answers["srv-ping"].result)
      assert.equal(json.null, answers["srv-ping"].error)
      assert.equal(-32601, answers[7].error.code)
      usable_afterwards(r.conn)
    end)

    it("stalls the notifications/cancelled POST: the caller returns within the cancel latency", function()
      local path = "/stall-cancel/a"
      local conn <close> = connect(path)
      assert(conn:call_tool("echo", { text = "warm" }))
      local t0, fired_at = core.now(), nil
      local out, message, err = conn:call_tool("hostile", {}, { budget = 5, cancel = function()
        if core.now() - t0 < 0.2 then return false end
        fired_at = fired_at or core.now()
        return true
      end })
      local latency = core.now() - fired_at
      assert_clear("cancelled", out, message, err)
      assert.is_true(err.in_flight)
      assert.truthy(latency < 0.1, string.format("returned %.3f s after the flag", latency))
      -- the notice reached the server all the same (a generous wait: it ends when the notice is seen)
      local deadline = core.now() + 30
      while #requests_of(path, "notifications/cancelled") == 0 and core.now() < deadline do core.sleep(0.02) end
      assert.equal(1, #requests_of(path, "notifications/cancelled"))
      usable_afterwards(conn, "after the cancel", true)
    end)

    it("sends progress only on the standalone GET stream: it reaches on_progress, in order, by its token", function()
      local path = "/get-progress/a"
      local logs = {}
      local conn <close> = connect(path, { on_log = function(level, logger, data)
        logs[#logs + 1] = { level = level, logger = logger, data = data }
      end })
      assert(conn:call_tool("echo", { text = "warm" }))
      local seen = {}
      local out, message = conn:call_tool("hostile", {}, { budget = 5, on_progress = function(progress, total, text)
        seen[#seen + 1] = { progress, total, text }
      end })
      assert.equal("done", assert(out, message).text)
      assert.equal(5, state(path).progress_sent)
      -- the five for this call's token, in order, their messages under the text rule; none for the other token
      local expected = {}
      for i = 1, 5 do expected[i] = { i, 5, "step " .. i .. " [2J" } end
      assert.same(expected, seen)
      -- the log notice on the same stream reached on_log, inert
      assert.same({ { level = "warning", logger = "hostile", data = { note = "from the GET stream" } } }, logs)
      -- the GET stream carried the session id and ended with the call
      local gets = requests_of(path, "GET")
      assert.is_true(#gets >= 1)
      assert.is_string(gets[#gets].session)
      assert.equal(requests_of(path, "tools/call")[2].session, gets[#gets].session)
    end)

    it("holds no GET stream for a call without on_progress (and no other listener): nothing to route", function()
      local path = "/get-progress/none"
      local conn <close> = connect(path)
      assert.equal("done", assert(conn:call_tool("hostile", {}, { budget = 5 })).text)
      assert.equal(0, #requests_of(path, "GET"))
      assert.equal(0, state(path).progress_sent)
    end)

    it("routes GET-stream progress to each of several calls in flight at once, by token", function()
      local path = "/get-progress/gather"
      local conn <close> = connect(path)
      assert(conn:call_tool("echo", { text = "warm" }))
      local seen = { {}, {}, {} }
      local fns = {}
      for i = 1, 3 do
        fns[i] = function()
          return conn:call_tool("hostile", {}, { budget = 8, on_progress = function(progress)
            seen[i][#seen[i] + 1] = progress
          end })
        end
      end
      local results = mcp.gather(fns)
      local reached = 0
      for i = 1, 3 do
        assert.equal("done", assert(results[i][1], results[i][2]).text)
        -- each call hears only its own token's notices, in order
        if #seen[i] > 0 then
          reached = reached + 1
          assert.same({ 1, 2, 3, 4, 5 }, seen[i])
        end
      end
      -- one GET stream at a time per session serves every call in flight (a listener that waits
      -- takes over when the holder's call ends): fewer streams than calls that heard their notices
      local gets = #requests_of(path, "GET")
      assert.is_true(reached >= 2, reached .. " of 3 calls heard their progress")
      assert.is_true(gets < reached, gets .. " GET streams for " .. reached .. " calls")
    end)

    it("floods progress on the GET stream: read up to the cap, in order, never reopened, the call answered", function()
      local path = "/get-progress-flood/a"
      local conn <close> = connect(path)
      assert(conn:call_tool("echo", { text = "warm" }))
      collectgarbage()
      local rss_before = peak_rss_kib()
      local count, last, ordered = 0, 0, true
      local t0 = core.now()
      local out, message = conn:call_tool("hostile", {}, { budget = 10, on_progress = function(progress)
        count = count + 1
        if progress ~= last + 1 then ordered = false end
        last = progress
      end })
      local elapsed = core.now() - t0
      assert.equal("done after the flood", assert(out, message).text)
      assert.is_true(ordered, "progress arrived out of order")
      local sent = state(path).progress_sent
      -- the stream is read under the 2 MiB read cap: far fewer notices than the 4 MiB the server wrote
      assert.is_true(count > 1000, "only " .. count .. " notices arrived")
      assert.is_true(count * 150 <= 2 * 1024 * 1024 + 150, count .. " notices is more than 2 MiB of them")
      assert.is_true(count < sent, count .. " of " .. sent)
      -- one GET for the call: a capped stream is not opened again
      assert.equal(1, #requests_of(path, "GET"))
      assert.truthy(elapsed < 10, elapsed)
      local grown = peak_rss_kib() - rss_before
      assert.truthy(grown < 64 * 1024, "peak RSS grew by " .. grown .. " KiB")
      usable_afterwards(conn, "after the flood", true)
    end)

    it("ends the session with DELETE when the garbage collector takes a connection", function()
      local path = "/server-requests/gc"
      do
        local conn = connect(path)
        assert(conn:call_tool("echo", { text = "x" }))
      end
      collectgarbage()
      collectgarbage()
      assert.equal(1, #requests_of(path, "DELETE"))
    end)

    for _, kind in ipairs { "cr", "ctl", "del" } do
      it("gives a session id holding a " .. kind .. " byte: malformed, and no operation raises", function()
        local conn <close> = connect("/bad-session/" .. kind)
        for _, op in ipairs {
          function() return conn:ping() end,
          function() return conn:call_tool("echo", { text = "x" }) end,
          function() return conn:list_tools() end,
        } do
          local ok, out, message, err = pcall(op)
          assert.is_true(ok, tostring(out))
          assert_clear("malformed", out, message, err)
          assert.truthy(message:find("session id", 1, true), message)
        end
      end)
    end

    it("lists 50 pages of 2 MiB of empty tools: fails at once, in a small multiple of the read cap", function()
      local script = [[
        package.path = "./lua/?.lua;./lua/?/init.lua;" .. package.path
        package.cpath = "./build/?.so;" .. package.cpath
        local mcp = require "mcpclient"
        local conn = mcp.connect { url = arg[1], identifier = "hostile", health = mcp.health.discard }
        local tools, _, err = conn:list_tools { budget = 60 }
        local f = io.open("/proc/self/status")
        local status = f:read("a")
        f:close()
        io.write(tostring(tools and #tools), " ", tostring(err and err.kind), " ", status:match("VmHWM:%s*(%d+)"))
      ]]
      local file = os.tmpname()
      local f = assert(io.open(file, "w"))
      f:write(script)
      f:close()
      -- a plain interpreter (no sanitizer preloaded), so its peak is the library's own
      local pipe = assert(io.popen(string.format("env -u LD_PRELOAD lua5.4 %s %s 2>&1", file, url("/huge-list/a"))))
      local out = pipe:read("a")
      pipe:close()
      os.remove(file)
      local count, kind, peak = out:match("^(%S+) (%S+) (%d+)$")
      assert.equal("nil", count, out)
      assert.equal("malformed", kind, out)
      assert.truthy(tonumber(peak) < 40 * 1024, "peak RSS " .. tostring(peak) .. " KiB")
      assert.equal(1, #requests_of("/huge-list/a", "tools/list"))
    end)
  end)
end)
