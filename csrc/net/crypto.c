/*
** crypto.c: the few primitives authorization needs, from libcrypto (OpenSSL,
** which libcurl already links): SHA-256 for PKCE, random bytes for verifiers
** and state, base64 / base64url, JWS signatures (ES256, RS256) for client
** assertions, and the ephemeral P-256 key that signs DPoP proofs (its private
** half never leaves C memory). Misuse (wrong argument types, an unknown algorithm) raises; a key
** that does not load or a signature that cannot be made returns nil, reason.
*/
#include <string.h>

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/bio.h>
#include <openssl/ecdsa.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>

#include "core.h"

#define MAX_RANDOM_BYTES 1024

/*
** sha256(data) -> the 32-byte digest (raw).
*/
static int l_sha256(lua_State *L) {
  size_t n;
  const char *data = luaL_checklstring(L, 1, &n);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (!EVP_Digest(data, n, digest, &len, EVP_sha256(), NULL))
    return luaL_error(L, "sha256: libcrypto failed");
  lua_pushlstring(L, (const char *)digest, len);
  return 1;
}

/*
** random_bytes(n) -> n bytes from the CSPRNG; raises if it has no entropy,
** since a guessable verifier or state would defeat PKCE and CSRF protection.
*/
static int l_random_bytes(lua_State *L) {
  lua_Integer n = luaL_checkinteger(L, 1);
  unsigned char buf[MAX_RANDOM_BYTES];
  luaL_argcheck(L, n >= 1 && n <= MAX_RANDOM_BYTES, 1, "1 to 1024 bytes");
  if (RAND_bytes(buf, (int)n) != 1) return luaL_error(L, "random_bytes: the random generator failed");
  lua_pushlstring(L, (const char *)buf, (size_t)n);
  OPENSSL_cleanse(buf, sizeof buf);
  return 1;
}

/*
** The base64 alphabet, standard or URL-safe; url-safe output has no padding
** (RFC 7515 and RFC 7636 both want it that way).
*/
static void push_base64(lua_State *L, const unsigned char *in, size_t n, int url) {
  static const char std[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  static const char safe[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  const char *a = url ? safe : std;
  luaL_Buffer b;
  size_t i;
  luaL_buffinit(L, &b);
  for (i = 0; i + 2 < n; i += 3) {
    unsigned long v = ((unsigned long)in[i] << 16) | ((unsigned long)in[i + 1] << 8) | in[i + 2];
    luaL_addchar(&b, a[(v >> 18) & 63]);
    luaL_addchar(&b, a[(v >> 12) & 63]);
    luaL_addchar(&b, a[(v >> 6) & 63]);
    luaL_addchar(&b, a[v & 63]);
  }
  if (n - i == 1) {
    unsigned long v = (unsigned long)in[i] << 16;
    luaL_addchar(&b, a[(v >> 18) & 63]);
    luaL_addchar(&b, a[(v >> 12) & 63]);
    if (!url) luaL_addstring(&b, "==");
  } else if (n - i == 2) {
    unsigned long v = ((unsigned long)in[i] << 16) | ((unsigned long)in[i + 1] << 8);
    luaL_addchar(&b, a[(v >> 18) & 63]);
    luaL_addchar(&b, a[(v >> 12) & 63]);
    luaL_addchar(&b, a[(v >> 6) & 63]);
    if (!url) luaL_addchar(&b, '=');
  }
  luaL_pushresult(&b);
}

/*
** base64(data) -> standard base64 with padding (HTTP Basic credentials).
*/
static int l_base64(lua_State *L) {
  size_t n;
  const char *data = luaL_checklstring(L, 1, &n);
  push_base64(L, (const unsigned char *)data, n, 0);
  return 1;
}

/*
** base64url(data) -> URL-safe base64 without padding (PKCE, JWS).
*/
static int l_base64url(lua_State *L) {
  size_t n;
  const char *data = luaL_checklstring(L, 1, &n);
  push_base64(L, (const unsigned char *)data, n, 1);
  return 1;
}

/*
** The passphrase callback: there is none, so an encrypted key fails to load
** instead of libcrypto prompting on the terminal.
*/
static int no_passphrase(char *buf, int size, int rwflag, void *ud) {
  (void)buf;
  (void)size;
  (void)rwflag;
  (void)ud;
  return 0;
}

/*
** Load a PEM private key (PKCS#8 or traditional) from memory; NULL if it
** does not parse. No passphrase: an encrypted key is refused, never prompted.
*/
static EVP_PKEY *load_key(const char *pem, size_t n) {
  BIO *bio = BIO_new_mem_buf(pem, (int)n);
  EVP_PKEY *key;
  if (!bio) return NULL;
  key = PEM_read_bio_PrivateKey(bio, NULL, no_passphrase, NULL);
  BIO_free(bio);
  return key;
}

/*
** An ECDSA signature comes out of libcrypto DER-encoded; JWS (RFC 7518 3.4)
** wants the two integers as fixed-width big-endian halves, r || s.
*/
static int der_to_raw(const unsigned char *der, size_t n, unsigned char out[64]) {
  const unsigned char *p = der;
  ECDSA_SIG *sig = d2i_ECDSA_SIG(NULL, &p, (long)n);
  const BIGNUM *r, *s;
  int ok;
  if (!sig) return 0;
  ECDSA_SIG_get0(sig, &r, &s);
  ok = BN_bn2binpad(r, out, 32) == 32 && BN_bn2binpad(s, out + 32, 32) == 32;
  ECDSA_SIG_free(sig);
  return ok;
}

/*
** Sign `input` with SHA-256 and `key`; the DER or PKCS#1 signature is left
** in a fresh buffer the caller frees, or NULL on failure.
*/
static unsigned char *sign_sha256(EVP_PKEY *key, const char *input, size_t n, size_t *len) {
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  unsigned char *sig = NULL;
  if (!ctx) return NULL;
  if (EVP_DigestSignInit(ctx, NULL, EVP_sha256(), NULL, key) == 1 &&
      EVP_DigestSign(ctx, NULL, len, (const unsigned char *)input, n) == 1) {
    sig = OPENSSL_malloc(*len);
    if (sig && EVP_DigestSign(ctx, sig, len, (const unsigned char *)input, n) != 1) {
      OPENSSL_free(sig);
      sig = NULL;
    }
  }
  EVP_MD_CTX_free(ctx);
  return sig;
}

/*
** jws_sign(alg, pem, signing_input) -> the raw JWS signature bytes, or
** nil, reason. alg is "ES256" (a P-256 key) or "RS256" (an RSA key).
*/
static int l_jws_sign(lua_State *L) {
  const char *alg = luaL_checkstring(L, 1);
  size_t pem_n, in_n, sig_n = 0;
  const char *pem = luaL_checklstring(L, 2, &pem_n);
  const char *input = luaL_checklstring(L, 3, &in_n);
  int es = strcmp(alg, "ES256") == 0, want;
  EVP_PKEY *key;
  unsigned char *sig, raw[64];
  luaL_argcheck(L, es || strcmp(alg, "RS256") == 0, 1, "ES256 or RS256");
  key = load_key(pem, pem_n);
  if (!key) {
    lua_pushnil(L);
    lua_pushliteral(L, "the private key is not a PEM key without a passphrase");
    return 2;
  }
  want = es ? EVP_PKEY_EC : EVP_PKEY_RSA;
  if (EVP_PKEY_base_id(key) != want || (es && EVP_PKEY_bits(key) != 256)) {
    EVP_PKEY_free(key);
    lua_pushnil(L);
    lua_pushstring(L, es ? "ES256 needs a P-256 key" : "RS256 needs an RSA key");
    return 2;
  }
  sig = sign_sha256(key, input, in_n, &sig_n);
  EVP_PKEY_free(key);
  if (!sig) {
    lua_pushnil(L);
    lua_pushliteral(L, "the signature could not be made");
    return 2;
  }
  if (es) {
    int ok = der_to_raw(sig, sig_n, raw);
    OPENSSL_free(sig);
    if (!ok) {
      lua_pushnil(L);
      lua_pushliteral(L, "the signature could not be converted");
      return 2;
    }
    lua_pushlstring(L, (const char *)raw, sizeof raw);
    return 1;
  }
  lua_pushlstring(L, (const char *)sig, sig_n);
  OPENSSL_free(sig);
  return 1;
}

#define EC_KEY_MT "mcpclient.ec_key"

typedef struct {
  EVP_PKEY *key; /* NULL once closed */
} EcKey;

/*
** The key userdata at `idx`, still open; raises on a closed one (misuse).
*/
static EcKey *open_key(lua_State *L, int idx) {
  EcKey *k = luaL_checkudata(L, idx, EC_KEY_MT);
  if (k->key == NULL) luaL_error(L, "ec_key: the key is closed");
  return k;
}

/*
** ec_key() -> a fresh P-256 key pair held in C memory (a proof-of-possession
** key lives as long as the connection that made it and is never written out),
** or nil, reason when libcrypto cannot make one.
*/
static int l_ec_key(lua_State *L) {
  EcKey *k = lua_newuserdatauv(L, sizeof *k, 0);
  k->key = NULL;
  luaL_setmetatable(L, EC_KEY_MT);
  k->key = EVP_EC_gen("P-256");
  if (k->key == NULL) {
    lua_pushnil(L);
    lua_pushliteral(L, "a P-256 key could not be made");
    return 2;
  }
  return 1;
}

/*
** key:public() -> x, y: the public point's two 32-byte big-endian
** coordinates, what a JWK (RFC 7518 6.2.1) carries base64url-encoded.
*/
static int l_ec_key_public(lua_State *L) {
  EcKey *k = open_key(L, 1);
  BIGNUM *x = NULL, *y = NULL;
  unsigned char xb[32], yb[32];
  int ok = EVP_PKEY_get_bn_param(k->key, OSSL_PKEY_PARAM_EC_PUB_X, &x) == 1 &&
           EVP_PKEY_get_bn_param(k->key, OSSL_PKEY_PARAM_EC_PUB_Y, &y) == 1 &&
           BN_bn2binpad(x, xb, 32) == 32 && BN_bn2binpad(y, yb, 32) == 32;
  BN_free(x);
  BN_free(y);
  if (!ok) return luaL_error(L, "ec_key: the public point could not be read");
  lua_pushlstring(L, (const char *)xb, 32);
  lua_pushlstring(L, (const char *)yb, 32);
  return 2;
}

/*
** key:sign(signing_input) -> the raw ES256 signature (r || s, 64 bytes), or
** nil, reason.
*/
static int l_ec_key_sign(lua_State *L) {
  EcKey *k = open_key(L, 1);
  size_t in_n, sig_n = 0;
  const char *input = luaL_checklstring(L, 2, &in_n);
  unsigned char raw[64];
  unsigned char *sig = sign_sha256(k->key, input, in_n, &sig_n);
  int ok = sig != NULL && der_to_raw(sig, sig_n, raw);
  OPENSSL_free(sig);
  if (!ok) {
    lua_pushnil(L);
    lua_pushliteral(L, "the signature could not be made");
    return 2;
  }
  lua_pushlstring(L, (const char *)raw, sizeof raw);
  return 1;
}

/*
** key:close() (also __gc and __close): frees the key; idempotent.
*/
static int l_ec_key_close(lua_State *L) {
  EcKey *k = luaL_checkudata(L, 1, EC_KEY_MT);
  if (k->key != NULL) {
    EVP_PKEY_free(k->key);
    k->key = NULL;
  }
  return 0;
}

/*
** Adds core.crypto = { sha256, random_bytes, base64, base64url, jws_sign,
** ec_key }, and the key's metatable.
*/
void mcp_register_crypto(lua_State *L) {
  static const luaL_Reg fns[] = {
    {"sha256", l_sha256},
    {"random_bytes", l_random_bytes},
    {"base64", l_base64},
    {"base64url", l_base64url},
    {"jws_sign", l_jws_sign},
    {"ec_key", l_ec_key},
    {NULL, NULL},
  };
  static const luaL_Reg methods[] = {
    {"public", l_ec_key_public},
    {"sign", l_ec_key_sign},
    {"close", l_ec_key_close},
    {NULL, NULL},
  };
  if (luaL_newmetatable(L, EC_KEY_MT)) {
    luaL_newlib(L, methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, l_ec_key_close);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, l_ec_key_close);
    lua_setfield(L, -2, "__close");
  }
  lua_pop(L, 1);
  luaL_newlib(L, fns);
  lua_setfield(L, -2, "crypto");
}
