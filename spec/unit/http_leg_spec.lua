-- The C HTTP leg (csrc/net/http_leg.c) against a tiny node server on 127.0.0.1
-- (spec/support/tiny_http_server.mjs), started and killed by this file.
local core = require "mcpclient.core"

local MiB = 1024 * 1024

local server, tls = {}, {}

-- A throw-away self-signed certificate for 127.0.0.1, made with the openssl CLI.
local function make_certificate()
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir -p " .. dir))
  local cert, key = dir .. "/cert.pem", dir .. "/key.pem"
  assert(os.execute(string.format(
    "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=mcpclient-spec"
      .. " -addext subjectAltName=IP:127.0.0.1 -keyout %s -out %s >/dev/null 2>&1", key, cert)),
    "openssl could not make a certificate")
  return { dir = dir, cert = cert, key = key }
end

local function start_server(certificate)
  local pipe = assert(io.popen(string.format(
    "exec sh -c 'echo $$; exec node spec/support/tiny_http_server.mjs %s %s'", certificate.cert, certificate.key), "r"))
  local pid = assert(tonumber(pipe:read("l")), "no pid from the server shell")
  local line = assert(pipe:read("l"), "the server printed no port")
  local port, closed, tls_port = line:match("^(%d+) (%d+) (%d+)$")
  assert(port, "unexpected server line: " .. line)
  return { pipe = pipe, pid = pid, port = tonumber(port), closed = tonumber(closed), tls_port = tonumber(tls_port) }
end

local function url(path)
  return string.format("http://127.0.0.1:%d%s", server.port, path)
end

-- A request table with the defaults the specs share.
local function req(fields)
  local r = { method = "GET", timeout_ms = 5000 }
  for k, v in pairs(fields) do r[k] = v end
  return r
end

-- The "key=value" lines /inspect answers with.
local function inspected(body)
  local seen = { headers = {} }
  for line in body:gmatch("[^\n]+") do
    local name, value = line:match("^h:([^=]+)=(.*)$")
    if name then
      seen.headers[name] = value
    else
      local k, v = line:match("^([^=]+)=(.*)$")
      seen[k] = v
    end
  end
  return seen
end

describe("core.http_leg", function()
  local leg

  setup(function()
    tls = make_certificate()
    server = start_server(tls)
  end)

  teardown(function()
    os.execute("kill " .. server.pid)
    server.pipe:close()
    os.remove(tls.cert)
    os.remove(tls.key)
    os.remove(tls.dir)
  end)

  before_each(function()
    leg = core.http_leg()
  end)

  after_each(function()
    leg:close()
  end)

  describe("a plain exchange", function()
    it("returns status, lower-cased headers, body and a duration", function()
      local res = assert(leg:send(req { url = url("/json") }))
      assert.equal(200, res.status)
      assert.equal("application/json", res.headers["content-type"])
      assert.equal("Value", res.headers["x-custom-header"])
      assert.is_nil(res.headers["X-Custom-Header"])
      assert.equal('{"ok":true,"method":"GET"}', res.body)
      assert.is_number(res.duration_ms)
      assert.is_true(res.duration_ms > 0 and res.duration_ms < 5000)
      assert.is_false(res.streamed)
      assert.is_false(res.stopped)
      assert.is_false(res.truncated)
    end)

    -- The leg reads the media type once, and that reading both decides
    -- streaming and is what the transport sees: the two never disagree.
    it("reports the media type it read: before ';', trimmed, lower case", function()
      assert.equal("application/json", assert(leg:send(req { url = url("/json") })).media_type)
      local res = assert(leg:send(req { url = url("/sse"), on_stream = function() return true end }))
      assert.equal("text/event-stream", res.media_type)
      assert.is_true(res.streamed)
    end)

    it("stops a send_only exchange once the request is out, even when the server never answers", function()
      local t0 = core.now()
      local res = assert(leg:send(req { method = "POST", url = url("/hang"), body = '{"n":1}', send_only = true }))
      assert.is_true(res.stopped)
      assert.is_true(core.now() - t0 < 0.5, "took " .. (core.now() - t0) .. " s")
      assert.equal(200, assert(leg:send(req { url = url("/json") })).status)
    end)

    it("keeps the last of repeated headers and trims values", function()
      local res = assert(leg:send(req { url = url("/dup") }))
      assert.equal("second", res.headers["x-dup"])
      assert.equal("padded value", res.headers["x-padded"])
    end)

    -- The session id is read from every answer, so the leg hands it over as a field; the header
    -- table is made only when a header is read, and then once.
    it("hands the session id over as a field and makes the header table when it is read", function()
      local res = assert(leg:send(req { url = url("/dup") }))
      assert.equal("sid-2", res.session_id)
      assert.is_nil(rawget(res, "headers"))
      local plain = assert(leg:send(req { url = url("/json") }))
      assert.is_nil(plain.session_id)
      assert.is_nil(plain.headers["mcp-session-id"])
      -- read after the leg's next send: made from the response's own head
      local headers = res.headers
      assert.equal("sid-2", headers["mcp-session-id"])
      assert.equal("second", headers["x-dup"])
      assert.equal(headers, rawget(res, "headers"))
      assert.equal(headers, res.headers)
      assert.is_nil(res.no_such_field)
    end)

    it("discards the headers of an interim 1xx response", function()
      local res = assert(leg:send(req { url = url("/early") }))
      assert.equal(200, res.status)
      assert.equal("yes", res.headers["x-final"])
      assert.is_nil(res.headers.link)
      assert.equal("final", res.body)
    end)

    it("reuses one kept-alive connection across sends", function()
      local first = assert(leg:send(req { url = url("/json") }))
      local second = assert(leg:send(req { method = "POST", url = url("/json"), body = "{}" }))
      local third = assert(leg:send(req { url = url("/json") }))
      assert.equal(first.headers["x-conn-id"], second.headers["x-conn-id"])
      assert.equal(first.headers["x-conn-id"], third.headers["x-conn-id"])
      local other = core.http_leg()
      local elsewhere = assert(other:send(req { url = url("/json") }))
      other:close()
      assert.are_not.equal(first.headers["x-conn-id"], elsewhere.headers["x-conn-id"])
    end)

    it("leaves nothing ready in the engine once the server closes an idle kept-alive connection", function()
      local first = assert(leg:send(req { url = url("/close-idle") }))
      core.sleep(0.3) -- the server closed the connection 100 ms after its answer
      local epfd = core.engine_pollfd()
      assert.equal(0, core.engine_step(0))
      -- a descriptor still ready here would wake every later wait of the engine (a host's loop spins)
      assert.is_nil(core.fd_ready(epfd, "r"), "the engine's descriptor stays ready")
      local second = assert(leg:send(req { url = url("/json") }))
      assert.are_not.equal(first.headers["x-conn-id"], second.headers["x-conn-id"])
      assert.equal(0, core.engine_step(0))
      assert.is_nil(core.fd_ready(epfd, "r"))
    end)

    it("does not follow a redirect", function()
      local res = assert(leg:send(req { url = url("/redirect") }))
      assert.equal(302, res.status)
      assert.equal("/json", res.headers.location)
      assert.equal("moved", res.body)
    end)

    it("measures the duration on a monotonic clock", function()
      local res = assert(leg:send(req { url = url("/slow?ms=80") }))
      assert.is_true(res.duration_ms >= 50, "duration " .. res.duration_ms)
      assert.is_true(res.duration_ms < 5000)
    end)
  end)

  describe("the request on the wire", function()
    it("sends method, headers and body; no Expect, no Accept-Encoding; our User-Agent", function()
      local res = assert(leg:send(req {
        method = "POST", url = url("/inspect"), body = '{"a":1}',
        headers = { "Content-Type: application/json", "Accept: application/json, text/event-stream" },
      }))
      local seen = inspected(res.body)
      assert.equal("POST", seen.method)
      assert.equal("7", seen.bodylen)
      assert.equal("application/json", seen.headers["content-type"])
      assert.equal("application/json, text/event-stream", seen.headers.accept)
      assert.equal("mcpclient/" .. core.version, seen.headers["user-agent"])
      assert.is_nil(seen.headers.expect)
      assert.is_nil(seen.headers["accept-encoding"])
    end)

    it("sends GET and DELETE without a body", function()
      local got = inspected(assert(leg:send(req { method = "GET", url = url("/inspect") })).body)
      assert.equal("GET", got.method)
      assert.equal("0", got.bodylen)
      local deleted = inspected(assert(leg:send(req { method = "DELETE", url = url("/inspect") })).body)
      assert.equal("DELETE", deleted.method)
      assert.equal("0", deleted.bodylen)
      local posted = inspected(assert(leg:send(req { method = "POST", url = url("/inspect") })).body)
      assert.equal("POST", posted.method)
      assert.equal("0", posted.bodylen)
    end)

    it("sends a body with NUL bytes intact", function()
      local body = "a\0b\0\0c" .. string.rep("\0\255", 1000) .. "end"
      local res = assert(leg:send(req { method = "POST", url = url("/echo"), body = body }))
      assert.equal(#body, #res.body)
      assert.is_true(body == res.body)
    end)

    it("delivers the secret header, which the server checks, and never repeats it", function()
      local secret = "X-Api-Key: s3cret-value"
      local ok = assert(leg:send(req { url = url("/secret"), secret_header = secret }))
      assert.equal(200, ok.status)
      assert.equal("authorised", ok.body)
      local without = assert(leg:send(req { url = url("/secret") }))
      assert.equal(401, without.status)
      local refused = string.format("http://127.0.0.1:%d/secret", server.closed)
      local res, kind, message = leg:send(req { url = refused, secret_header = secret })
      assert.is_nil(res)
      assert.equal("transport", kind)
      assert.is_nil(message:find("s3cret", 1, true))
    end)

    it("never sends Expect, whatever the body's size, and the header lines stay right as it changes", function()
      local function sent(body, headers)
        local seen = inspected(assert(leg:send(req { method = "POST", url = url("/inspect"), body = body,
          headers = headers })).body)
        assert.is_nil(seen.headers.expect)
        assert.equal(tostring(#body), seen.bodylen)
        return seen.headers
      end
      local lines = { "X-A: 1" }
      for _, size in ipairs { 10, 1024, 1025, 3 * MiB / 2, 10, 3 * MiB / 2, 1024 } do
        assert.equal("1", sent(string.rep("b", size), lines)["x-a"])
      end
      local seen = sent(string.rep("b", 2000), {})
      assert.is_nil(seen["x-a"])
      seen = inspected(assert(leg:send(req { method = "POST", url = url("/inspect"), body = string.rep("b", 2000),
        secret_header = "X-Api-Key: k" })).body).headers
      assert.same({ "k" }, { seen["x-api-key"], seen["x-a"], seen.expect })
      assert.is_nil(sent("small", {})["x-api-key"])
    end)

    it("sends each send's own header lines, however they change from the last send's", function()
      local function sent(headers, secret)
        return inspected(assert(leg:send(req { url = url("/inspect"), headers = headers, secret_header = secret }))
          .body).headers
      end
      local seen = sent { "X-A: 1", "X-B: 2" }
      assert.same({ "1", "2" }, { seen["x-a"], seen["x-b"] })
      seen = sent { "X-A: 1", "X-B: 2" }
      assert.same({ "1", "2" }, { seen["x-a"], seen["x-b"] })
      seen = sent { "X-A: 1", "X-B: 3" }
      assert.same({ "1", "3" }, { seen["x-a"], seen["x-b"] })
      seen = sent { "X-A: 1" }
      assert.same({ "1" }, { seen["x-a"], seen["x-b"] })
      seen = sent { "X-A: 1", "X-B: 2", "X-C: 4" }
      assert.same({ "1", "2", "4" }, { seen["x-a"], seen["x-b"], seen["x-c"] })
      seen = sent({ "X-A: 1", "X-B: 2", "X-C: 4" }, "X-Api-Key: s3cret-value")
      assert.same({ "1", "2", "4", "s3cret-value" }, { seen["x-a"], seen["x-b"], seen["x-c"], seen["x-api-key"] })
      seen = sent { "X-A: 1", "X-B: 2", "X-C: 4" }
      assert.same({ "1", "2", "4" }, { seen["x-a"], seen["x-b"], seen["x-c"], seen["x-api-key"] })
      seen = sent {}
      assert.same({}, { seen["x-a"], seen["x-b"], seen["x-c"] })
      assert.is_nil(seen.expect)
    end)

    it("sends a secret body exactly as given, NUL bytes included, then sends plain bodies again", function()
      local secret = "grant_type=refresh_token&refresh_token=r3fresh\0" .. string.rep("\0\255", 3000) .. "end"
      local res = assert(leg:send(req { method = "POST", url = url("/echo"), secret_body = secret,
        headers = { "Content-Type: application/x-www-form-urlencoded" } }))
      assert.equal(200, res.status)
      assert.equal(#secret, #res.body)
      assert.is_true(secret == res.body)
      local seen = inspected(assert(leg:send(req { method = "POST", url = url("/inspect"), secret_body = "a=1" })).body)
      assert.equal("POST", seen.method)
      assert.equal("3", seen.bodylen)
      assert.equal("", assert(leg:send(req { method = "POST", url = url("/echo"), secret_body = "" })).body)
      -- the copy is gone: the next exchanges send their own body, or none
      assert.equal("plain", assert(leg:send(req { method = "POST", url = url("/echo"), body = "plain" })).body)
      assert.equal("0", inspected(assert(leg:send(req { url = url("/inspect") })).body).bodylen)
    end)

    it("keeps a secret body out of the failure message", function()
      local refused = string.format("http://127.0.0.1:%d/echo", server.closed)
      local res, kind, message =
        leg:send(req { method = "POST", url = refused, secret_body = "code_verifier=v3rifier" })
      assert.is_nil(res)
      assert.equal("transport", kind)
      assert.is_nil(message:find("v3rifier", 1, true))
    end)
  end)

  describe("the read cap", function()
    it("keeps exactly the first 2 MiB of a 3 MiB body", function()
      local res = assert(leg:send(req { url = url("/big") }))
      assert.equal(200, res.status)
      assert.is_true(res.truncated)
      assert.equal(2097152, #res.body)
      assert.equal(string.rep("x", 2097152), res.body)
    end)

    it("caps a chunked body the same way", function()
      local res = assert(leg:send(req { url = url("/big?chunked=1") }))
      assert.is_true(res.truncated)
      assert.equal(2 * MiB, #res.body)
    end)

    it("does not call a body of exactly the declared cap truncated", function()
      local res = assert(leg:send(req { url = url("/big?n=" .. 2 * MiB) }))
      assert.is_false(res.truncated)
      assert.equal(2 * MiB, #res.body)
    end)

    it("honours a smaller max_bytes, and the leg works after a truncation", function()
      local res = assert(leg:send(req { url = url("/json"), max_bytes = 5 }))
      assert.is_true(res.truncated)
      assert.equal('{"ok"', res.body)
      assert.equal(200, assert(leg:send(req { url = url("/json") })).status)
    end)
  end)

  describe("hold_body", function()
    -- A JSON-RPC answer of 70 000 bytes, which /echo sends back as it came.
    local ANSWER = '{"jsonrpc":"2.0","id":7,"result":{"pad":"' .. string.rep("x", 70000) .. '","n":[1,2]}}'

    local function echoed(body, hold)
      return assert(leg:send(req { method = "POST", url = url("/echo"), body = body, hold_body = hold }))
    end

    it("hands a large 2xx body over without a copy: rpc_classify reads it once, as it reads the string", function()
      local res = echoed(ANSWER, true)
      assert.equal("userdata", type(res.body))
      assert.equal(#ANSWER, #res.body)
      assert.same({ core.rpc_classify(ANSWER, 7, true) }, { core.rpc_classify(res.body, 7, true) })
      assert.equal(0, #res.body)
      assert.has_error(function() core.rpc_classify(res.body, 7) end,
        "a response body is read once; this one was read already")
      -- the leg gave its buffer away and reads the next answer into a new one
      assert.equal('{"ok":true,"method":"GET"}', assert(leg:send(req { url = url("/json"), hold_body = true })).body)
    end)

    it("words a held body that is no answer as it words the string", function()
      local broken = '{"jsonrpc":"2.0","id":7,"result":{"pad":"' .. string.rep("x", 70000) .. '"}'
      local res = echoed(broken, true)
      assert.equal("userdata", type(res.body))
      local kind, detail = core.rpc_classify(res.body, 7)
      assert.equal("malformed", kind)
      assert.same({ core.rpc_classify(broken, 7) }, { kind, detail })
    end)

    it("holds a 2xx answer from 8 KiB on and copies a smaller one", function()
      local function answer_of(size)
        local head, tail = '{"jsonrpc":"2.0","id":7,"result":{"pad":"', '"}}'
        return head .. string.rep("y", size - #head - #tail) .. tail
      end
      local held, copied = answer_of(8192), answer_of(8191)
      assert.equal("userdata", type(echoed(held, true).body))
      assert.equal(copied, echoed(copied, true).body)
    end)

    it("copies a small body, a truncated one, and any body of a send without hold_body", function()
      assert.equal("string", type(assert(leg:send(req { url = url("/json"), hold_body = true })).body))
      local capped = assert(leg:send(req { url = url("/big"), hold_body = true }))
      assert.is_true(capped.truncated)
      assert.equal(2 * MiB, #capped.body)
      assert.equal("string", type(capped.body))
      assert.equal(ANSWER, echoed(ANSWER, nil).body)
    end)
  end)

  describe("event streams", function()
    it("streams to on_stream in pieces and stops at once when it says so", function()
      local pieces, text = 0, {}
      local t0 = core.now()
      local res = assert(leg:send(req {
        url = url("/sse"),
        on_stream = function(chunk)
          pieces = pieces + 1
          text[#text + 1] = chunk
          return pieces >= 3
        end,
      }))
      local elapsed = core.now() - t0
      assert.equal(200, res.status)
      assert.is_true(res.streamed)
      assert.is_true(res.stopped)
      assert.equal("", res.body)
      assert.equal(3, pieces)
      assert.matches('^id: 1\ndata: {"n":1}\n\n', table.concat(text))
      assert.is_true(elapsed < 1, "took " .. elapsed)
    end)

    it("delivers every byte, the last ones too, when the stream ends by itself", function()
      local text = {}
      local res = assert(leg:send(req {
        url = url("/sse-finite"),
        on_stream = function(chunk) text[#text + 1] = chunk end,
      }))
      assert.is_true(res.streamed)
      assert.is_false(res.stopped)
      assert.equal('data: {"n":1}\n\ndata: {"n":2}\n\ndata: {"n":3}\n\ndata: last\n\n', table.concat(text))
    end)

    it("counts streamed bytes toward max_bytes", function()
      local text = {}
      local res = assert(leg:send(req {
        url = url("/sse"), max_bytes = 40,
        on_stream = function(chunk) text[#text + 1] = chunk end,
      }))
      assert.is_true(res.truncated)
      assert.is_true(res.streamed)
      assert.equal(40, #table.concat(text))
    end)

    it("stops as soon as max_bytes are held instead of waiting for more", function()
      local text = {}
      local t0 = core.now()
      local res = assert(leg:send(req {
        url = url("/sse-once"), max_bytes = 11, timeout_ms = 3000,
        on_stream = function(chunk) text[#text + 1] = chunk end,
      }))
      assert.is_true(core.now() - t0 < 1)
      assert.is_true(res.truncated)
      assert.equal("data: one\n\n", table.concat(text))
    end)

    it("accumulates a body that is not an event stream even with on_stream", function()
      local called = false
      local res = assert(leg:send(req { url = url("/json"), on_stream = function() called = true end }))
      assert.is_false(res.streamed)
      assert.is_false(called)
      assert.equal('{"ok":true,"method":"GET"}', res.body)
    end)
  end)

  describe("failures", function()
    it("cancels promptly when the hook fires", function()
      local t0, fired, polls = core.now(), nil, 0
      local res, kind, message = leg:send(req {
        url = url("/hang"), timeout_ms = 10000,
        cancel = function()
          polls = polls + 1
          if core.now() - t0 >= 0.1 then
            fired = fired or core.now()
            return true
          end
          return false
        end,
      })
      local latency = core.now() - fired
      assert.is_nil(res)
      assert.equal("cancelled", kind)
      assert.equal("the call was cancelled", message)
      assert.is_true(latency < 1, "latency " .. latency)
      assert.is_true(polls >= 3, "polled " .. polls .. " times in 100 ms")
      assert.equal(200, assert(leg:send(req { url = url("/json") })).status)
    end)

    it("sends nothing when the cancel flag is already up", function()
      local res, kind = leg:send(req { url = url("/hang"), cancel = function() return true end })
      assert.is_nil(res)
      assert.equal("cancelled", kind)
    end)

    it("times out at timeout_ms", function()
      local t0 = core.now()
      local res, kind, message = leg:send(req { url = url("/hang"), timeout_ms = 300 })
      local elapsed = core.now() - t0
      assert.is_nil(res)
      assert.equal("timeout", kind)
      assert.is_string(message)
      assert.is_true(elapsed >= 0.25 and elapsed < 2, "elapsed " .. elapsed)
    end)

    it("reports a refused connection as transport", function()
      local res, kind, message = leg:send(req { url = string.format("http://127.0.0.1:%d/", server.closed) })
      assert.is_nil(res)
      assert.equal("transport", kind)
      assert.is_string(message)
      assert.is_true(#message > 0)
    end)

    -- The request had left: the server may have acted on it, so the kind
    -- must not read as "never reached" (which invites a resend).
    it("reports a connection reset in the middle of the body as interrupted", function()
      local res, kind = leg:send(req { url = url("/reset") })
      assert.is_nil(res)
      assert.equal("interrupted", kind)
    end)

    it("refuses schemes other than http and https", function()
      local res, kind = leg:send(req { url = "file:///etc/passwd" })
      assert.is_nil(res)
      assert.equal("transport", kind)
    end)
  end)

  describe("TLS", function()
    local function tls_url(path)
      return string.format("https://127.0.0.1:%d%s", server.tls_port, path)
    end

    it("verifies the peer: an unknown CA fails as tls", function()
      local res, kind, message = leg:send(req { url = tls_url("/json") })
      assert.is_nil(res)
      assert.equal("tls", kind)
      assert.is_string(message)
    end)

    it("trusts ca_file, and forgets it on the next send", function()
      local res = assert(leg:send(req { url = tls_url("/json"), ca_file = tls.cert }))
      assert.equal(200, res.status)
      local again, kind = leg:send(req { url = tls_url("/json") })
      assert.is_nil(again)
      assert.equal("tls", kind)
      assert.equal(200, assert(leg:send(req { url = tls_url("/json"), ca_file = tls.cert })).status)
    end)

    it("presents client_cert and client_key only when given", function()
      local res = assert(leg:send(req {
        url = tls_url("/whoami"), ca_file = tls.cert, client_cert = tls.cert, client_key = tls.key,
      }))
      assert.equal("cn=mcpclient-spec", res.body)
      local anonymous = assert(leg:send(req { url = tls_url("/whoami"), ca_file = tls.cert }))
      assert.equal("anonymous", anonymous.body)
    end)

    it("reports a missing ca_file as tls", function()
      local res, kind = leg:send(req { url = tls_url("/json"), ca_file = tls.dir .. "/missing.pem" })
      assert.is_nil(res)
      assert.equal("tls", kind)
    end)
  end)

  describe("hooks that raise", function()
    it("re-raises the cancel hook's own error value after cleanup", function()
      local boom = { "boom" }
      local ok, err = pcall(leg.send, leg, req { url = url("/hang"), cancel = function() error(boom) end })
      assert.is_false(ok)
      assert.equal(boom, err)
      local res = assert(leg:send(req { url = url("/json") }))
      assert.equal(200, res.status)
    end)

    it("re-raises an on_stream error and the leg stays usable", function()
      local ok, err = pcall(leg.send, leg, req { url = url("/sse"), on_stream = function() error("stream boom") end })
      assert.is_false(ok)
      assert.matches("stream boom", err)
      assert.equal(200, assert(leg:send(req { url = url("/json") })).status)
    end)

    it("refuses a send from inside a hook, and a close from a hook ends the send", function()
      local inner_ok, inner_err
      local ok = pcall(leg.send, leg, req {
        url = url("/hang"),
        cancel = function()
          inner_ok, inner_err = pcall(leg.send, leg, req { url = url("/json") })
          return true
        end,
      })
      assert.is_true(ok)
      assert.is_false(inner_ok)
      assert.matches("busy", inner_err)
      local polls = 0
      local closed_ok, closed_err = pcall(leg.send, leg, req {
        url = url("/hang"),
        cancel = function()
          polls = polls + 1
          if polls == 2 then leg:close() end  -- the first poll runs before anything is sent
          return false
        end,
      })
      assert.is_false(closed_ok)
      assert.matches("closed during its send", closed_err)
    end)
  end)

  describe("pins", function()
    it("dials the pinned address, and the pin does not outlive its send", function()
      local pinned = string.format("http://pinned.invalid:%d/json", server.port)
      local pin = string.format("pinned.invalid:%d:127.0.0.1", server.port)
      local res = assert(leg:send(req { url = pinned, pin = pin }))
      assert.equal(200, res.status)
      local again = assert(leg:send(req { url = pinned, pin = pin }))
      assert.equal(res.headers["x-conn-id"], again.headers["x-conn-id"])
      local unpinned, kind = leg:send(req { url = pinned })
      assert.is_nil(unpinned)
      assert.equal("transport", kind)
      assert.equal(200, assert(leg:send(req { url = pinned, pin = pin })).status)
    end)

    it("does not reuse a connection dialled for another pin", function()
      local pinned = string.format("http://pinned.invalid:%d/json", server.port)
      local pin = string.format("pinned.invalid:%d:127.0.0.1", server.port)
      local first = assert(leg:send(req { url = pinned, pin = pin }))
      -- nothing listens on 127.0.0.2: only a fresh connection can show that
      local res, kind = leg:send(req { url = pinned, pin = string.format("pinned.invalid:%d:127.0.0.2", server.port) })
      assert.is_nil(res)
      assert.equal("transport", kind)
      local back = assert(leg:send(req { url = pinned, pin = pin }))
      assert.equal(200, back.status)
      assert.are_not.equal(first.headers["x-conn-id"], back.headers["x-conn-id"])
    end)

    it("falls back along the pinned addresses when the first does not answer", function()
      local pinned = string.format("http://pinned.invalid:%d/json", server.port)
      -- nothing listens on 127.0.0.2 or on [::1] at this port: both refuse at once
      for _, addresses in ipairs { "127.0.0.2,127.0.0.1", "[::1],127.0.0.1" } do
        local pin = string.format("pinned.invalid:%d:%s", server.port, addresses)
        assert.equal(200, assert(leg:send(req { url = pinned, pin = pin })).status)
      end
    end)

    it("checks the pin against each send's url, not only the first one's", function()
      local pinned = string.format("http://pinned.invalid:%d/json", server.port)
      local pin = string.format("pinned.invalid:%d:127.0.0.1", server.port)
      assert.equal(200, assert(leg:send(req { url = pinned, pin = pin })).status)
      assert.equal(200, assert(leg:send(req { url = pinned, pin = pin })).status)
      assert.has_error(function()
        leg:send(req { url = string.format("http://other.invalid:%d/json", server.port), pin = pin })
      end)
      assert.has_error(function()
        leg:send(req { url = pinned, pin = string.format("pinned.invalid:%d:127.0.0.1", server.port + 1) })
      end)
      assert.equal(200, assert(leg:send(req { url = pinned, pin = pin })).status)
    end)

    it("raises when the pin does not name the url's host and port", function()
      assert.has_error(function()
        leg:send(req { url = url("/json"), pin = "other.invalid:80:127.0.0.1" })
      end)
      assert.has_error(function()
        leg:send(req { url = url("/json"), pin = "not a pin" })
      end)
    end)
  end)

  describe("misuse", function()
    it("raises on a closed leg; close is idempotent and serves __close", function()
      leg:close()
      leg:close()
      assert.matches("closed", tostring(leg))
      assert.has_error(function() leg:send(req { url = url("/json") }) end, "attempt to use a closed http leg")
      local outer
      do
        local scoped <close> = core.http_leg()
        outer = scoped
      end
      assert.has_error(function() outer:send(req { url = url("/json") }) end)
    end)

    it("raises on unknown keys, wrong types and bad values", function()
      local bad = {
        { method = "GET", url = url("/json"), timeout_ms = 100, bogus = 1 },
        { method = "PUT", url = url("/json"), timeout_ms = 100 },
        { url = url("/json"), timeout_ms = 100 },
        { method = "GET", timeout_ms = 100 },
        { method = "GET", url = url("/json") },
        { method = "GET", url = url("/json"), timeout_ms = 0 },
        { method = "GET", url = url("/json"), timeout_ms = 1.5 },
        { method = "GET", url = url("/json"), timeout_ms = "100" },
        { method = "GET", url = url("/json"), timeout_ms = 100, connect_timeout_ms = 0 },
        { method = "GET", url = url("/json"), timeout_ms = 100, max_bytes = 0 },
        { method = "GET", url = url("/json"), timeout_ms = 100, body = "x" },
        { method = "POST", url = url("/json"), timeout_ms = 100, body = 42 },
        { method = "GET", url = url("/json"), timeout_ms = 100, headers = "Accept: x" },
        { method = "GET", url = url("/json"), timeout_ms = 100, headers = { "A: b\r\nC: d" } },
        { method = "GET", url = url("/json"), timeout_ms = 100, headers = { x = "A: b" } },
        { method = "GET", url = url("/json"), timeout_ms = 100, headers = { 42 } },
        { method = "GET", url = url("/json"), timeout_ms = 100, secret_header = "A: b\nC: d" },
        { method = "GET", url = url("/json"), timeout_ms = 100, cancel = true },
        { method = "GET", url = url("/json"), timeout_ms = 100, on_stream = "x" },
        { method = "GET", url = url("/json"), timeout_ms = 100, ca_file = 1 },
        { method = "GET", url = url("/json"), timeout_ms = 100, hold_body = 1 },
        { method = "GET", url = url("/json"), timeout_ms = 100, [1] = "x" },
      }
      for i, r in ipairs(bad) do
        assert.has_error(function() leg:send(r) end, nil, "case " .. i)
      end
      assert.has_error(function() leg:send("GET") end)
      -- and the leg is still fine
      assert.equal(200, assert(leg:send(req { url = url("/json") })).status)
    end)

    it("names what is wrong with the header lines and the text fields, whatever its place", function()
      local function raised(r)
        local ok, why = pcall(leg.send, leg, r)
        assert.is_false(ok)
        return tostring(why):match("send: .*$")
      end
      local holed = { "A: b", "C: d", "E: f" }
      holed[2] = nil
      local cases = {
        { { "A: b", "C: d\0" }, "send: headers[2] must not contain NUL or line breaks" },
        { { "A: b", "C: d", "E\r: f" }, "send: headers[3] must not contain NUL or line breaks" },
        { { "A: b", "\nC: d" }, "send: headers[2] must not contain NUL or line breaks" },
        { { "A: b", "C: d", x = "E: f" }, "send: 'headers' must be an array of strings" },
        { { [2] = "C: d" }, "send: 'headers' must be an array of strings" },
      }
      for i, case in ipairs(cases) do
        assert.equal(case[2], raised(req { url = url("/json"), headers = case[1] }), "case " .. i)
      end
      local hole = raised(req { url = url("/json"), headers = holed })
      assert.truthy(hole == "send: 'headers' has a hole at 2" or hole == "send: 'headers' must be an array of strings",
        hole)
      assert.equal("send: 'url' must not contain NUL or line breaks", raised(req { url = url("/json") .. "\n" }))
      assert.equal("send: 'url' must not contain NUL or line breaks", raised(req { url = url("/js\0on") }))
      assert.equal("send: 'ca_file' must not contain NUL", raised(req { url = url("/json"), ca_file = "a\0b" }))
      assert.equal(200, assert(leg:send(req { url = url("/json"), headers = { "A: b", "C: d" } })).status)
    end)

    it("raises when a send gives both 'body' and 'secret_body', or a secret body a POST cannot carry", function()
      assert.has_error(function()
        leg:send(req { method = "POST", url = url("/echo"), body = "a", secret_body = "b" })
      end, "send: give either 'body' or 'secret_body', not both")
      assert.has_error(function()
        leg:start(req { method = "POST", url = url("/echo"), body = "a", secret_body = "b" })
      end, "send: give either 'body' or 'secret_body', not both")
      assert.has_error(function() leg:send(req { url = url("/json"), secret_body = "b" }) end,
        "send: a 'body' is only sent with POST")
      assert.has_error(function() leg:send(req { method = "POST", url = url("/echo"), secret_body = 42 }) end,
        "send: 'secret_body' must be a string")
      assert.equal("ok", assert(leg:send(req { method = "POST", url = url("/echo"), secret_body = "ok" })).body)
    end)

    it("keeps messages free of the secret when the url is malformed", function()
      local res, kind, message = leg:send(req { url = "http://[bad", secret_header = "Authorization: Bearer t0ken" })
      assert.is_nil(res)
      assert.equal("transport", kind)
      assert.is_nil(message:find("t0ken", 1, true))
    end)
  end)

  -- Exchanges started from Lua and driven by the one engine, as gather's tasks do.
  describe("started exchanges", function()
    -- Drive the engine until every leg has ended; -> the responses, in order.
    local function drive(legs)
      local out, left = {}, #legs
      while left > 0 do
        core.engine_step(10)
        for i, l in ipairs(legs) do
          if not out[i] and l:pump() == "done" then
            out[i] = { l:finish("done") }
            left = left - 1
          end
        end
      end
      return out
    end

    it("runs two exchanges of one pool at once, each on its own connection", function()
      local pool = core.http_pool()
      local a, b = core.http_leg(pool), core.http_leg(pool)
      local t0 = core.now()
      assert(a:start(req { url = url("/slow?ms=400") }))
      assert(b:start(req { url = url("/slow?ms=400") }))
      local out = drive { a, b }
      assert.equal("slow", out[1][1].body)
      assert.equal("slow", out[2][1].body)
      assert.is_true(core.now() - t0 < 0.75, "took " .. (core.now() - t0) .. " s")
      -- both kept-alive connections stay in the pool for the next exchanges
      assert(a:start(req { url = url("/slow?ms=100") }))
      assert(b:start(req { url = url("/slow?ms=100") }))
      local again = drive { a, b }
      assert.are_not.equal(again[1][1].headers["x-conn-id"], again[2][1].headers["x-conn-id"])
      for i = 1, 2 do
        local first = out[i][1].headers["x-conn-id"]
        assert.truthy(first == again[1][1].headers["x-conn-id"] or first == again[2][1].headers["x-conn-id"])
      end
      a:close()
      b:close()
      pool:close()
    end)

    it("hands event-stream bytes to its driver and stops when told", function()
      assert(leg:start(req { url = url("/sse"), on_stream = function() end }))
      local state, chunk
      repeat
        core.engine_step(10)
        state, chunk = leg:pump()
      until state ~= "wait"
      assert.equal("chunk", state)
      assert.truthy(chunk:find("data:", 1, true))
      assert.equal(200, leg:status())
      local res = assert(leg:finish("stopped"))
      assert.is_true(res.stopped)
      assert.is_true(res.streamed)
    end)

    it("reports a cancellation, and an aborted exchange leaves nothing in the engine", function()
      assert(leg:start(req { url = url("/hang") }))
      core.engine_step(10)
      local res, kind = leg:finish("cancelled")
      assert.is_nil(res)
      assert.equal("cancelled", kind)
      assert(leg:start(req { url = url("/hang") }))
      core.engine_step(10)
      leg:abort()
      leg:abort()
      assert.equal(0, core.engine_step(0))
      assert.equal(200, assert(leg:send(req { url = url("/json") })).status)
    end)

    -- The copy is wiped and freed when the exchange ends, whichever way; under
    -- ASan a transfer still reading it afterwards, or a second free, aborts.
    it("drops a secret body's copy on finish, abort and close, mid-upload too", function()
      local big = string.rep("s3cret-", 300000)  -- ~2 MiB: still uploading when stopped
      assert(leg:start(req { method = "POST", url = url("/inspect"), secret_body = big }))
      local seen = inspected(drive({ leg })[1][1].body)
      assert.equal(tostring(#big), seen.bodylen)
      assert(leg:start(req { method = "POST", url = url("/hang"), secret_body = big }))
      core.engine_step(10)
      leg:abort()
      assert.equal(0, core.engine_step(0))
      assert(leg:start(req { method = "POST", url = url("/hang"), secret_body = big }))
      core.engine_step(10)
      local res, kind = leg:finish("cancelled")
      assert.is_nil(res)
      assert.equal("cancelled", kind)
      assert.equal("after", assert(leg:send(req { method = "POST", url = url("/echo"), body = "after" })).body)
      local other = core.http_leg()
      assert(other:start(req { method = "POST", url = url("/hang"), secret_body = big }))
      core.engine_step(10)
      other:close()
      assert.equal(0, core.engine_step(0))
      local polls = 0
      res, kind = leg:send(req { method = "POST", url = url("/hang"), secret_body = big,
        cancel = function() polls = polls + 1; return polls > 2 end })
      assert.is_nil(res)
      assert.equal("cancelled", kind)
      assert.equal("after", assert(leg:send(req { method = "POST", url = url("/echo"), body = "after" })).body)
    end)

    it("raises on misuse", function()
      assert.has_error(function() leg:pump() end, "the http leg has no started exchange")
      assert(leg:start(req { url = url("/slow?ms=200") }))
      assert.has_error(function() leg:send(req { url = url("/json") }) end, "the http leg is busy with another send")
      assert.has_error(function() leg:finish("done") end, "finish: the exchange has not ended")
      assert.has_error(function() leg:finish("later") end)
      leg:abort()
    end)
  end)
end)
