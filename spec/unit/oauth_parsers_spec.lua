-- The parsers and URL rules of the OAuth layer: the Bearer challenge, the
-- discovery orders, the resource check, the form and query codecs.
local challenge = require "mcpclient.oauth.challenge"
local discovery = require "mcpclient.oauth.discovery"
local fetch = require "mcpclient.oauth.fetch"

describe("the Bearer challenge (WWW-Authenticate)", function()
  it("reads scope, resource_metadata and error, quoted or not, any case of the names", function()
    local c = challenge.parse('Bearer Scope="a b", resource_metadata="https://x/y", error=insufficient_scope')
    assert.is_true(c.bearer)
    assert.equal("a b", c.params.scope)
    assert.equal("https://x/y", c.params.resource_metadata)
    assert.equal("insufficient_scope", c.params.error)
  end)

  it("unescapes quoted-pairs and keeps commas inside quotes", function()
    local c = challenge.parse([[Bearer error_description="a \"b\", c", scope="s"]])
    assert.equal('a "b", c', c.params.error_description)
    assert.equal("s", c.params.scope)
  end)

  it("reads only the Bearer challenge when several schemes share the header", function()
    local c = challenge.parse('Basic realm="r1", Bearer realm="r2", scope="x"')
    assert.equal("r2", c.params.realm)
    assert.equal("x", c.params.scope)
    assert.is_false(challenge.parse('Basic realm="r1"').bearer)
  end)

  it("is total: junk, nil and unterminated quotes give a table, values are capped", function()
    local texts = { "", "Bearer", 'Bearer scope="open', "=,=,=", "\0\1\2", ("Bearer a=" .. ("x"):rep(10000)) }
    for _, text in ipairs(texts) do
      local c = challenge.parse(text)
      assert.is_table(c.params)
      for _, v in pairs(c.params) do assert.is_true(#v <= 2048) end
    end
    assert.is_false(challenge.parse(nil).bearer)
  end)

  it("never raises on random bytes built from the header's own alphabet", function()
    local alphabet = { "Bearer", "Basic", " ", ",", "=", '"', "\\", "scope", "error", "a", "\0", "\255", "\t" }
    math.randomseed(15)
    for _ = 1, 3000 do
      local parts = {}
      for i = 1, math.random(0, 24) do parts[i] = alphabet[math.random(#alphabet)] end
      local ok, result = pcall(challenge.parse, table.concat(parts))
      assert.is_true(ok, tostring(result))
      assert.is_table(result.params)
    end
  end)

  it("splits scopes without repeats", function()
    assert.same({ "a", "b" }, challenge.scopes("  a b a  "))
    assert.same({}, challenge.scopes(nil))
  end)
end)

describe("discovery orders", function()
  it("tries the hinted, then the path-based, then the root protected resource metadata", function()
    assert.same({
      "https://h/meta", "https://h/.well-known/oauth-protected-resource/mcp/v1",
      "https://h/.well-known/oauth-protected-resource",
    }, discovery.resource_metadata_urls("https://h/mcp/v1/", "https://h/meta"))
    assert.same({ "https://h:8443/.well-known/oauth-protected-resource" },
      discovery.resource_metadata_urls("https://h:8443"))
  end)

  it("tries RFC 8414 then OpenID, inserting then appending a path, never the root for an issuer with one", function()
    assert.same({
      "https://as/.well-known/oauth-authorization-server/tenant1",
      "https://as/.well-known/openid-configuration/tenant1",
      "https://as/tenant1/.well-known/openid-configuration",
    }, discovery.authorization_metadata_urls("https://as/tenant1"))
    assert.same({ "https://as/.well-known/oauth-authorization-server", "https://as/.well-known/openid-configuration" },
      discovery.authorization_metadata_urls("https://as/"))
  end)

  it("falls back to the origin's /authorize, /token and /register for an older server", function()
    local m = discovery.fallback_metadata("http://127.0.0.1:9/mcp")
    assert.equal("http://127.0.0.1:9/token", m.token_endpoint)
    assert.equal("http://127.0.0.1:9/authorize", m.authorization_endpoint)
  end)
end)

describe("the URL rule for authorization parties", function()
  local ctx = { identifier = "srv" }
  it("takes https anywhere and http only on loopback", function()
    assert.is_table(fetch.target(ctx, "https://as.example.com/token"))
    assert.is_table(fetch.target(ctx, "http://127.0.0.1:8/token"))
    assert.is_table(fetch.target(ctx, "http://localhost:8/token"))
    assert.is_table(fetch.target(ctx, "http://[::1]:8/token"))
    local ok, message, err = fetch.target(ctx, "http://as.example.com/token")
    assert.is_nil(ok)
    assert.equal("authorization_failed", err.kind, message)
    assert.equal("srv", err.server)
  end)

  it("refuses other schemes, user information, fragments and non-strings", function()
    for _, url in ipairs { "file:///etc/passwd", "javascript:alert(1)", "https://u:p@as/x", "https://as/x#f", 42 } do
      local ok, _, err = fetch.target(ctx, url)
      assert.is_nil(ok, tostring(url))
      assert.equal("authorization_failed", err.kind)
    end
  end)
end)

describe("form and query codecs", function()
  it("encodes every reserved byte and skips absent values", function()
    assert.equal("a=1%202&c=%26%3D%2B%25", fetch.form { { "a", "1 2" }, { "b", nil }, { "c", "&=+%" } })
  end)

  it("reads a redirect's query, first value wins", function()
    local q = fetch.query("http://localhost/cb?code=a%2Fb&state=s+1&code=other#frag")
    assert.equal("a/b", q.code)
    assert.equal("s 1", q.state)
  end)
end)

describe("token endpoint authentication", function()
  local grants = require "mcpclient.oauth.grants"
  it("follows the registration, then what the client holds and the server lists", function()
    local basic_only = { token_endpoint_auth_methods_supported = { "client_secret_basic" } }
    local post_only = { token_endpoint_auth_methods_supported = { "client_secret_post" } }
    assert.equal("client_secret_post",
      grants.auth_method(basic_only, { client_secret = "s", auth_method = "client_secret_post" }))
    assert.equal("none", grants.auth_method(basic_only, { auth_method = "client_secret_basic" }))  -- no secret to send
    assert.equal("client_secret_basic", grants.auth_method(basic_only, { client_secret = "s" }))
    assert.equal("client_secret_post", grants.auth_method(post_only, { client_secret = "s" }))
    assert.equal("client_secret_basic", grants.auth_method({}, { client_secret = "s" }))
    assert.equal("private_key_jwt", grants.auth_method(basic_only, { private_key = "pem" }))
    assert.equal("none", grants.auth_method(basic_only, {}))
  end)
end)
