-- The host gate against the real libcurl leg: it judges exactly the name and
-- address libcurl dials. Servers are spec/support/gate_peer.mjs on loopback
-- addresses, started and stopped here by PID. A name that needs its own
-- resolution (an international name, a resolver that never answers) is given
-- to one child process (spec/support/gate_child.lua) with `unshare -m` and a
-- bind mount over /etc/hosts or /etc/resolv.conf; that needs root and
-- unshare, and the spec fails with the reason when they are missing.
local mcp = require "mcpclient"
local core = require "mcpclient.core"
local hostgate = require "mcpclient.hostgate"

local shell = require "support.shell"
local quote, read_all = shell.quote, shell.read_all

local json = core.json
local TOKEN = "gate-spec-token-5d1e"

-- Start the peer on `addresses`; { pipe, pid, port, stderr }.
local function start_peer(addresses)
  local stderr = os.tmpname()
  local pipe = assert(io.popen(string.format("exec sh -c 'echo $$; exec node spec/support/gate_peer.mjs %s 2>%s'",
    table.concat(addresses, " "), stderr), "r"))
  local pid = assert(math.tointeger(tonumber(pipe:read("l"))), "no pid from the peer shell")
  local line = pipe:read("l")
  local port = line and line:match("^listening (%d+)$")
  if not port then
    os.execute("kill " .. pid .. " 2>/dev/null")
    pipe:close()
    error("the gate peer did not start: " .. tostring(line) .. " " .. read_all(stderr))
  end
  return { pipe = pipe, pid = pid, port = tonumber(port), stderr = stderr, address = addresses[1] }
end

local function stop_peer(peer)
  if not peer then return end
  os.execute("kill " .. peer.pid .. " 2>/dev/null")
  peer.pipe:close()
  os.remove(peer.stderr)
end

-- What the peer saw: { { address, host, authorization, method }, ... }.
local function hits(peer)
  local leg <close> = core.http_leg()
  local res = assert(leg:send { method = "GET", url = string.format("http://%s:%d/_hits", peer.address, peer.port),
    timeout_ms = 5000 })
  return json.decode(res.body)
end

-- Why a child cannot get private namespaces here, or nil when it can.
local function namespace_unavailable()
  if not shell.run("command -v unshare") then return "the unshare command is not installed" end
  if not shell.run("unshare -m -n true") then return "unshare -m -n fails (this spec must run as root)" end
  return nil
end

-- Run gate_child.lua in its own mount (and, with config.own_network, network)
-- namespace after the shell words `prepare` (bind mounts, a loopback that is
-- up, a silent resolver whose PID `prepare` leaves in $helper, stopped after
-- the child); returns the child's JSON report.
local function child(prepare, config)
  local why = namespace_unavailable()
  assert(why == nil, "cannot give one process a private /etc/hosts or resolv.conf: " .. tostring(why))
  local command = string.format(
    "GATE_TOKEN=%s GATE_CHILD=%s LUA_PATH=%s LUA_CPATH=%s unshare -m %s sh -c %s 2>&1",
    quote(TOKEN), quote(json.encode(config)), quote(package.path), quote(package.cpath),
    config.own_network and "-n" or "",
    quote(prepare .. " && { lua5.4 spec/support/gate_child.lua; rc=$?; "
      .. "[ -z \"${helper:-}\" ] || kill $helper; exit $rc; }"))
  local pipe = assert(io.popen(command, "r"))
  local output = pipe:read("a")
  pipe:close()
  local report = json.decode(output:match("[^\n]*\n?$") or "")
  assert(type(report) == "table", "the child said: " .. output)
  return report
end

local function write_file(text)
  local path = os.tmpname()
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
  return path
end

describe("the host gate with the real leg #integration", function()
  describe("an international name", function()
    local peer, hosts

    setup(function()
      peer = start_peer { "127.0.0.2", "127.0.0.3" }
      -- the U-label and its A-label point at different addresses, as a hostile resolver may arrange
      hosts = write_file("127.0.0.1 localhost\n127.0.0.2 bücher.test\n127.0.0.3 xn--bcher-kva.test\n")
    end)

    teardown(function()
      stop_peer(peer)
      if hosts then os.remove(hosts) end
    end)

    it("is judged in the A-label form libcurl dials, with a UTF-8 locale set", function()
      local url = string.format("http://bücher.test:%d/mcp", peer.port)
      -- the gate allows only the U-label's address: the A-label's is refused, and nothing is dialled
      local report = child("mount --bind " .. quote(hosts) .. " /etc/hosts",
        { url = url, allow = { "127.0.0.2" }, locale = "C.UTF-8" })
      assert.same({ "xn--bcher-kva.test 127.0.0.3" }, report.asked)
      assert.is_false(report.ok)
      assert.equal("refused_host", report.kind)
      assert.same({}, hits(peer))

      -- allowed, the connection reaches exactly the address the gate judged, with the credential
      report = child("mount --bind " .. quote(hosts) .. " /etc/hosts",
        { url = url, allow = { "127.0.0.3" }, locale = "C.UTF-8" })
      assert.same({ "xn--bcher-kva.test 127.0.0.3" }, report.asked)
      assert.is_true(report.ok, report.message)
      local seen = hits(peer)
      assert.is_true(#seen >= 1)
      for _, hit in ipairs(seen) do
        assert.equal("127.0.0.3", hit.address)
        assert.equal(string.format("xn--bcher-kva.test:%d", peer.port), hit.host)
        assert.equal("Bearer " .. TOKEN, hit.authorization)
      end
    end)
  end)

  describe("non-canonical IPv4 spellings and percent-encoded hosts", function()
    local peer

    setup(function() peer = start_peer { "127.0.0.1" } end)
    teardown(function() stop_peer(peer) end)

    it("are judged and dialled as the dotted quad, never raising", function()
      for _, host in ipairs { "2130706433", "127.1", "0x7f.1", "0177.0.0.1", "0x7F.0.0.0X1", "%31%32%37.0.0.1",
                              "127.0.0.1.", "loc%61lhost" } do
        local asked = {}
        local conn = mcp.connect {
          url = string.format("http://%s:%d/mcp", host, peer.port), identifier = "gate", health = mcp.health.discard,
          host_gate = function(h, address)
            asked[#asked + 1] = h .. " " .. address
            return hostgate.default(h, address, {})
          end,
        }
        local ok, message = conn:ping()
        assert.is_table(ok, host .. ": " .. tostring(message))
        local want = host == "loc%61lhost" and "localhost 127.0.0.1" or "127.0.0.1 127.0.0.1"
        assert.equal(want, asked[1], host)
        conn:close()
      end
      for _, hit in ipairs(hits(peer)) do assert.equal("127.0.0.1", hit.address) end
    end)

    it("are refused, not raised, when they are no address at all", function()
      for _, host in ipairs { "256.0.0.1", "0x100000000", "1.2.3.4.5", "foo.0x7f", "08.0.0.1", "a%zz", "a%2fb" } do
        local conn = mcp.connect { url = string.format("http://%s:%d/mcp", host, peer.port), identifier = "gate",
          health = mcp.health.discard }
        local ok, _, err = conn:ping()
        assert.is_nil(ok, host)
        assert.equal("refused_host", err.kind, host)
      end
    end)
  end)

  describe("a resolver that never answers", function()
    local resolv, prepare

    setup(function()
      -- in the child's own network namespace a UDP socket on 127.0.0.1:53 reads queries and never
      -- answers; glibc alone would wait 3 s per try. The child waits until it is ready (up to 90 s,
      -- as for any peer's start on a loaded machine), and it lives 15 s from then.
      resolv = write_file("nameserver 127.0.0.1\noptions timeout:3 attempts:2\n")
      local silent = "const s = require('dgram').createSocket('udp4'); s.on('message', () => {}); "
        .. "s.bind(53, '127.0.0.1', () => { console.log('ready'); setTimeout(() => process.exit(0), 15000); })"
      prepare = string.format("ip link set lo up && mount --bind %s /etc/resolv.conf && "
        .. "{ node -e %s > /tmp/gate-silent.$$ 2>/dev/null & } && helper=$! && i=0 && "
        .. "while [ ! -s /tmp/gate-silent.$$ ] && [ $i -lt 1800 ]; do sleep 0.05; i=$((i+1)); done && "
        .. "rm -f /tmp/gate-silent.$$", quote(resolv), quote(silent))
    end)
    teardown(function() if resolv then os.remove(resolv) end end)

    it("is bounded by the operation budget", function()
      local report = child(prepare, { url = "http://stalled.gate-spec.test:8080/mcp", allow = {}, budget = 0.5,
        own_network = true })
      assert.is_false(report.ok)
      assert.equal("transport", report.kind, report.message)
      assert.matches("did not resolve within the 0.5%-second operation budget", report.detail)
      -- the budget ended it, not the resolver's 3 s try (generous: the machine may be loaded)
      assert.is_true(report.seconds >= 0.45 and report.seconds < 3, "returned after " .. report.seconds .. " s")
    end)

    it("is bounded by the cancel hook", function()
      local report = child(prepare, { url = "http://stalled.gate-spec.test:8080/mcp", allow = {}, budget = 5,
        cancel_after = 0.2, own_network = true })
      assert.is_false(report.ok)
      assert.equal("cancelled", report.kind, report.message)
      -- the cancel ended it, well inside the 5 s budget and the resolver's 3 s try
      assert.is_true(report.seconds >= 0.2 and report.seconds < 2.5, "returned after " .. report.seconds .. " s")
    end)
  end)
end)
