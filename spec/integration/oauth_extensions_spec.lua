-- The extension grants against the scripted authorization server (spec/support/oauth_server.mjs,
-- started and stopped by this file on 127.0.0.1): DPoP proofs as an authorization server and a
-- resource server check them (contents, a jti never reused, both nonce challenges, a server that
-- keeps asking), the JWT bearer grant of workload identity and its refusal, and the token exchange
-- of enterprise-managed authorization.
local mcp = require "mcpclient"
local core = require "mcpclient.core"
local dpop = require "mcpclient.oauth.dpop"
local read_all = require("support.shell").read_all

local json = core.json

local server

local function start()
  local stderr = os.tmpname()
  local pipe = assert(io.popen(string.format(
    "exec sh -c 'echo $$; exec node spec/support/oauth_server.mjs 2>%s'", stderr), "r"))
  local pid = assert(math.tointeger(tonumber(pipe:read("l"))))
  local port = (pipe:read("l") or ""):match("^listening (%d+)$")
  if not port then
    os.execute("kill " .. pid .. " 2>/dev/null")
    pipe:close()
    error("the OAuth server did not start: " .. read_all(stderr))
  end
  return { pipe = pipe, pid = pid, port = tonumber(port), stderr = stderr }
end

local function base() return "http://127.0.0.1:" .. server.port end

local function control(method, path, body)
  local leg <close> = core.http_leg()
  local res = assert(leg:send { method = method, url = base() .. path, body = body, timeout_ms = 5000 })
  assert.equal(200, res.status)
  return json.decode(res.body)
end

local function configure(values) control("POST", "/_config", json.encode(values)) end

-- What the server saw since the last configure, with each path's entries.
local function seen(path)
  local list = {}
  for _, r in ipairs(control("GET", "/_state")) do
    if not path or r.path == path then list[#list + 1] = r end
  end
  return list
end

-- A logged value the server sent as JSON null is absent.
local function given(value)
  if value == json.null then return nil end
  return value
end

local function connect(oauth, extra)
  local options = {
    url = base() .. "/mcp", identifier = "extspec", health = mcp.health.discard, protocol = "2025-11-25",
    oauth = oauth, resolver = function(reference)
      return ({ ["ref:assertion"] = "WORKLOAD-JWT", ["ref:id_token"] = "USER-ID-TOKEN",
        ["ref:secret"] = "client-secret-1" })[reference]
    end,
  }
  for k, v in pairs(extra or {}) do options[k] = v end
  return mcp.connect(options)
end

local function code_flow(extra)
  local oauth = { authorize = mcp.oauth.follow_immediate_redirect, dpop = true }
  for k, v in pairs(extra or {}) do oauth[k] = v end
  return connect(oauth)
end

describe("OAuth extension grants against a scripted authorization server #integration", function()
  setup(function() server = start() end)
  teardown(function()
    if server then
      os.execute("kill " .. server.pid .. " 2>/dev/null")
      server.pipe:close()
      os.remove(server.stderr)
    end
  end)

  describe("DPoP", function()
    it("signs a fresh proof for the token request and every request, and presents the token as DPoP", function()
      configure { dpop = true }
      local conn <close> = code_flow()
      assert(conn:list_tools())
      assert(conn:call_tool("echo", {}))
      local before = os.time()
      local token_requests = seen("/token")
      assert.equal(1, #token_requests)
      local proof = token_requests[1].dpop
      assert.is_true(proof.ok, proof.why)
      assert.equal("POST", proof.claims.htm)
      assert.equal(base() .. "/token", proof.claims.htu)
      assert.is_nil(proof.claims.ath)            -- no token yet
      assert.is_true(math.abs(proof.claims.iat - before) <= 5)
      local jtis = { [proof.claims.jti] = true }
      local authorized = 0
      for _, r in ipairs(seen("/mcp")) do
        if given(r.token) then
          authorized = authorized + 1
          assert.equal("DPoP", r.scheme)
          assert.is_true(r.dpop.ok, r.dpop.why)
          assert.equal(base() .. "/mcp", r.dpop.claims.htu)
          assert.equal(core.crypto.base64url(core.crypto.sha256(r.token)), r.dpop.claims.ath)
          assert.is_nil(jtis[r.dpop.claims.jti], "a proof was used twice")
          jtis[r.dpop.claims.jti] = true
        end
      end
      assert.is_true(authorized >= 4)   -- the refused request again, initialized, tools/list, tools/call
    end)

    it("answers the authorization server's nonce challenge once, with a new proof carrying it", function()
      configure { dpop = true, dpop_as_nonce = "once" }
      local conn <close> = code_flow()
      assert(conn:list_tools())
      local tokens = seen("/token")
      assert.equal(2, #tokens)
      assert.is_nil(tokens[1].dpop.claims.nonce)
      assert.equal("n-as-1", tokens[2].dpop.claims.nonce)
      assert.is_true(tokens[2].dpop.ok, tokens[2].dpop.why)
      assert.are_not.equal(tokens[1].dpop.claims.jti, tokens[2].dpop.claims.jti)
    end)

    it("answers the resource's nonce challenge and keeps sending that nonce", function()
      configure { dpop = true, dpop_rs_nonce = "once" }
      local conn <close> = code_flow()
      assert(conn:list_tools())
      assert(conn:call_tool("echo", {}))
      local with_token = {}
      for _, r in ipairs(seen("/mcp")) do
        if given(r.token) then with_token[#with_token + 1] = r end
      end
      assert.is_nil(with_token[1].dpop.claims.nonce)           -- challenged: use_dpop_nonce
      for i = 2, #with_token do
        assert.equal("n-rs-1", with_token[i].dpop.claims.nonce)
        assert.is_true(with_token[i].dpop.ok, with_token[i].dpop.why)
      end
    end)

    it("stops after a bounded number of nonces when the authorization server asks for a new one each time", function()
      configure { dpop = true, dpop_as_nonce = "rotate" }
      local conn <close> = code_flow()
      local ok, message, err = conn:list_tools()
      assert.is_nil(ok)
      assert.equal("authorization_failed", err.kind)
      assert.truthy(message:find("use_dpop_nonce", 1, true), message)
      assert.equal(1 + dpop.MAX_NONCE_RETRIES, #seen("/token"))
    end)

    it("stops after a bounded number of nonces when the resource asks for a new one each time", function()
      configure { dpop = true, dpop_rs_nonce = "rotate" }
      local conn <close> = code_flow()
      local ok, _, err = conn:list_tools()
      assert.is_nil(ok)
      assert.equal(401, err.status)
      local with_token = 0
      for _, r in ipairs(seen("/mcp")) do
        if given(r.token) then with_token = with_token + 1 end
      end
      assert.equal(1 + dpop.MAX_NONCE_RETRIES, with_token)
      assert.equal(1, #seen("/token"))
    end)

    it("refuses a Bearer token when a DPoP-bound one was asked for, and a server without ES256", function()
      configure { dpop = true, dpop_token_type = "Bearer" }
      local conn <close> = code_flow()
      local ok, message, err = conn:list_tools()
      assert.is_nil(ok)
      assert.equal("authorization_failed", err.kind)
      assert.truthy(message:find("not bound to the DPoP key", 1, true), message)
      configure {}
      local plain <close> = code_flow()
      ok, message, err = plain:list_tools()
      assert.is_nil(ok)
      assert.equal("authorization_failed", err.kind)
      assert.truthy(message:find("does not offer DPoP", 1, true), message)
      assert.equal(0, #seen("/token"))
      assert.equal(0, #seen("/authorize"))
    end)
  end)

  describe("the JWT bearer grant (workload identity)", function()
    it("presents the workload's assertion and uses the token", function()
      configure { assertion = "WORKLOAD-JWT" }
      local conn <close> = connect { grant = "jwt_bearer", client_id = "workload-1", assertion = "ref:assertion" }
      assert(conn:call_tool("echo", {}))
      local tokens = seen("/token")
      assert.equal(1, #tokens)
      assert.equal("urn:ietf:params:oauth:grant-type:jwt-bearer", tokens[1].grant_type)
      assert.equal("configured", tokens[1].form.assertion)
      assert.equal(base() .. "/mcp", tokens[1].form.resource)
    end)

    it("surfaces a refusal and never retries it nor tries another grant", function()
      configure { assertion = "SOMETHING-ELSE" }
      local conn <close> = connect { grant = "jwt_bearer", client_id = "workload-1", assertion = "ref:assertion" }
      local ok, message, err = conn:call_tool("echo", {})
      assert.is_nil(ok)
      assert.equal("authorization_failed", err.kind)
      assert.truthy(message:find("invalid_grant", 1, true), message)
      assert.is_nil(message:find("WORKLOAD-JWT", 1, true))
      local tokens = seen("/token")
      assert.equal(1, #tokens)
      assert.equal(0, #seen("/authorize"))
      assert.equal(0, #seen("/register"))
    end)
  end)

  describe("enterprise-managed authorization (cross_app_access)", function()
    it("exchanges the ID token for an ID-JAG at the identity provider, then presents it as a JWT bearer", function()
      configure { id_token = "USER-ID-TOKEN" }
      local conn <close> = connect { grant = "cross_app_access", client_id = "mcp-client", client_secret = "ref:secret",
        idp = { token_endpoint = base() .. "/idp/token", id_token = "ref:id_token", client_id = "idp-client" } }
      assert(conn:call_tool("echo", {}))
      local exchange = seen("/idp/token")
      assert.equal(1, #exchange)
      local form = exchange[1].form
      assert.equal("urn:ietf:params:oauth:grant-type:token-exchange", form.grant_type)
      assert.equal("urn:ietf:params:oauth:token-type:id-jag", form.requested_token_type)
      assert.equal("urn:ietf:params:oauth:token-type:id_token", form.subject_token_type)
      assert.equal("configured", form.subject_token)
      assert.equal(base(), form.audience)
      assert.equal(base() .. "/mcp", form.resource)
      assert.equal("idp-client", form.client_id)
      local tokens = seen("/token")
      assert.equal(1, #tokens)
      assert.equal("urn:ietf:params:oauth:grant-type:jwt-bearer", tokens[1].grant_type)
      assert.equal("id-jag", tokens[1].form.assertion)
      assert.equal(base(), tokens[1].form.jag.aud)
      assert.equal(base() .. "/mcp", tokens[1].form.jag.resource)
    end)
  end)
end)
