-- The OAuth provider over a scripted leg (no network): the scope rules, the
-- bounds on step-up, PKCE, registration, misuse, and what a failure carries.
local mcp = require "mcpclient"
local core = require "mcpclient.core"
local fetch = require "mcpclient.oauth.fetch"

local json = core.json
local BASE = "https://mcp.example.com"

-- A leg answering by path. `routes[path] = function(req, query) -> status, body, headers`.
local function scripted(routes)
  local leg = { sent = {}, authorizations = {} }
  function leg.resolve() return { "203.0.113.7" } end
  function leg.close() end
  function leg.send(_, req)
    local path = req.url:match("^https?://[^/]+([^?]*)")
    leg.sent[#leg.sent + 1] = path
    local route = routes[path]
    if not route then return { status = 404, headers = {}, body = "{}", duration_ms = 1 } end
    local status, body, headers = route(req, fetch.query(req.url))
    return { status = status, headers = headers or {}, body = type(body) == "table" and json.encode(body) or body or "",
      duration_ms = 1, truncated = (headers or {}).truncated == "yes", max_bytes = req.max_bytes }
  end
  return leg
end

local function form_of(req) return fetch.query("?" .. (req.secret_body or req.body or "")) end

-- A protected MCP endpoint that wants `needed` scopes; the authorization server grants what is asked.
local function world(opts)
  opts = opts or {}
  local granted = {}
  local routes = {}
  routes["/mcp"] = function(req)
    local token = req.secret_header and req.secret_header:match("^Authorization: Bearer (.+)$")
    if not token or not granted[token] then
      return 401, "{}", { ["www-authenticate"] = opts.challenge or
        'Bearer resource_metadata="' .. BASE .. '/.well-known/oauth-protected-resource/mcp"' }
    end
    if opts.forbid then return opts.forbid(req, granted[token]) end
    local msg = json.decode(req.body)
    if msg.id == nil then return 202, "" end
    local result = msg.method == "initialize"
      and { protocolVersion = "2025-11-25", capabilities = {}, serverInfo = { name = "s", version = "1" } }
      or { tools = json.array {} }
    return 200, { jsonrpc = "2.0", id = msg.id, result = result }, { ["content-type"] = "application/json" }
  end
  routes["/.well-known/oauth-protected-resource/mcp"] = function()
    return 200, { resource = BASE .. "/mcp", authorization_servers = { BASE }, scopes_supported = opts.prm_scopes }
  end
  routes["/.well-known/oauth-authorization-server"] = function()
    return 200, {
      issuer = BASE, authorization_endpoint = BASE .. "/authorize", token_endpoint = BASE .. "/token",
      registration_endpoint = BASE .. "/register", code_challenge_methods_supported = opts.pkce or { "S256" },
      scopes_supported = opts.as_scopes, token_endpoint_auth_methods_supported = opts.auth_methods or { "none" },
    }
  end
  routes["/register"] = function(req)
    opts.registered = json.decode(req.body)
    return 201, { client_id = "c1" }
  end
  local n = 0
  routes["/token"] = function(req)
    if opts.token_refusal then return 400, { error = "invalid_grant", error_description = "DESCRIPTION-TEXT" } end
    n = n + 1
    local token = "TOKEN-VALUE-" .. n
    granted[token] = form_of(req).scope or ""
    return 200, { access_token = token, token_type = "Bearer", expires_in = 3600 }
  end
  return routes, opts
end

local function connect(leg, oauth_options, extra)
  local asked = {}
  local oauth = {
    authorize = function(url, info)
      local q = fetch.query(url)
      asked[#asked + 1] = q
      return "the-code", info.state
    end,
  }
  for k, v in pairs(oauth_options or {}) do oauth[k] = v end
  local options = { url = BASE .. "/mcp", identifier = "srv", health = mcp.health.discard, transport = leg,
    oauth = oauth }
  for k, v in pairs(extra or {}) do options[k] = v end
  return mcp.connect(options), asked
end

describe("the OAuth provider", function()
  describe("scope selection", function()
    it("asks for the challenge's scope first", function()
      local routes = world { challenge = 'Bearer scope="from:header", resource_metadata="'
        .. BASE .. '/.well-known/oauth-protected-resource/mcp"', prm_scopes = { "from:prm" } }
      local conn, asked = connect(scripted(routes))
      assert(conn:list_tools())
      assert.equal("from:header", asked[1].scope)
    end)

    it("else every scope the resource lists; else none at all", function()
      local conn, asked = connect(scripted(world { prm_scopes = { "a", "b" } }))
      assert(conn:list_tools())
      assert.equal("a b", asked[1].scope)
      local conn2, asked2 = connect(scripted(world {}))
      assert(conn2:list_tools())
      assert.is_nil(asked2[1].scope)
    end)

    it("adds offline_access only when the host wants it and the server offers it", function()
      local offered = { prm_scopes = { "a" }, as_scopes = { "a", "offline_access" } }
      local c1, a1 = connect(scripted(world(offered)), { offline_access = true })
      assert(c1:list_tools())
      assert.equal("a offline_access", a1[1].scope)
      local c2, a2 = connect(scripted(world(offered)))
      assert(c2:list_tools())
      assert.equal("a", a2[1].scope)
      local c3, a3 = connect(scripted(world { prm_scopes = { "a" }, as_scopes = { "a" } }), { offline_access = true })
      assert(c3:list_tools())
      assert.equal("a", a3[1].scope)
    end)
  end)

  it("sends PKCE S256 and the resource, and registers with refresh_token among the grant types", function()
    local routes, opts = world {}
    local leg = scripted(routes)
    local conn, asked = connect(leg)
    assert(conn:list_tools())
    assert.equal("S256", asked[1].code_challenge_method)
    assert.equal(43, #asked[1].code_challenge)
    assert.equal(BASE .. "/mcp", asked[1].resource)
    assert.same({ "authorization_code", "refresh_token" }, opts.registered.grant_types)
    assert.equal("native", opts.registered.application_type)   -- the default redirect is on loopback
  end)

  it("registers as a native app for a loopback or private-use redirect, else as a web app", function()
    local function registered_as(redirect_uri)
      local routes, opts = world {}
      local conn = connect(scripted(routes), { redirect_uri = redirect_uri })
      assert(conn:list_tools())
      assert.equal(redirect_uri, opts.registered.redirect_uris[1])
      return opts.registered.application_type
    end
    assert.equal("native", registered_as("http://localhost:3000/callback"))
    assert.equal("native", registered_as("http://[::1]:8765/cb"))
    assert.equal("native", registered_as("com.example.app:/oauth"))
    assert.equal("web", registered_as("https://app.example.com/callback"))
    assert.equal("web", registered_as("http://127.0.0.1.example.com/cb"))
    assert.equal("web", registered_as("https://127.0.0.1@app.example.com/cb"))
  end)

  it("checks the issuer of the authorization response (RFC 9207)", function()
    local function run(iss, promised)
      local routes = world {}
      local metadata = routes["/.well-known/oauth-authorization-server"]
      routes["/.well-known/oauth-authorization-server"] = function(req)
        local status, body = metadata(req)
        body.authorization_response_iss_parameter_supported = promised
        return status, body
      end
      local conn = connect(scripted(routes), { authorize = function(_, info) return "c", info.state, iss end })
      return conn:list_tools()
    end
    assert.is_table(run(BASE, true))
    assert.is_table(run(nil, nil))
    local _, m1, e1 = run("https://evil.example.com", nil)
    assert.equal("authorization_failed", e1.kind, m1)
    local _, m2, e2 = run(nil, true)
    assert.equal("authorization_failed", e2.kind, m2)
  end)

  it("refuses an authorization server without PKCE S256 before asking the host", function()
    local conn, asked = connect(scripted(world { pkce = { "plain" } }))
    local ok, message, err = conn:list_tools()
    assert.is_nil(ok)
    assert.equal("authorization_failed", err.kind, message)
    assert.equal(0, #asked)
  end)

  it("steps up on 403 insufficient_scope, but never twice for the same challenge", function()
    local challenge = 'Bearer error="insufficient_scope", scope="admin", resource_metadata="'
      .. BASE .. '/.well-known/oauth-protected-resource/mcp"'
    local routes = world { forbid = function() return 403, "{}", { ["www-authenticate"] = challenge } end }
    local conn, asked = connect(scripted(routes))
    local ok, message, err = conn:list_tools()
    assert.is_nil(ok)
    assert.equal("http_status", err.kind, message)
    assert.equal(403, err.status)
    assert.equal(2, #asked)             -- the 401, then the 403 once
    assert.equal("admin", asked[2].scope)
  end)

  it("makes at most 3 authorization requests per operation, however the challenges change", function()
    local n = 0
    local routes = world { forbid = function()
      n = n + 1
      return 403, "{}", { ["www-authenticate"] = 'Bearer error="insufficient_scope", scope="s' .. n .. '"' }
    end }
    local conn, asked = connect(scripted(routes))
    assert.is_nil(conn:list_tools())
    assert.equal(3, #asked)
  end)

  it("reads metadata under the 2 MiB cap and fails when a document breaks it", function()
    local routes = world {}
    local caps = {}
    routes["/.well-known/oauth-protected-resource/mcp"] = function(req)
      caps[#caps + 1] = req.max_bytes
      return 200, "{", { truncated = "yes" }
    end
    local conn, asked = connect(scripted(routes))
    local ok, message, err = conn:list_tools()
    assert.is_nil(ok)
    assert.equal("authorization_failed", err.kind)
    assert.truthy(message:find("read cap", 1, true), message)
    assert.same({ 2 * 1024 * 1024 }, caps)
    assert.equal(0, #asked)
  end)

  it("leaves a 403 that is not insufficient_scope alone", function()
    local routes = world { forbid = function() return 403, "{}", { ["www-authenticate"] = 'Bearer error="x"' } end }
    local conn, asked = connect(scripted(routes))
    local ok, _, err = conn:list_tools()
    assert.is_nil(ok)
    assert.equal(403, err.status)
    assert.equal(1, #asked)
  end)

  it("reports a refused token request by its OAuth error code and description, never a token or a body", function()
    local conn = connect(scripted(world { token_refusal = true }))
    local ok, message, err = conn:list_tools()
    assert.is_nil(ok)
    assert.equal("authorization_failed", err.kind)
    assert.truthy(message:find("(invalid_grant: DESCRIPTION-TEXT)", 1, true), message)
    assert.is_nil(message:find("{", 1, true), message)
  end)

  it("sends the token only as the leg's secret header, never in a header list or a body", function()
    local leg = scripted(world {})
    local seen = {}
    local send = leg.send
    leg.send = function(self, req)
      local body = req.body or req.secret_body or ""
      seen[#seen + 1] = table.concat(req.headers or {}, "\n") .. "\n" .. body .. "\n" .. req.url
      return send(self, req)
    end
    local conn = connect(leg)
    assert(conn:list_tools())
    for _, text in ipairs(seen) do assert.is_nil(text:find("TOKEN-VALUE", 1, true)) end
  end)

  describe("token requests travel as the leg's secret body, never a plain one", function()
    -- A spy on the leg: every request to the token endpoint, as the leg got it.
    local function spied(routes)
      local leg, token_requests = scripted(routes), {}
      local send = leg.send
      leg.send = function(self, req)
        if req.url:find("/token", 1, true) then token_requests[#token_requests + 1] = req end
        return send(self, req)
      end
      return leg, token_requests
    end

    it("for the authorization code and its verifier", function()
      local leg, token_requests = spied(world {})
      local conn = connect(leg)
      assert(conn:list_tools())
      assert.equal(1, #token_requests)
      local req = token_requests[1]
      assert.is_nil(req.body)
      local form = form_of(req)
      assert.equal("authorization_code", form.grant_type)
      assert.equal("the-code", form.code)
      assert.equal(43, #form.code_verifier)
    end)

    it("for a client secret sent as client_secret_post", function()
      local leg, token_requests = spied(world { auth_methods = { "client_secret_post" } })
      local conn = connect(leg, { grant = "client_credentials", client_id = "c9", client_secret = "vault:cs" },
        { resolver = function() return "CLIENT-SECRET-VALUE" end })
      assert(conn:list_tools())
      assert.equal(1, #token_requests)
      local req = token_requests[1]
      assert.is_nil(req.body)
      assert.is_nil(req.secret_header)
      assert.equal("CLIENT-SECRET-VALUE", form_of(req).client_secret)
      assert.equal("client_credentials", form_of(req).grant_type)
    end)
  end)

  describe("misuse raises at connect", function()
    local function connect_with(oauth, extra)
      local options = { url = BASE .. "/mcp", identifier = "srv", health = mcp.health.discard, oauth = oauth }
      for k, v in pairs(extra or {}) do options[k] = v end
      return function() mcp.connect(options) end
    end
    it("for unknown keys, wrong types and impossible combinations", function()
      assert.has_error(connect_with { colour = "red" }, "oauth: unknown option \"colour\"")
      assert.has_error(connect_with { authorize = "yes" })
      assert.has_error(connect_with { grant = "password" })
      assert.has_error(connect_with { grant = "client_credentials" })
      assert.has_error(connect_with { grant = "cross_app_access", client_id = "c" })
      assert.has_error(connect_with { signing_algorithm = "HS256" })
      assert.has_error(connect_with { client_metadata_url = "http://example.com/cimd.json" })
      assert.has_error(connect_with({}, { auth = { credential = "env:X" } }))
    end)
  end)

  describe("a grant is bound to its resource and issuer", function()
    -- A second authorization server at BASE/as2; `flip` makes the resource name it and refuse every
    -- token issued before.
    local function two_servers()
      local routes, opts = world {}
      local as2 = BASE .. "/as2"
      local prm = routes["/.well-known/oauth-protected-resource/mcp"]
      local mcp_route = routes["/mcp"]
      local revoked, issued2 = {}, {}
      local state = { flipped = false, registered2 = 0, refreshes = 0 }
      routes["/.well-known/oauth-protected-resource/mcp"] = function(req)
        if not state.flipped then return prm(req) end
        return 200, { resource = BASE .. "/mcp", authorization_servers = { as2 } }
      end
      routes["/.well-known/oauth-authorization-server/as2"] = function()
        return 200, { issuer = as2, authorization_endpoint = as2 .. "/authorize", token_endpoint = as2 .. "/token",
          registration_endpoint = as2 .. "/register", code_challenge_methods_supported = { "S256" },
          token_endpoint_auth_methods_supported = { "none" } }
      end
      routes["/as2/register"] = function()
        state.registered2 = state.registered2 + 1
        return 201, { client_id = "c2" }
      end
      routes["/as2/token"] = function(req)
        local token = "AS2-TOKEN-" .. (#issued2 + 1)
        issued2[token] = true
        state.form2 = form_of(req)
        return 200, { access_token = token, token_type = "Bearer", expires_in = 3600 }
      end
      local token1 = routes["/token"]
      routes["/token"] = function(req)
        if form_of(req).grant_type == "refresh_token" then state.refreshes = state.refreshes + 1 end
        local status, body = token1(req)
        if type(body) == "table" then body.refresh_token = "R1" end
        return status, body
      end
      routes["/mcp"] = function(req)
        local token = req.secret_header and req.secret_header:match("^Authorization: Bearer (.+)$")
        if state.flipped and token and not issued2[token] then revoked[token] = true end
        if token and revoked[token] then
          return 401, "{}", { ["www-authenticate"] = 'Bearer error="invalid_token", resource_metadata="'
            .. BASE .. '/.well-known/oauth-protected-resource/mcp"' }
        end
        if token and issued2[token] then
          local msg = json.decode(req.body)
          if msg.id == nil then return 202, "" end
          return 200, { jsonrpc = "2.0", id = msg.id, result = { tools = json.array {} } },
            { ["content-type"] = "application/json" }
        end
        return mcp_route(req)
      end
      return routes, opts, state
    end

    local function memory_hook()
      local saved = {}
      return { saved = saved, load = function() return saved end,
        save = function(record) table.insert(saved, 1, record) end }
    end

    it("re-registers at a new authorization server and never takes the old grant or client there", function()
      local routes, _, state = two_servers()
      local hook = memory_hook()
      local leg = scripted(routes)
      local conn, asked = connect(leg, { grants = hook })
      assert(conn:list_tools())
      assert.equal("c1", asked[1].client_id)
      assert.equal(BASE, hook.saved[1].issuer)
      state.flipped = true
      assert(conn:list_tools())
      assert.equal(0, state.refreshes)            -- the old refresh token went nowhere
      assert.equal(1, state.registered2)          -- a new client at the new server
      assert.equal("c2", asked[2].client_id)      -- never the old server's client id
      assert.equal("c2", state.form2.client_id)
      assert.equal(BASE .. "/as2", hook.saved[1].issuer)
    end)

    it("refuses to show a pre-registered client to the new authorization server", function()
      local routes, _, state = two_servers()
      local leg = scripted(routes)
      local conn, asked = connect(leg, { client_id = "preset" })
      assert(conn:list_tools())
      assert.equal("preset", asked[1].client_id)
      state.flipped = true
      local ok, message, err = conn:list_tools()
      assert.is_nil(ok)
      assert.equal("authorization_failed", err.kind, message)
      assert.truthy(err.detail:find("another authorization server", 1, true), err.detail)
      assert.equal(1, #asked)
      assert.equal(0, state.registered2)
      assert.is_nil(state.form2)
      assert.equal(0, state.refreshes)
    end)

    it("follows a move that happens inside one operation: the refused token's challenge is a new one", function()
      -- The first 401 (no token) and the 401 to the token the old server issued carry the same
      -- scope and metadata URL; the second must still lead to the new server, once.
      local routes, _, state = two_servers()
      local mcp_route = routes["/mcp"]
      routes["/mcp"] = function(req)
        local msg = json.decode(req.body)
        if msg.method == "tools/list" and not state.flipped then state.flipped = true end
        return mcp_route(req)
      end
      local conn, asked = connect(scripted(routes), {}, { protocol = "2025-11-25" })
      assert(conn:list_tools())
      assert.equal("c1", asked[1].client_id)
      assert.equal(1, state.registered2)
      assert.equal("c2", asked[2].client_id)
      assert.equal(2, #asked)
    end)

    it("never restores a grant for another resource", function()
      local hook = memory_hook()
      hook.saved[1] = { server = "srv", issuer = BASE, resource = "https://elsewhere.example.com/mcp",
        token_endpoint = BASE .. "/token", access_token = "FOREIGN-TOKEN", refresh_token = "FOREIGN-REFRESH" }
      local leg = scripted(world {})
      local headers = {}
      local send = leg.send
      leg.send = function(self, req)
        headers[#headers + 1] = req.secret_header or ""
        return send(self, req)
      end
      -- a hook may answer one record instead of a list
      local conn = connect(leg, { grants = { load = function() return hook.saved[1] end, save = hook.save } })
      assert(conn:list_tools())
      for _, h in ipairs(headers) do assert.is_nil(h:find("FOREIGN", 1, true), h) end
    end)

    for _, case in ipairs {
      { name = "raises", load = function() error("disk on fire") end },
      { name = "says it failed", load = function() return nil, "disk on fire" end },
    } do
      it("fails with kind store when the grants hook " .. case.name .. ", never as \"no grant\"", function()
        local leg = scripted(world {})
        local conn = connect(leg, { grants = { load = case.load, save = function() end } })
        local ok, message, err = conn:list_tools()
        assert.is_nil(ok)
        assert.equal("store", err.kind, message)
        assert.truthy(message:find("disk on fire", 1, true), message)
        assert.equal(0, #leg.sent)
      end)
    end

    for _, case in ipairs {
      { issuer = BASE .. "/oauth", ok = true },          -- the 2025-03-26 shape: a path on the origin
      { issuer = "https://evil.example.com", ok = false },
      { issuer = "https://mcp.example.com:8443", ok = false },
      { issuer = nil, ok = false },
    } do
      it("without resource metadata, takes origin metadata whose issuer is " .. tostring(case.issuer)
        .. (case.ok and "" or " never"), function()
        local routes = world { challenge = "Bearer" }
        routes["/.well-known/oauth-protected-resource/mcp"] = nil
        local metadata = routes["/.well-known/oauth-authorization-server"]
        routes["/.well-known/oauth-authorization-server"] = function(req)
          local status, body = metadata(req)
          body.issuer = case.issuer
          return status, body
        end
        local leg = scripted(routes)
        local conn, asked = connect(leg)
        local ok, message, err = conn:list_tools()
        if case.ok then
          assert.truthy(ok, message)
        else
          assert.is_nil(ok)
          assert.equal("authorization_failed", err.kind, message)
          assert.equal(0, #asked)
          for _, path in ipairs(leg.sent) do
            assert.is_nil(path:find("/register", 1, true))
            assert.is_nil(path:find("/token", 1, true))
          end
        end
      end)
    end

    it("fails with kind store when a token cannot be saved", function()
      local conn = connect(scripted(world {}), { grants = { load = function() end,
        save = function() return nil, "read-only database" end } })
      local ok, message, err = conn:list_tools()
      assert.is_nil(ok)
      assert.equal("store", err.kind, message)
    end)
  end)
end)
