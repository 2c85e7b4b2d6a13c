/*
** http_leg.c: the HTTP leg (one exchange: no redirects, TLS verified, the read
** cap, millisecond timeouts, a polled cancel hook, the credential header and
** a secret body copied in at send time and wiped after). Names are resolved
** by the host gate (address.c), which pins what it allowed. This file is the
** leg object and its Lua API: core.http_leg, reading and checking the
** request table, configuring the easy handle, the driving loop, the result,
** and the registration of http_leg and http_pool. It uses the buffers
** (http_buffer.c), the header lines (http_headers.c), the pools
** (http_pool.c) and the multi handle (http_multi.c); none of them calls back
** into it.
**
** A leg owns one libcurl easy handle, in the pool (a libcurl share handle)
** it dials through; the engine's one multi handle drives it, so many
** exchanges can be in flight at once. We drive the multi handle ourselves,
** which is what lets Lua run (the cancel hook, the stream consumer) between
** libcurl calls instead of inside a libcurl callback: a Lua error can never
** longjmp through libcurl. libcurl's callbacks (on_prereq here, the others in
** the files above) only touch C buffers owned by the leg userdata, so a raise
** at any point leaves nothing unowned (close/__gc frees it all).
**
** Two ways to run an exchange share that engine: leg:send(req) blocks until
** it ends (polling the hooks under lua_pcall); leg:start(req), leg:pump(),
** core.engine_step(ms) and leg:finish(how) let a Lua scheduler run many
** exchanges from coroutines, each waiting without blocking the others.
*/
#include <limits.h>
#include <stdio.h>

#include "http.h"

#define AS_NAME(id, name) {#name, sizeof(#name) - 1},
static const struct {
  const char *name;
  size_t len;
} field_names[F_COUNT] = {REQ_FIELDS(AS_NAME)};
#undef AS_NAME

/* ==================================================================== */
/* libcurl callbacks: C buffers only, never Lua                         */
/* ==================================================================== */

/*
** Called each time libcurl is about to send the request on a connection.
** libcurl resends a request by itself when a reused connection dies before
** any answer arrives (up to five times) — but the server may have read the
** request and acted on it before closing. Unless the send says it is
** idempotent, a request is sent at most once per exchange: a second attempt
** aborts the transfer, reported as "interrupted".
*/
static int on_prereq(void *ud, char *primary_ip, char *local_ip, int primary_port, int local_port) {
  Leg *leg = ud;
  (void)primary_ip, (void)local_ip, (void)primary_port, (void)local_port;
  return ++leg->attempts > 1 && !leg->idempotent ? CURL_PREREQFUNC_ABORT : CURL_PREREQFUNC_OK;
}

/* ==================================================================== */
/* Leg lifetime                                                         */
/* ==================================================================== */

/*
** Release everything. Safe on a half-built leg, on a closed one, and in the
** middle of a send (a hook may close its own leg): the handle is taken out
** of the multi first, and the send loop notices easy == NULL.
*/
static void leg_release(Leg *leg) {
  if (leg->easy != NULL && leg->multi != NULL) {
    curl_multi_remove_handle(leg->multi, leg->easy);
    leg->driver->handles--;
  }
  leg->multi = NULL;
  mcp_http_drop_headers(leg);
  mcp_http_free_header_list(leg);
  if (leg->easy != NULL) curl_easy_cleanup(leg->easy); /* leaves the pool's share too */
  if (leg->easy != NULL && leg->pool != NULL && leg->pool->closing) mcp_http_pool_release(leg->pool);
  if (leg->parsed != NULL) curl_url_cleanup(leg->parsed);
  leg->easy = NULL;
  leg->parsed = NULL;
  leg->pool = NULL;
  leg->started = 0;
  free(leg->default_cainfo);
  leg->default_cainfo = NULL;
  free(leg->checked_url);
  free(leg->checked_pin);
  leg->checked_url = leg->checked_pin = NULL;
  mcp_http_buf_free(&leg->body);
  mcp_http_buf_free(&leg->stream);
  mcp_http_buf_free(&leg->head);
}

/* close(), __gc and __close: idempotent, never raises. */
static int leg_close(lua_State *L) {
  leg_release(luaL_checkudata(L, 1, LEG_MT));
  return 0;
}

/* Says whether the leg is still usable; never shows what it last sent. */
static int leg_tostring(lua_State *L) {
  Leg *leg = luaL_checkudata(L, 1, LEG_MT);
  lua_pushfstring(L, "mcpclient.http_leg (%s)", leg->easy ? "open" : "closed");
  return 1;
}

/*
** The options every send shares: no redirects, http(s) only, TLS verified,
** no signals, and our buffers as the sinks. The proxy is the pool's
** (http_pool.c), chosen in Lua: libcurl never reads one, nor a NO_PROXY list,
** from the environment. Through an HTTP proxy an https target is reached
** through a CONNECT tunnel (libcurl always tunnels TLS), an http target is
** forwarded without one.
*/
static int set_fixed_options(Leg *leg) {
  CURL *e = leg->easy;
  char *cainfo = NULL;
  int bad = 0;
  bad |= curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L) != CURLE_OK;
  bad |= curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L) != CURLE_OK;
  bad |= curl_easy_setopt(e, CURLOPT_BUFFERSIZE, RECEIVE_BUFFER) != CURLE_OK;
  bad |= curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L) != CURLE_OK;
  bad |= curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https") != CURLE_OK;
  bad |= curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https") != CURLE_OK;
  bad |= curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 1L) != CURLE_OK;
  bad |= curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 2L) != CURLE_OK;
  bad |= curl_easy_setopt(e, CURLOPT_PROXY, "") != CURLE_OK;
  bad |= curl_easy_setopt(e, CURLOPT_NOPROXY, "") != CURLE_OK;
  bad |= curl_easy_setopt(e, CURLOPT_HTTPPROXYTUNNEL, 0L) != CURLE_OK;
  bad |= curl_easy_setopt(e, CURLOPT_USERAGENT, "mcpclient/" MCP_VERSION) != CURLE_OK;
  bad |= curl_easy_setopt(e, CURLOPT_ERRORBUFFER, leg->errbuf) != CURLE_OK;
  bad |= curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, mcp_http_on_body) != CURLE_OK;
  bad |= curl_easy_setopt(e, CURLOPT_WRITEDATA, (void *)leg) != CURLE_OK;
  bad |= curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, mcp_http_on_header) != CURLE_OK;
  bad |= curl_easy_setopt(e, CURLOPT_HEADERDATA, (void *)leg) != CURLE_OK;
  bad |= curl_easy_setopt(e, CURLOPT_PREREQFUNCTION, on_prereq) != CURLE_OK;
  bad |= curl_easy_setopt(e, CURLOPT_PREREQDATA, (void *)leg) != CURLE_OK;
  bad |= !mcp_http_own_sockets(leg);
  if (curl_easy_getinfo(e, CURLINFO_CAINFO, &cainfo) == CURLE_OK && cainfo != NULL) {
    size_t n = strlen(cainfo) + 1;
    leg->default_cainfo = malloc(n);
    if (leg->default_cainfo == NULL) return 0;
    memcpy(leg->default_cainfo, cainfo, n);
  }
  return !bad;
}

/*
** core.http_leg([pool]): created closed, then the handles are acquired. Legs
** made with one pool share its kept-alive connections (several may be open
** at once); without one the leg gets a pool of its own.
*/
static int l_http_leg(lua_State *L) {
  Leg *leg;
  if (lua_isnoneornil(L, 1)) {
    lua_settop(L, 0);
    mcp_http_pool_new(L);
  }
  Multi *driver;
  luaL_checkudata(L, 1, POOL_MT);
  driver = mcp_http_engine(L);
  leg = lua_newuserdatauv(L, sizeof *leg, 2);
  memset(leg, 0, sizeof *leg);
  leg->driver = driver;
  leg->last_socket = CURL_SOCKET_BAD;
  luaL_setmetatable(L, LEG_MT);
  lua_pushvalue(L, 1);
  lua_setiuservalue(L, -2, UV_POOL);
  leg->pool = lua_touserdata(L, 1);
  leg->easy = curl_easy_init();
  leg->parsed = curl_url();
  if (leg->easy == NULL || leg->parsed == NULL || !set_fixed_options(leg) ||
      curl_easy_setopt(leg->easy, CURLOPT_PRIVATE, (void *)leg) != CURLE_OK) {
    leg_release(leg);
    return luaL_error(L, "libcurl could not create a transfer handle");
  }
  return 1;
}

/* ==================================================================== */
/* Reading the request table (may raise: nothing is allocated yet)      */
/* ==================================================================== */

/* Which request field a key names, or -1: a linear scan beats hashing for 14 short names. */
static int field_index(const char *k, size_t len) {
  int f;
  for (f = 0; f < F_COUNT; f++)
    if (field_names[f].len == len && memcmp(field_names[f].name, k, len) == 0) return f;
  return -1;
}

/*
** Does the text hold a byte it may not: NUL, or with `line` a CR or LF? The
** library's searches run a word at a time, so a warm send's url, pin and
** header lines are checked in a few steps each, not byte by byte.
*/
static int bad_text(const char *s, size_t n, int line) {
  return memchr(s, '\0', n) != NULL || (line && (memchr(s, '\r', n) != NULL || memchr(s, '\n', n) != NULL));
}

/* A string field or NULL when absent; a header-like one may carry no line break. */
static const char *string_field(lua_State *L, int f, size_t *len, int line) {
  size_t n;
  const char *s;
  int t = lua_type(L, SLOT(f));
  if (t == LUA_TNIL) return NULL;
  if (t != LUA_TSTRING) luaL_error(L, "send: '%s' must be a string", field_names[f].name);
  s = lua_tolstring(L, SLOT(f), &n);
  if (len != NULL) *len = n;
  if (f == F_BODY || f == F_SECRET_BODY) return s; /* bodies are bytes */
  if (bad_text(s, n, line))
    luaL_error(L, "send: '%s' must not contain NUL%s", field_names[f].name, line ? " or line breaks" : "");
  return s;
}

/* A boolean field; false when absent. */
static int flag_field(lua_State *L, int f) {
  if (!lua_isnil(L, SLOT(f)) && !lua_isboolean(L, SLOT(f)))
    luaL_error(L, "send: '%s' must be a boolean", field_names[f].name);
  return lua_toboolean(L, SLOT(f));
}

/* An integer field >= 1 (floats with an integral value are accepted). */
static lua_Integer count_field(lua_State *L, int f, lua_Integer dflt, lua_Integer max) {
  int isint = 0;
  lua_Integer v;
  int t = lua_type(L, SLOT(f));
  if (t == LUA_TNIL) {
    if (dflt > 0) return dflt;
    luaL_error(L, "send: '%s' is required", field_names[f].name);
  }
  v = lua_tointegerx(L, SLOT(f), &isint);
  if (t != LUA_TNUMBER || !isint) luaL_error(L, "send: '%s' must be an integer", field_names[f].name);
  if (v < 1 || v > max) luaL_error(L, "send: '%s' must be between 1 and %I", field_names[f].name, max);
  return v;
}

/*
** "host:port:address" -> length of "host:port", or 0 when malformed. The
** host may not be bracketed or contain ':' (libcurl splits at the first ':').
*/
static size_t pin_hostport(const char *pin, size_t len) {
  size_t i = 0, port_start;
  long port = 0;
  while (i < len && pin[i] != ':' && pin[i] != '[') i++;
  if (i == 0 || i >= len || pin[i] != ':') return 0;
  port_start = ++i;
  while (i < len && pin[i] >= '0' && pin[i] <= '9' && i - port_start < 5) port = port * 10 + (pin[i++] - '0');
  if (i == port_start || port < 1 || port > 65535 || i >= len || pin[i] != ':' || i + 1 >= len) return 0;
  return i;
}

/*
** A proxy URL libcurl may be given: a scheme that resolves nothing on this
** machine for the target (socks5h, not socks5 or socks4) and no credentials.
*/
static int proxy_usable(const char *proxy) {
  static const char *const schemes[] = {"http://", "https://", "socks5h://"};
  size_t i;
  if (strchr(proxy, '@') != NULL) return 0;
  for (i = 0; i < sizeof schemes / sizeof schemes[0]; i++) {
    size_t n = strlen(schemes[i]);
    if (strncmp(proxy, schemes[i], n) == 0 && proxy[n] != '\0') return 1;
  }
  return 0;
}

/* Copy req's fields into their slots; raises on a key that names no field. */
static void slot_fields(lua_State *L) {
  int f;
  for (f = 0; f < F_COUNT; f++) lua_pushnil(L);
  lua_pushnil(L);
  while (lua_next(L, 2)) {
    const char *k;
    size_t klen;
    if (lua_type(L, -2) != LUA_TSTRING) luaL_error(L, "send: request keys must be strings");
    k = lua_tolstring(L, -2, &klen);
    f = field_index(k, klen);
    if (f < 0) luaL_error(L, "send: unknown request field '%s'", k);
    lua_replace(L, SLOT(f));
  }
}

/* Raise naming the first missing line of headers[1..n] (the walk found fewer than n). */
static void header_hole(lua_State *L, lua_Integer n) {
  lua_Integer i;
  for (i = 1; i <= n; i++) {
    if (lua_rawgeti(L, SLOT(F_HEADERS), i) == LUA_TNIL) luaL_error(L, "send: 'headers' has a hole at %I", i);
    lua_pop(L, 1);
  }
}

/*
** The 'headers' field: an array of strings without holes, NUL or line
** breaks. One walk: every key must be an integer in 1..#headers, and since
** keys are distinct, finding #headers of them means none is missing.
*/
static void read_headers(lua_State *L, Request *r) {
  lua_Integer seen = 0;
  r->n_headers = 0;
  if (lua_isnil(L, SLOT(F_HEADERS))) return;
  if (!lua_istable(L, SLOT(F_HEADERS))) luaL_error(L, "send: 'headers' must be an array of strings");
  r->n_headers = (lua_Integer)lua_rawlen(L, SLOT(F_HEADERS));
  lua_pushnil(L);
  while (lua_next(L, SLOT(F_HEADERS))) {
    int isint = 0;
    lua_Integer k = lua_tointegerx(L, -2, &isint);
    const char *h;
    size_t hlen;
    if (lua_type(L, -2) != LUA_TNUMBER || !isint || k < 1 || k > r->n_headers)
      luaL_error(L, "send: 'headers' must be an array of strings");
    if (lua_type(L, -1) != LUA_TSTRING) luaL_error(L, "send: headers[%I] must be a string", k);
    h = lua_tolstring(L, -1, &hlen);
    if (bad_text(h, hlen, 1)) luaL_error(L, "send: headers[%I] must not contain NUL or line breaks", k);
    lua_pop(L, 1);
    seen++;
  }
  if (seen != r->n_headers) header_hole(L, r->n_headers);
}

/* Slot req's fields, then check each; raises on misuse. */
static void read_request(lua_State *L, Request *r) {
  size_t len = 0;
  const char *s;
  slot_fields(L);
  s = string_field(L, F_METHOD, NULL, 1);
  if (s == NULL) luaL_error(L, "send: 'method' is required");
  if (strcmp(s, "POST") == 0) r->method = M_POST;
  else if (strcmp(s, "GET") == 0) r->method = M_GET;
  else if (strcmp(s, "DELETE") == 0) r->method = M_DELETE;
  else luaL_error(L, "send: 'method' must be \"POST\", \"GET\" or \"DELETE\"");
  r->url = string_field(L, F_URL, NULL, 1);
  if (r->url == NULL) luaL_error(L, "send: 'url' is required");
  read_headers(L, r);
  r->secret = string_field(L, F_SECRET_HEADER, NULL, 1);
  r->body = string_field(L, F_BODY, &r->body_len, 0);
  r->secret_body = string_field(L, F_SECRET_BODY, &r->secret_body_len, 0);
  if (r->body != NULL && r->secret_body != NULL)
    luaL_error(L, "send: give either 'body' or 'secret_body', not both");
  if ((r->body != NULL || r->secret_body != NULL) && r->method != M_POST)
    luaL_error(L, "send: a 'body' is only sent with POST");
  r->timeout_ms = (long)count_field(L, F_TIMEOUT_MS, 0, LONG_MAX);
  r->connect_timeout_ms = (long)count_field(L, F_CONNECT_TIMEOUT_MS, DEFAULT_CONNECT_TIMEOUT_MS, LONG_MAX);
  r->max_bytes = (size_t)count_field(L, F_MAX_BYTES, DEFAULT_MAX_BYTES, MAX_BYTES_LIMIT);
  r->pin = string_field(L, F_PIN, &len, 1);
  r->pin_hostport = 0;
  if (r->pin != NULL && (r->pin_hostport = pin_hostport(r->pin, len)) == 0)
    luaL_error(L, "send: 'pin' must be \"host:port:address\"");
  r->proxy = string_field(L, F_PROXY, NULL, 1);
  if (r->proxy != NULL && !proxy_usable(r->proxy))
    luaL_error(L,
               "send: 'proxy' must be http://, https:// or socks5h:// host:port, without user information");
  if (r->proxy != NULL && r->pin != NULL)
    luaL_error(L, "send: give either 'pin' or 'proxy': through a proxy nothing is resolved here");
  r->proxy_user = string_field(L, F_PROXY_USER, NULL, 1);
  r->proxy_password = string_field(L, F_PROXY_PASSWORD, NULL, 1);
  if ((r->proxy_user == NULL) != (r->proxy_password == NULL) || (r->proxy_user != NULL && r->proxy == NULL))
    luaL_error(L, "send: 'proxy_user' and 'proxy_password' go together, with a 'proxy'");
  r->ca_file = string_field(L, F_CA_FILE, NULL, 0);
  r->client_cert = string_field(L, F_CLIENT_CERT, NULL, 0);
  r->client_key = string_field(L, F_CLIENT_KEY, NULL, 0);
  if (!lua_isnil(L, SLOT(F_CANCEL)) && !lua_isfunction(L, SLOT(F_CANCEL)))
    luaL_error(L, "send: 'cancel' must be a function");
  if (!lua_isnil(L, SLOT(F_ON_STREAM)) && !lua_isfunction(L, SLOT(F_ON_STREAM)))
    luaL_error(L, "send: 'on_stream' must be a function");
  r->send_only = flag_field(L, F_SEND_ONLY);
  r->idempotent = flag_field(L, F_IDEMPOTENT);
  r->hold_body = flag_field(L, F_HOLD_BODY);
  r->has_cancel = lua_isfunction(L, SLOT(F_CANCEL));
}

/*
** Does the pin name the url's own host and port? If not, libcurl would look
** the host up in DNS and the address it dials would not be the one the gate
** judged, so a mismatch is misuse. 1 = matches, 0 = mismatch, -1 = the url
** does not parse (libcurl will report that as a transport failure).
*/
static int pin_matches_url(Leg *leg, const Request *r) {
  char *host = NULL, *port = NULL;
  int ok = 0;
  if (curl_url_set(leg->parsed, CURLUPART_URL, r->url, CURLU_GUESS_SCHEME | CURLU_NON_SUPPORT_SCHEME) !=
      CURLUE_OK)
    return -1;
  if (curl_url_get(leg->parsed, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
      curl_url_get(leg->parsed, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK) {
    size_t hlen = strlen(host), plen = strlen(port);
    ok = hlen + 1 + plen == r->pin_hostport && mcp_http_ascii_ieq(host, r->pin, hlen) &&
         r->pin[hlen] == ':' && memcmp(port, r->pin + hlen + 1, plen) == 0;
  }
  curl_free(host);
  curl_free(port);
  return ok;
}

/*
** Did this url and pin already agree on an earlier send? The check parses the
** url, which a warm call would otherwise repeat for the same two strings.
*/
static int pin_known(const Leg *leg, const Request *r) {
  return leg->checked_pin != NULL && strcmp(leg->checked_pin, r->pin) == 0 &&
         strcmp(leg->checked_url, r->url) == 0;
}

/* Remember a url and pin that agree; without memory the next send checks again. */
static void remember_pin(Leg *leg, const Request *r) {
  char *url = strdup(r->url), *pin = strdup(r->pin);
  free(leg->checked_url);
  free(leg->checked_pin);
  if (url == NULL || pin == NULL) {
    free(url);
    free(pin);
    url = pin = NULL;
  }
  leg->checked_url = url;
  leg->checked_pin = pin;
}

/* ==================================================================== */
/* Configuring one exchange (no Lua errors from here to the end of it)  */
/* ==================================================================== */

/*
** TLS files: set when given, and put back to libcurl's defaults once after.
** The CA file is trusted for an https:// proxy too.
*/
static const char *apply_tls(Leg *leg, const Request *r) {
  int custom = r->ca_file != NULL || r->client_cert != NULL || r->client_key != NULL;
  const char *cainfo = r->ca_file ? r->ca_file : leg->default_cainfo;
  if (!custom && !leg->custom_tls) return NULL;
  leg->custom_tls = 1; /* until all three are known to be reset */
  if (curl_easy_setopt(leg->easy, CURLOPT_CAINFO, cainfo) != CURLE_OK ||
      curl_easy_setopt(leg->easy, CURLOPT_PROXY_CAINFO, cainfo) != CURLE_OK ||
      curl_easy_setopt(leg->easy, CURLOPT_SSLCERT, r->client_cert) != CURLE_OK ||
      curl_easy_setopt(leg->easy, CURLOPT_SSLKEY, r->client_key) != CURLE_OK)
    return "out of memory";
  leg->custom_tls = custom;
  return NULL;
}

/*
** The proxy's Basic credentials, sent with the first request to it (no
** round trip to learn the scheme). libcurl copies them; that copy is dropped
** once the exchange ends (forget_proxy_login), so no later send carries them
** unasked.
*/
static const char *apply_proxy_login(Leg *leg, const Request *r) {
  if (r->proxy_user == NULL) return NULL;
  leg->proxy_login = 1;
  if (curl_easy_setopt(leg->easy, CURLOPT_PROXYAUTH, (long)CURLAUTH_BASIC) != CURLE_OK ||
      curl_easy_setopt(leg->easy, CURLOPT_PROXYUSERNAME, r->proxy_user) != CURLE_OK ||
      curl_easy_setopt(leg->easy, CURLOPT_PROXYPASSWORD, r->proxy_password) != CURLE_OK)
    return "out of memory";
  return NULL;
}

/* Drop libcurl's copy of the proxy credentials; safe when none were set. */
static void forget_proxy_login(Leg *leg) {
  if (!leg->proxy_login || leg->easy == NULL) return;
  curl_easy_setopt(leg->easy, CURLOPT_PROXYUSERNAME, (char *)NULL);
  curl_easy_setopt(leg->easy, CURLOPT_PROXYPASSWORD, (char *)NULL);
  leg->proxy_login = 0;
}

/*
** Is the request forwarded by an HTTP proxy (an http:// target through an
** http:// or https:// proxy, no tunnel)? Then the connection is the proxy's,
** and a proxy may close it after any response without saying so (tinyproxy
** does): a next request written into it would be lost after it left, so such
** a connection is never reused. A tunnel (CONNECT, SOCKS) is the server's own
** connection end to end and is kept alive by the server's word.
*/
static int forwarded(const Request *r) {
  return r->proxy != NULL && strncmp(r->proxy, "socks", 5) != 0 && mcp_http_ascii_ieq(r->url, "http://", 7);
}

/*
** The body libcurl sends: the caller's string (anchored for the exchange), or
** for a secret body a malloc'd copy owned by the leg, so the leg keeps no Lua
** string of it and can mcp_http_wipe the bytes once the transfer is over. NULL when
** the copy could not be made.
*/
static const char *post_body(Leg *leg, const Request *r, size_t *len) {
  if (r->secret_body == NULL) {
    *len = r->body ? r->body_len : 0;
    return r->body ? r->body : "";
  }
  if ((leg->secret_body = malloc(r->secret_body_len + 1)) == NULL) return NULL;
  memcpy(leg->secret_body, r->secret_body, r->secret_body_len);
  leg->secret_body[r->secret_body_len] = '\0';
  leg->secret_body_len = r->secret_body_len;
  *len = r->secret_body_len;
  return leg->secret_body;
}

/*
** Set this send's options and its header list (the credential, when given,
** in a node of its own after the plain lines, cut off again when the
** exchange ends). Everything allocated here is owned by the leg. Returns
** NULL, or a reason that becomes a "transport" failure.
*/
static const char *configure(lua_State *L, Leg *leg, const Request *r) {
  CURL *e = leg->easy;
  const char *why, *body;
  size_t body_len = 0;

  if (curl_easy_setopt(e, CURLOPT_URL, r->url) != CURLE_OK) return "out of memory";
  if (r->method == M_POST) {
    if ((body = post_body(leg, r, &body_len)) == NULL) return "out of memory";
    curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, (char *)NULL);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
  } else {
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, (char *)NULL); /* no pointer to an old body */
    curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    if (curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, r->method == M_DELETE ? "DELETE" : NULL) != CURLE_OK)
      return "out of memory";
  }
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, r->timeout_ms);
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, r->connect_timeout_ms);
  if ((why = mcp_http_apply_pool(leg)) != NULL) return why;
  curl_easy_setopt(e, CURLOPT_FORBID_REUSE, forwarded(r) ? 1L : 0L);
  if ((why = apply_proxy_login(leg, r)) != NULL) return why;
  if ((why = apply_tls(leg, r)) != NULL) return why;

  if ((why = mcp_http_build_headers(L, leg, r, r->method == M_POST && body_len > SMALL_BODY)) != NULL)
    return why;
  if (r->secret != NULL) {
    if ((leg->secret = curl_slist_append(NULL, r->secret)) == NULL) return "out of memory";
    if (leg->tail != NULL) leg->tail->next = leg->secret;
    else leg->headers = leg->secret;
  }
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, leg->headers);

  leg->body.len = leg->stream.len = leg->head.len = 0;
  leg->max_bytes = r->max_bytes;
  leg->held = 0;
  leg->want_stream = lua_isfunction(L, SLOT(F_ON_STREAM));
  leg->mode = BODY_UNDECIDED;
  leg->in_head = leg->event_stream = 0;
  leg->media[0] = '\0';
  leg->truncated = leg->out_of_memory = leg->head_overflow = 0;
  leg->attempts = 0;
  leg->budget_ns = (int64_t)r->timeout_ms * 1000000;
  leg->idempotent = r->idempotent;
  leg->hold_body = r->hold_body;
  leg->errbuf[0] = '\0';
  leg->has_body = r->body != NULL || r->secret_body != NULL;
  leg->body_len = body_len;
  leg->send_only = r->send_only;
  return NULL;
}

/* ==================================================================== */
/* Driving the exchange                                                 */
/* ==================================================================== */

/*
** Call the cancel hook (at SLOT(F_CANCEL)) under lua_pcall. -1 = it raised
** (the error value is left on the stack), else its truthiness.
*/
static int poll_cancel(lua_State *L) {
  int yes;
  lua_pushvalue(L, SLOT(F_CANCEL));
  if (lua_pcall(L, 0, 1, 0) != LUA_OK) return -1;
  yes = lua_toboolean(L, -1);
  lua_pop(L, 1);
  return yes;
}

/*
** Runs under lua_pcall: making the chunk string can itself raise (memory), and
** that must not unwind past the driving loop while the handle is in the multi.
*/
static int deliver_chunk(lua_State *L) {
  Leg *leg = lua_touserdata(L, 2);
  lua_pushvalue(L, 1);
  lua_pushlstring(L, leg->stream.p, leg->stream.len);
  leg->stream.len = 0;
  lua_call(L, 1, 1);
  return 1;
}

/* Hand the queued stream bytes to on_stream: -1 raised (error on the stack), 1 stop, 0 go on. */
static int deliver(lua_State *L, Leg *leg) {
  int stop;
  lua_pushcfunction(L, deliver_chunk);
  lua_pushvalue(L, SLOT(F_ON_STREAM));
  lua_pushlightuserdata(L, leg);
  if (lua_pcall(L, 2, 1, 0) != LUA_OK) return -1;
  stop = lua_toboolean(L, -1);
  lua_pop(L, 1);
  return stop;
}

/*
** Has the whole request left? libcurl counts the request head it issued and
** the body bytes it uploaded; both are on the wire (or in the kernel's send
** buffer) once they are counted. Until libcurl has begun a request of this
** exchange (on_prereq) those counts are still the previous exchange's, so a
** send_only exchange pumped before the engine ran would stop unsent.
*/
static int request_sent(Leg *leg) {
  long head = 0;
  curl_off_t up = 0;
  if (leg->attempts == 0) return 0;
  if (curl_easy_getinfo(leg->easy, CURLINFO_REQUEST_SIZE, &head) != CURLE_OK || head <= 0) return 0;
  if (!leg->has_body || leg->body_len == 0) return 1;
  return curl_easy_getinfo(leg->easy, CURLINFO_SIZE_UPLOAD_T, &up) == CURLE_OK &&
         up >= (curl_off_t)leg->body_len;
}

/*
** Did the exchange's time run out before libcurl began its request? A transfer
** waiting for a connection to the host to come free (all of them busy) is not
** timed by libcurl, which starts the clock only once it leaves that queue; the
** exchange's own timeout bounds the wait, so a queued call keeps its budget.
** Then it ends as a timeout with nothing sent.
*/
static int waited_out(Leg *leg) {
  int64_t now;
  if (leg->x.done || leg->attempts > 0 || leg->budget_ns <= 0) return 0;
  now = mcp_monotonic_ns();
  if (now - leg->x.t0 < leg->budget_ns) return 0;
  leg->x.done = 1;
  leg->x.code = CURLE_OPERATION_TIMEDOUT;
  leg->x.t1 = now;
  snprintf(leg->errbuf, sizeof leg->errbuf,
           "no connection to the server came free within %lld milliseconds; nothing was sent",
           (long long)(leg->budget_ns / 1000000));
  return 1;
}

/*
** The blocking loop: perform, deliver stream bytes, poll the cancel hook,
** wait at most POLL_MS. Other exchanges in the engine make progress too (their
** outcomes wait in their own legs). A send_only exchange stops as soon as the
** request is out. Every hook may close the leg, so the handles are re-checked
** after each one.
*/
static int drive(lua_State *L, Leg *leg, const Request *r, Exchange *x) {
  Multi *m = leg->driver;
  int wait = 0;
  for (;;) {
    int hook;
    if ((x->multi_code = mcp_http_engine_turn(m, wait)) != CURLM_OK) return OUT_MULTI_FAIL;
    wait = POLL_MS;
    if (leg->stream.len > 0) {
      hook = deliver(L, leg);
      if (hook < 0) return OUT_RAISE;
      if (leg->easy == NULL) return OUT_CLOSED;
      if (hook) {
        if (!x->done) x->t1 = mcp_monotonic_ns();
        return OUT_STOPPED;
      }
    }
    if (x->done || waited_out(leg)) return OUT_DONE;
    if (r->send_only && request_sent(leg)) {
      x->t1 = mcp_monotonic_ns();
      return OUT_STOPPED;
    }
    if (r->has_cancel) {
      hook = poll_cancel(L);
      if (hook < 0) return OUT_RAISE;
      if (leg->easy == NULL) return OUT_CLOSED;
      if (hook) return OUT_CANCELLED;
    }
  }
}

/* ==================================================================== */
/* The result                                                           */
/* ==================================================================== */

/*
** The response table of a completed (or deliberately stopped) exchange. Its
** header table is made only when read (mcp_http_response_index, from the
** kept head); the session id, which the channel reads from every answer, is
** a field of its own.
*/
static void push_response(lua_State *L, Leg *leg, const Exchange *x, int stopped) {
  size_t sid_len = 0;
  const char *sid = mcp_http_header_value(leg, "mcp-session-id", &sid_len);
  lua_createtable(L, 0, 10);
  lua_pushinteger(L, x->status);
  lua_setfield(L, -2, "status");
  lua_pushlstring(L, leg->head.p ? leg->head.p : "", leg->head.len);
  lua_setfield(L, -2, "head");
  if (sid != NULL) {
    lua_pushlstring(L, sid, sid_len);
    lua_setfield(L, -2, "session_id");
  }
  lua_pushstring(L, leg->media);
  lua_setfield(L, -2, "media_type");
  mcp_http_push_body(L, leg, x);
  lua_setfield(L, -2, "body");
  lua_pushnumber(L, (lua_Number)(x->t1 - x->t0) / 1e6);
  lua_setfield(L, -2, "duration_ms");
  lua_pushboolean(
    L, leg->mode == BODY_STREAM || (leg->mode == BODY_UNDECIDED && leg->want_stream && leg->event_stream));
  lua_setfield(L, -2, "streamed");
  lua_pushboolean(L, stopped);
  lua_setfield(L, -2, "stopped");
  lua_pushboolean(L, leg->truncated);
  lua_setfield(L, -2, "truncated");
  luaL_setmetatable(L, RESPONSE_MT);
}

/* nil, kind, message: the failure triple; message never holds request headers or body. */
static int push_failure(lua_State *L, const char *kind, const char *message) {
  lua_pushnil(L);
  lua_pushstring(L, kind);
  lua_pushstring(L, message);
  return 3;
}

/*
** The failure triple of a transfer that ended, and a fourth value: whether the
** request had left (the server may have acted on it). A timeout or a
** cancellation says no more than its kind without it.
*/
static int push_ended(lua_State *L, const char *kind, const char *message, int sent) {
  push_failure(L, kind, message);
  lua_pushboolean(L, sent);
  return 4;
}

/*
** Did the exchange fail in TLS, before the server's HTTP layer read anything?
** libcurl's TLS codes (the handshake, a certificate, a file of ours); and a
** fatal TLS alert where the answer was awaited on a connection this exchange
** opened: under TLS 1.3 the client's handshake is over before the server has
** checked its certificate, so a server refusing a client certificate (or
** missing one) answers the request with an alert. On a reused connection
** such a failure could follow a request the server read, and is not counted.
*/
static int tls_failure(Leg *leg, CURLcode code, const char *text) {
  long connects = 0;
  switch (code) {
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_SSL_ENGINE_NOTFOUND:
    case CURLE_SSL_ENGINE_SETFAILED:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_ENGINE_INITFAILED:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CRL_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_INVALIDCERTSTATUS:
    case CURLE_SSL_CLIENTCERT:
    case CURLE_USE_SSL_FAILED: return 1;
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
      if (leg->x.status > 0 || leg->attempts > 1) return 0;
      if (curl_easy_getinfo(leg->easy, CURLINFO_NUM_CONNECTS, &connects) != CURLE_OK || connects < 1)
        return 0;
      return strstr(text, "SSL routines") != NULL && strstr(text, " alert ") != NULL;
    default: return 0;
  }
}

/*
** nil, kind, text, sent for a transfer libcurl ended with an error. The kind says
** how far the request got: "timeout" when the time ran out; "interrupted"
** when the request had left (the server may have acted on it, so it must not
** be sent again); "tls" when the TLS layer refused the connection (nothing
** reached the server's HTTP layer); "transport" when it never left (safe to
** send again).
*/
static int push_curl_failure(lua_State *L, Leg *leg, CURLcode code, int sent) {
  const char *text = leg->errbuf[0] ? leg->errbuf : curl_easy_strerror(code);
  if (!leg->out_of_memory && !leg->head_overflow && tls_failure(leg, code, text))
    return push_ended(L, "tls", text, 0);
  if (leg->out_of_memory) text = "out of memory while reading the response";
  else if (leg->head_overflow) text = "the response headers are larger than 262144 bytes";
  else if (leg->attempts > 1 && !leg->idempotent)
    text = "the connection closed after the request was sent, before any answer";
  if (leg->attempts > 1 && !leg->idempotent) return push_ended(L, "interrupted", text, 1);
  if (code == CURLE_OPERATION_TIMEDOUT) return push_ended(L, "timeout", text, sent);
  return push_ended(L, sent ? "interrupted" : "transport", text, sent);
}

/* ==================================================================== */
/* leg:send(req)                                                        */
/* ==================================================================== */

/*
** What a finished exchange returns: the response table, or the failure
** triple for a cancellation, a multi-handle failure or a libcurl error.
*/
static int push_outcome(lua_State *L, Leg *leg, const Exchange *x, int outcome, int sent) {
  int results;
  switch (outcome) {
    case OUT_CANCELLED: results = push_ended(L, "cancelled", "the call was cancelled", sent); break;
    case OUT_MULTI_FAIL: results = push_failure(L, "transport", curl_multi_strerror(x->multi_code)); break;
    case OUT_STOPPED:
      push_response(L, leg, x, 1);
      results = 1;
      break;
    default:
      if (x->code == CURLE_OK || (leg->truncated && x->code == CURLE_WRITE_ERROR && !leg->out_of_memory)) {
        push_response(L, leg, x, 0);
        results = 1;
      } else {
        results = push_curl_failure(L, leg, x->code, sent);
      }
      break;
  }
  return results;
}

/*
** Take the ended exchange out of the engine and mcp_http_wipe the credential copy.
** Returns whether the request had left (the server may have acted on it).
*/
static int leg_settle(Leg *leg) {
  int sent;
  /* no request begun: the status libcurl holds is the previous exchange's */
  if (leg->attempts == 0) leg->x.status = 0;
  else curl_easy_getinfo(leg->easy, CURLINFO_RESPONSE_CODE, &leg->x.status);
  sent = leg->x.status > 0 || request_sent(leg);
  if (curl_easy_getinfo(leg->easy, CURLINFO_ACTIVESOCKET, &leg->last_socket) != CURLE_OK)
    leg->last_socket = CURL_SOCKET_BAD;
  if (leg->multi != NULL) {
    curl_multi_remove_handle(leg->multi, leg->easy);
    leg->driver->handles--;
  }
  leg->multi = NULL;
  mcp_http_drop_headers(leg);
  forget_proxy_login(leg);
  leg->busy = leg->started = 0;
  return sent;
}

/* The outcome of a settled exchange, then the buffers trimmed for the next. */
static int leg_outcome(lua_State *L, Leg *leg, int outcome, int sent) {
  int results = push_outcome(L, leg, &leg->x, outcome, sent);
  mcp_http_buf_trim(&leg->body);
  mcp_http_buf_trim(&leg->stream);
  mcp_http_buf_trim(&leg->head);
  return results;
}

/*
** What send and start share: check the leg and read req (both may raise);
** the pool is chosen before anything is allocated for the send.
*/
static Leg *leg_begin(lua_State *L, Request *r) {
  Leg *leg = luaL_checkudata(L, 1, LEG_MT);
  if (leg->easy == NULL) luaL_error(L, "attempt to use a closed http leg");
  if (leg->busy) luaL_error(L, "the http leg is busy with another send");
  luaL_checktype(L, 2, LUA_TTABLE);
  lua_settop(L, 2);
  luaL_checkstack(L, F_COUNT + 12, "http leg send");
  memset(r, 0, sizeof *r);
  read_request(L, r);
  if (r->pin != NULL && !pin_known(leg, r)) {
    int agree = pin_matches_url(leg, r);
    if (agree == 0) luaL_error(L, "send: 'pin' does not name the url's host and port");
    if (agree == 1) remember_pin(leg, r);
  }
  mcp_http_choose_pool(L, leg, r);
  return leg;
}

/*
** Configure and hand the exchange to the engine. NULL, or the reason it could
** not start (a "transport" failure: nothing was sent). Nothing here raises.
*/
static const char *leg_launch(lua_State *L, Leg *leg, const Request *r) {
  const char *why;
  leg->busy = 1;
  if ((why = configure(L, leg, r)) == NULL && !mcp_http_engine_add(leg))
    why = curl_multi_strerror(leg->x.multi_code);
  if (why != NULL) {
    mcp_http_drop_headers(leg);
    forget_proxy_login(leg);
    leg->busy = 0;
  }
  return why;
}

/*
** leg:send(req) -> response | nil, kind, message [, sent]. Everything that can raise
** (validation, the pre-send cancel poll) happens before anything is allocated;
** from configure() to the end of the exchange Lua runs only under lua_pcall,
** and a hook's error is re-raised after the handle is out of the engine and
** the credential copy is wiped.
*/
static int leg_send(lua_State *L) {
  Request r;
  Leg *leg = leg_begin(L, &r);
  const char *why;
  int outcome, sent;

  /* A flag that is already up sends nothing (busy: the hook may not re-enter). */
  if (r.has_cancel) {
    int hook;
    leg->busy = 1;
    hook = poll_cancel(L);
    leg->busy = 0;
    if (hook < 0) return lua_error(L);
    if (leg->easy == NULL) return luaL_error(L, "attempt to use a closed http leg");
    if (hook) return push_failure(L, "cancelled", "the call was cancelled");
  }

  /* From here until busy is cleared nothing may raise. */
  if ((why = leg_launch(L, leg, &r)) != NULL) return push_failure(L, "transport", why);
  outcome = drive(L, leg, &r, &leg->x);
  if (outcome == OUT_CLOSED) { /* leg_release already removed the handle and wiped */
    leg->busy = 0;
    return luaL_error(L, "the http leg was closed during its send");
  }
  sent = leg_settle(leg);
  if (outcome == OUT_RAISE) return lua_error(L);
  return leg_outcome(L, leg, outcome, sent);
}

/*
** leg:start(req) -> true | nil, "transport", message. Begins the exchange in
** the engine and returns at once; the caller drives it with core.engine_step
** and leg:pump, and ends it with leg:finish. The 'cancel' and 'on_stream'
** fields are the caller's to apply (pump hands stream bytes back to it). The
** body is anchored in the leg while libcurl points at it; a secret body is
** not: libcurl reads the leg's C copy, wiped when the exchange is settled.
*/
static int leg_start(lua_State *L) {
  Request r;
  Leg *leg = leg_begin(L, &r);
  const char *why;
  lua_pushvalue(L, SLOT(F_BODY));
  lua_setiuservalue(L, 1, UV_BODY);
  leg->want_stream = lua_isfunction(L, SLOT(F_ON_STREAM));
  if ((why = leg_launch(L, leg, &r)) != NULL) {
    lua_pushnil(L);
    lua_setiuservalue(L, 1, UV_BODY);
    return push_failure(L, "transport", why);
  }
  leg->started = 1;
  lua_pushboolean(L, 1);
  return 1;
}

/* The leg of a started exchange; misuse (none started) raises. */
static Leg *started_leg(lua_State *L) {
  Leg *leg = luaL_checkudata(L, 1, LEG_MT);
  if (leg->easy == NULL) luaL_error(L, "attempt to use a closed http leg");
  if (!leg->started) luaL_error(L, "the http leg has no started exchange");
  return leg;
}

/*
** leg:pump() -> "chunk", bytes | "done" | "sent" | "wait": what the started
** exchange has for its driver since the last engine step. Stream bytes come
** first; "sent" means a send_only request is out.
*/
static int leg_pump(lua_State *L) {
  Leg *leg = started_leg(L);
  if (leg->stream.len > 0) {
    lua_pushliteral(L, "chunk");
    lua_pushlstring(L, leg->stream.p, leg->stream.len);
    leg->stream.len = 0;
    return 2;
  }
  if (leg->x.done || waited_out(leg)) lua_pushliteral(L, "done");
  else if (leg->send_only && request_sent(leg)) lua_pushliteral(L, "sent");
  else lua_pushliteral(L, "wait");
  return 1;
}

/*
** leg:status() -> the status code of the started exchange's response once
** its whole head has arrived, else 0: the server has answered the request,
** though its body may still be coming (a long-lived event stream).
*/
static int leg_status(lua_State *L) {
  Leg *leg = started_leg(L);
  long status = 0;
  if (!leg->in_head && leg->head.len > 0) curl_easy_getinfo(leg->easy, CURLINFO_RESPONSE_CODE, &status);
  lua_pushinteger(L, status);
  return 1;
}

/*
** leg:finish(how) -> response | nil, kind, message [, sent], where how is "done" (the
** transfer ended), "stopped" (the driver stopped it: the answer is in, or the
** request is out) or "cancelled".
*/
static int leg_finish(lua_State *L) {
  static const char *const hows[] = {"done", "stopped", "cancelled", NULL};
  static const int outcomes[] = {OUT_DONE, OUT_STOPPED, OUT_CANCELLED};
  Leg *leg = started_leg(L);
  int outcome = outcomes[luaL_checkoption(L, 2, NULL, hows)], sent;
  if (outcome == OUT_DONE && !leg->x.done) return luaL_error(L, "finish: the exchange has not ended");
  if (outcome != OUT_DONE && !leg->x.done) leg->x.t1 = mcp_monotonic_ns();
  sent = leg_settle(leg);
  lua_pushnil(L);
  lua_setiuservalue(L, 1, UV_BODY);
  return leg_outcome(L, leg, outcome, sent);
}

/*
** leg:abort(): drop a started exchange without an outcome (its driver was
** abandoned or raised). Idempotent; never raises on a leg.
*/
static int leg_abort(lua_State *L) {
  Leg *leg = luaL_checkudata(L, 1, LEG_MT);
  if (leg->easy != NULL && leg->started) {
    leg_settle(leg);
    mcp_http_buf_trim(&leg->body);
    mcp_http_buf_trim(&leg->stream);
    mcp_http_buf_trim(&leg->head);
  }
  lua_pushnil(L);
  lua_setiuservalue(L, 1, UV_BODY);
  return 0;
}

/* ==================================================================== */
/* Registration                                                         */
/* ==================================================================== */

/*
** Adds http_leg and http_pool to the module table. Metatables are made only the
** first time (busted reopens the module per spec file).
*/
void mcp_register_http(lua_State *L) {
  static const luaL_Reg methods[] = {{"send", leg_send},     {"start", leg_start}, {"pump", leg_pump},
                                     {"finish", leg_finish}, {"abort", leg_abort}, {"status", leg_status},
                                     {"close", leg_close},   {NULL, NULL}};
  static const luaL_Reg fns[] = {{"http_leg", l_http_leg}, {"http_pool", mcp_http_pool_new}, {NULL, NULL}};
  if (luaL_newmetatable(L, LEG_MT)) {
    luaL_newlib(L, methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, leg_close);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, leg_close);
    lua_setfield(L, -2, "__close");
    lua_pushcfunction(L, leg_tostring);
    lua_setfield(L, -2, "__tostring");
  }
  lua_pop(L, 1);
  if (luaL_newmetatable(L, POOL_MT)) {
    lua_pushcfunction(L, mcp_http_pool_gc);
    lua_setfield(L, -2, "__gc");
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, mcp_http_pool_gc);
    lua_setfield(L, -2, "close");
    lua_setfield(L, -2, "__index");
  }
  lua_pop(L, 1);
  if (luaL_newmetatable(L, RESPONSE_MT)) {
    lua_pushcfunction(L, mcp_http_response_index);
    lua_setfield(L, -2, "__index");
  }
  lua_pop(L, 1);
  luaL_setfuncs(L, fns, 0);
}
