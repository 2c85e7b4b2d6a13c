-- core.crypto (libcrypto): digests, randomness, base64, and JWS signatures
-- that an independent verifier (node's crypto) accepts.
local core = require "mcpclient.core"
local jwt = require "mcpclient.oauth.jwt"
local read_all = require("support.shell").read_all

local crypto = core.crypto

local function sh(command)
  local ok = os.execute(command .. " >/dev/null 2>&1")
  assert(ok == true or ok == 0, command)
end

-- Verify a compact JWS with node (P-256 signatures as r||s, as JWS has them).
local function node_verifies(token, public_pem_path, alg)
  local input, signature = token:match("^([^.]+%.[^.]+)%.([^.]+)$")
  local script = os.tmpname()
  local f = assert(io.open(script, "w"))
  f:write(string.format([[
const c = require('crypto'); const fs = require('fs');
const key = c.createPublicKey(fs.readFileSync(%q));
const ok = c.verify('sha256', Buffer.from(%q), { key, dsaEncoding: 'ieee-p1363' }, Buffer.from(%q, 'base64url'));
process.stdout.write(ok ? 'valid' : 'invalid');
]], public_pem_path, input, signature))
  f:close()
  local out = os.tmpname()
  os.execute(string.format("node %s > %s 2>&1", script, out))
  local verdict = read_all(out)
  os.remove(script); os.remove(out)
  return verdict == "valid", verdict .. " (" .. alg .. ")"
end

describe("core.crypto", function()
  it("hashes with SHA-256 (RFC 7636 appendix B vector)", function()
    assert.equal("E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM",
      crypto.base64url(crypto.sha256("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk")))
  end)

  it("encodes base64 with padding and base64url without", function()
    assert.equal("", crypto.base64(""))
    assert.equal("Zg==", crypto.base64("f"))
    assert.equal("Zm8=", crypto.base64("fo"))
    assert.equal("Zm9vYmFy", crypto.base64("foobar"))
    assert.equal("-_8", crypto.base64url("\251\255"))
    assert.equal("Zg", crypto.base64url("f"))
  end)

  it("draws random bytes that differ, within 1..1024", function()
    local a, b = crypto.random_bytes(32), crypto.random_bytes(32)
    assert.equal(32, #a)
    assert.not_equal(a, b)
    assert.has_error(function() crypto.random_bytes(0) end)
    assert.has_error(function() crypto.random_bytes(4096) end)
  end)

  describe("JWS signatures", function()
    local dir
    setup(function()
      dir = os.tmpname()
      os.remove(dir)
      sh("mkdir -p " .. dir)
      sh(string.format("openssl ecparam -name prime256v1 -genkey -noout | openssl pkcs8 -topk8 -nocrypt -out %s/ec.pem",
        dir))
      sh(string.format("openssl pkey -in %s/ec.pem -pubout -out %s/ec.pub", dir, dir))
      sh(string.format("openssl genrsa -out %s/rsa.pem 2048", dir))
      sh(string.format("openssl pkey -in %s/rsa.pem -pubout -out %s/rsa.pub", dir, dir))
      sh(string.format("openssl ecparam -name secp384r1 -genkey -noout -out %s/p384.pem", dir))
    end)
    teardown(function() os.execute("rm -rf " .. dir) end)

    for _, case in ipairs { { "ES256", "ec" }, { "RS256", "rsa" } } do
      it("signs " .. case[1] .. " so that another implementation verifies it", function()
        local pem = read_all(dir .. "/" .. case[2] .. ".pem")
        local token = assert(jwt.sign(case[1], pem, jwt.client_assertion_claims("cid", "https://as", 1700000000)))
        assert.is_true(node_verifies(token, dir .. "/" .. case[2] .. ".pub", case[1]))
      end)
    end

    it("refuses a key of the wrong type or curve, and text that is no key, without raising", function()
      assert.is_nil(crypto.jws_sign("RS256", read_all(dir .. "/ec.pem"), "x"))
      assert.is_nil(crypto.jws_sign("ES256", read_all(dir .. "/rsa.pem"), "x"))
      assert.is_nil(crypto.jws_sign("ES256", read_all(dir .. "/p384.pem"), "x"))
      local none, why = crypto.jws_sign("ES256", "not a key", "x")
      assert.is_nil(none)
      assert.is_string(why)
      assert.has_error(function() crypto.jws_sign("HS256", "k", "x") end)
    end)
  end)

  it("makes client assertion claims: the client as issuer and subject, short-lived, unique", function()
    local a = jwt.client_assertion_claims("cid", "https://as", 1000)
    local b = jwt.client_assertion_claims("cid", "https://as", 1000)
    assert.equal("cid", a.iss)
    assert.equal("cid", a.sub)
    assert.equal("https://as", a.aud)
    assert.equal(1000 + jwt.LIFETIME, a.exp)
    assert.not_equal(a.jti, b.jti)
  end)
end)

describe("DPoP proofs", function()
  local dpop = require "mcpclient.oauth.dpop"
  local json = core.json

  local ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
  local function unbase64url(text)
    local out, value, bits = {}, 0, 0
    for c in text:gmatch(".") do
      value, bits = (value << 6) | (ALPHABET:find(c, 1, true) - 1), bits + 6
      if bits >= 8 then
        bits = bits - 8
        out[#out + 1] = string.char((value >> bits) & 255)
        value = value & ((1 << bits) - 1)
      end
    end
    return table.concat(out)
  end

  -- The header and claims of a `DPoP: <proof>` line.
  local function decode(line)
    local head, claims = line:match("^DPoP: ([%w_-]+)%.([%w_-]+)%.[%w_-]+$")
    return json.decode(unbase64url(head)), json.decode(unbase64url(claims))
  end

  it("names method, URL without query or fragment, time, a fresh jti, the token's hash and the nonce", function()
    local key = assert(dpop.new())
    local head, claims = decode(assert(key:proof("POST", "https://as.example.com/token?x=1#f", nil, 1000.7)))
    assert.equal("dpop+jwt", head.typ)
    assert.equal("ES256", head.alg)
    assert.equal("EC", head.jwk.kty)
    assert.is_nil(head.jwk.d)
    assert.equal("POST", claims.htm)
    assert.equal("https://as.example.com/token", claims.htu)
    assert.equal(1000, claims.iat)
    assert.is_nil(claims.ath)
    assert.is_nil(claims.nonce)
    local _, again = decode(assert(key:proof("POST", "https://as.example.com/token", "AT", 1000)))
    assert.are_not.equal(claims.jti, again.jti)
    assert.equal(crypto.base64url(crypto.sha256("AT")), again.ath)
    assert.is_true(key:take_nonce("https://as.example.com/token", "n-1"))
    local _, with_nonce = decode(assert(key:proof("GET", "https://AS.example.com/other", nil, 1000)))
    assert.equal("n-1", with_nonce.nonce)    -- the same server (origin), another path
    local _, elsewhere = decode(assert(key:proof("GET", "https://rs.example.com/mcp", nil, 1000)))
    assert.is_nil(elsewhere.nonce)           -- another server's nonce is its own
    key:close()
  end)

  it("takes only a new, well-formed nonce", function()
    local key = assert(dpop.new())
    local url = "https://rs.example.com/mcp"
    assert.is_true(key:take_nonce(url, "abc"))
    assert.is_false(key:take_nonce(url, "abc"))              -- the one already sent: no loop
    assert.is_false(key:take_nonce(url, nil))
    assert.is_false(key:take_nonce(url, ""))
    assert.is_false(key:take_nonce(url, 'a"b'))
    assert.is_false(key:take_nonce(url, "a\\b"))
    assert.is_false(key:take_nonce(url, "a b"))
    assert.is_false(key:take_nonce(url, "a\r\nX-Injected: 1"))
    assert.is_false(key:take_nonce(url, string.rep("n", dpop.MAX_NONCE_BYTES + 1)))
    assert.is_true(key:take_nonce(url, "abd"))
    key:close()
  end)
end)
