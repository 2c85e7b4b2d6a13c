/*
** http.c: the HTTP leg (one exchange: no redirects, TLS verified, the read
** cap, millisecond timeouts, a polled cancel hook, the credential injected at
** send time and wiped after) and the resolver the host gate checks before it
** pins an address.
**
** A leg owns one libcurl easy handle and its own multi handle. The multi
** handle holds the connection pool and the DNS cache, so kept-alive
** connections and pinned addresses belong to this leg alone. We drive the
** multi handle ourselves, which is what lets Lua run (the cancel hook, the
** stream consumer) between libcurl calls under lua_pcall instead of inside a
** libcurl callback: a Lua error can never longjmp through libcurl. libcurl's
** callbacks only touch C buffers owned by the leg userdata, so a raise at any
** point leaves nothing unowned (close/__gc frees it all).
*/
#include <errno.h>
#include <poll.h>
#include <limits.h>
#include <netdb.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <curl/curl.h>

#include "core.h"

#define LEG_MT   "mcpclient.http_leg"
#define ADDRS_MT "mcpclient.addrinfo"

#define DEFAULT_CONNECT_TIMEOUT_MS 10000
#define DEFAULT_MAX_BYTES          2097152
#define POLL_MS                    10            /* the cancel hook's polling period */
#define HEAD_CAP                   (256 * 1024)  /* response header bytes, all lines */
#define KEEP_CAP                   (256 * 1024)  /* larger buffers are released after a send */
#define MAX_BYTES_LIMIT            (1024 * 1024 * 1024)  /* the largest max_bytes accepted */
#define MEDIA_CAP                  128           /* media type bytes reported; longer ones are cut */

/* ===================================================================== */
/* Request fields: one list, expanded into the enum, the names and slots  */
/* ===================================================================== */

#define REQ_FIELDS(X) \
  X(METHOD, method) X(URL, url) X(HEADERS, headers) X(SECRET_HEADER, secret_header) \
  X(BODY, body) X(TIMEOUT_MS, timeout_ms) X(CONNECT_TIMEOUT_MS, connect_timeout_ms) \
  X(MAX_BYTES, max_bytes) X(PIN, pin) X(CA_FILE, ca_file) X(CLIENT_CERT, client_cert) \
  X(CLIENT_KEY, client_key) X(CANCEL, cancel) X(ON_STREAM, on_stream) X(SEND_ONLY, send_only) \
  X(IDEMPOTENT, idempotent)

#define AS_ENUM(id, name) F_##id,
enum { REQ_FIELDS(AS_ENUM) F_COUNT };
#undef AS_ENUM

#define AS_NAME(id, name) {#name, sizeof(#name) - 1},
static const struct { const char *name; size_t len; } field_names[F_COUNT] = {
  REQ_FIELDS(AS_NAME)
};
#undef AS_NAME

/* send(self, req): the fields are copied into fixed stack slots after req, so
   every string libcurl points at stays anchored even if a hook edits req. */
#define SLOT(f) (3 + (f))

enum { M_POST, M_GET, M_DELETE };
enum { BODY_UNDECIDED, BODY_KEEP, BODY_STREAM };
enum { OUT_DONE, OUT_STOPPED, OUT_CANCELLED, OUT_RAISE, OUT_CLOSED, OUT_MULTI_FAIL };

/* A growable byte buffer from malloc: libcurl callbacks fill it, so it cannot raise. */
typedef struct Buf {
  char *p;
  size_t len, cap;
} Buf;

typedef struct Leg {
  CURL *easy;                   /* NULL once closed */
  CURLM *multi;
  CURLU *parsed;                /* reused to check a pin against the url */
  struct curl_slist *headers;   /* this send's request headers; holds the credential copy */
  struct curl_slist *secret;    /* the node of headers carrying the credential */
  struct curl_slist *resolve;   /* the last CURLOPT_RESOLVE list: libcurl may still point at it */
  char *pin;                    /* the pin loaded into this multi handle's DNS cache, or NULL */
  char *default_cainfo;         /* libcurl's built-in CA bundle, restored after a custom one */
  int custom_tls;               /* the last send set ca_file, client_cert or client_key */
  int busy;                     /* a send is running: hooks may re-enter */
  curl_socket_t last_socket;    /* the socket the last exchange used, or CURL_SOCKET_BAD */
  /* per exchange, written by the libcurl callbacks */
  Buf body, stream, head;
  size_t max_bytes, held;       /* body bytes kept or streamed so far */
  int want_stream;              /* on_stream was given */
  int mode;                     /* BODY_*: decided at the first body byte */
  int in_head;                  /* between a status line and its blank line */
  int event_stream;             /* the current response is text/event-stream */
  char media[MEDIA_CAP];        /* its media type: the last Content-Type of the head, lower case */
  int truncated, out_of_memory, head_overflow;
  int attempts;                 /* requests libcurl began for this exchange (see on_prereq) */
  int idempotent;               /* this exchange may be resent on a fresh connection */
  char errbuf[CURL_ERROR_SIZE];
} Leg;

/* The request after validation: pointers into strings anchored in SLOT()s. */
typedef struct Request {
  int method;
  const char *url;
  const char *secret;
  const char *body;
  size_t body_len;
  long timeout_ms, connect_timeout_ms;
  size_t max_bytes;
  const char *pin;
  size_t pin_hostport;          /* length of "host:port" in pin */
  const char *ca_file, *client_cert, *client_key;
  lua_Integer n_headers;
  int has_cancel;
  int send_only;                /* stop once the request is sent: nobody waits for the answer */
  int idempotent;               /* sending it twice does no harm (initialize, GET, DELETE) */
} Request;

/* What the driving loop saw. */
typedef struct Exchange {
  int64_t t0, t1;
  CURLcode code;
  CURLMcode multi_code;
  long status;
  int done;
} Exchange;

/* ===================================================================== */
/* Small helpers                                                          */
/* ===================================================================== */

/*
** Zero memory in a way the compiler may not drop as a dead store: the
** credential copy is about to be freed, which is exactly when a plain memset
** is allowed to vanish.
*/
static void wipe(void *p, size_t n) {
  volatile unsigned char *v = p;
  while (n--) *v++ = 0;
}

/* ASCII-only case folding: header names and media types are ASCII, and the
   C library's tolower would follow the locale. */
static char ascii_lower(char c) {
  return (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
}

static int ascii_ieq(const char *a, const char *b, size_t n) {
  size_t i;
  for (i = 0; i < n; i++)
    if (ascii_lower(a[i]) != ascii_lower(b[i])) return 0;
  return 1;
}

/*
** Append n bytes; 0 when memory ran out. Called from libcurl callbacks, so it
** reports instead of raising.
*/
static int buf_append(Buf *b, const char *s, size_t n) {
  if (n > b->cap - b->len) {
    size_t cap = b->cap ? b->cap : 16384;
    char *p;
    if (n > SIZE_MAX / 2 - b->len) return 0;
    while (cap < b->len + n) cap *= 2;
    p = realloc(b->p, cap);
    if (p == NULL) return 0;
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  return 1;
}

/* An idle leg keeps small buffers for the next send but not a 2 MiB one. */
static void buf_trim(Buf *b) {
  b->len = 0;
  if (b->cap > KEEP_CAP) {
    free(b->p);
    b->p = NULL;
    b->cap = 0;
  }
}

static void buf_free(Buf *b) {
  free(b->p);
  b->p = NULL;
  b->len = b->cap = 0;
}

/* ===================================================================== */
/* libcurl callbacks: C buffers only, never Lua                           */
/* ===================================================================== */

/*
** Note the media type of a "Content-Type:" header line: the part before ';',
** trimmed of spaces and tabs, lower-cased. Any text/event-stream line of a
** head makes it an event stream (a later line cannot take that back);
** otherwise the last line wins. The same reading decides streaming and is
** reported to Lua, so the two can never disagree about a body.
*/
static void note_media_type(Leg *leg, const char *line, size_t n) {
  static const char name[] = "content-type:", stream[] = "text/event-stream";
  size_t i = sizeof name - 1, end, k;
  if (n < i || !ascii_ieq(line, name, i) || leg->event_stream) return;
  while (i < n && (line[i] == ' ' || line[i] == '\t')) i++;
  end = i;
  while (end < n && line[end] != ';' && line[end] != '\r' && line[end] != '\n') end++;
  while (end > i && (line[end - 1] == ' ' || line[end - 1] == '\t')) end--;
  leg->event_stream = end - i == sizeof stream - 1 && ascii_ieq(line + i, stream, sizeof stream - 1);
  for (k = 0; k < end - i && k < MEDIA_CAP - 1; k++) leg->media[k] = ascii_lower(line[i + k]);
  leg->media[k] = '\0';
}

/*
** One header line at a time, status lines included. A new status line starts
** a new response (an interim 1xx, whose headers must not leak into the final
** one), so it resets what was kept. Trailers after the body are kept as
** headers but never change the media type.
*/
static size_t on_header(char *line, size_t size, size_t n, void *ud) {
  Leg *leg = ud;
  (void)size;  /* always 1 */
  if (n >= 5 && memcmp(line, "HTTP/", 5) == 0) {
    leg->head.len = 0;
    leg->event_stream = 0;
    leg->media[0] = '\0';
    leg->in_head = 1;
  } else if (leg->in_head) {
    if (n >= 1 && n <= 2 && (line[0] == '\r' || line[0] == '\n'))
      leg->in_head = 0;
    else
      note_media_type(leg, line, n);
  }
  if (leg->head.len + n > HEAD_CAP) {
    leg->head_overflow = 1;
    return 0;
  }
  if (!buf_append(&leg->head, line, n)) {
    leg->out_of_memory = 1;
    return 0;
  }
  return n;
}

/*
** Body bytes. Kept or queued for the stream consumer, up to max_bytes in all.
** Reaching the cap ends the transfer (a short return makes libcurl stop)
** unless the declared length says the body is exactly complete.
*/
static size_t on_body(char *data, size_t size, size_t n, void *ud) {
  Leg *leg = ud;
  size_t room = leg->max_bytes - leg->held, take = n < room ? n : room;
  Buf *dst;
  (void)size;  /* always 1 */
  if (leg->mode == BODY_UNDECIDED)
    leg->mode = (leg->want_stream && leg->event_stream) ? BODY_STREAM : BODY_KEEP;
  dst = leg->mode == BODY_STREAM ? &leg->stream : &leg->body;
  if (take > 0 && !buf_append(dst, data, take)) {
    leg->out_of_memory = 1;
    return 0;
  }
  leg->held += take;
  if (take < n) {
    leg->truncated = 1;
    return 0;
  }
  if (n > 0 && leg->held == leg->max_bytes) {
    curl_off_t declared = -1;
    if (curl_easy_getinfo(leg->easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &declared) != CURLE_OK ||
        declared != (curl_off_t)leg->max_bytes) {
      leg->truncated = 1;
      return 0;
    }
  }
  return n;
}

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

/* ===================================================================== */
/* Leg lifetime                                                           */
/* ===================================================================== */

/*
** Forget this send's header list, wiping the credential copy first; libcurl
** must not keep a pointer to the freed list.
*/
static void drop_headers(Leg *leg) {
  if (leg->secret != NULL && leg->secret->data != NULL)
    wipe(leg->secret->data, strlen(leg->secret->data));
  leg->secret = NULL;
  if (leg->headers != NULL) {
    if (leg->easy != NULL) curl_easy_setopt(leg->easy, CURLOPT_HTTPHEADER, (struct curl_slist *)NULL);
    curl_slist_free_all(leg->headers);
    leg->headers = NULL;
  }
}

/*
** Release everything. Safe on a half-built leg, on a closed one, and in the
** middle of a send (a hook may close its own leg): the handle is taken out
** of the multi first, and the send loop notices easy == NULL.
*/
static void leg_release(Leg *leg) {
  if (leg->easy != NULL && leg->multi != NULL && leg->busy)
    curl_multi_remove_handle(leg->multi, leg->easy);
  drop_headers(leg);
  if (leg->easy != NULL) curl_easy_cleanup(leg->easy);
  if (leg->multi != NULL) curl_multi_cleanup(leg->multi);
  if (leg->parsed != NULL) curl_url_cleanup(leg->parsed);
  leg->easy = NULL;
  leg->multi = NULL;
  leg->parsed = NULL;
  curl_slist_free_all(leg->resolve);
  leg->resolve = NULL;
  free(leg->pin);
  leg->pin = NULL;
  free(leg->default_cainfo);
  leg->default_cainfo = NULL;
  buf_free(&leg->body);
  buf_free(&leg->stream);
  buf_free(&leg->head);
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

/* libcurl's global state is process-wide; busted reopens the module per file. */
static void ensure_curl(lua_State *L) {
  static int ready = 0;
  if (!ready) {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
      luaL_error(L, "libcurl could not be initialised");
    ready = 1;
  }
}

/*
** The options every send shares: no redirects, http(s) only, TLS verified,
** no signals, no proxy (a proxy would dial instead of the pinned address),
** and our buffers as the sinks.
*/
static int set_fixed_options(Leg *leg) {
  CURL *e = leg->easy;
  char *cainfo = NULL;
  int bad = 0;
  bad |= curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L) != CURLE_OK;
  bad |= curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L) != CURLE_OK;
  bad |= curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L) != CURLE_OK;
  bad |= curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https") != CURLE_OK;
  bad |= curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https") != CURLE_OK;
  bad |= curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 1L) != CURLE_OK;
  bad |= curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 2L) != CURLE_OK;
  bad |= curl_easy_setopt(e, CURLOPT_PROXY, "") != CURLE_OK;
  bad |= curl_easy_setopt(e, CURLOPT_USERAGENT, "mcpclient/" MCP_VERSION) != CURLE_OK;
  bad |= curl_easy_setopt(e, CURLOPT_ERRORBUFFER, leg->errbuf) != CURLE_OK;
  bad |= curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body) != CURLE_OK;
  bad |= curl_easy_setopt(e, CURLOPT_WRITEDATA, (void *)leg) != CURLE_OK;
  bad |= curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header) != CURLE_OK;
  bad |= curl_easy_setopt(e, CURLOPT_HEADERDATA, (void *)leg) != CURLE_OK;
  bad |= curl_easy_setopt(e, CURLOPT_PREREQFUNCTION, on_prereq) != CURLE_OK;
  bad |= curl_easy_setopt(e, CURLOPT_PREREQDATA, (void *)leg) != CURLE_OK;
  if (curl_easy_getinfo(e, CURLINFO_CAINFO, &cainfo) == CURLE_OK && cainfo != NULL) {
    size_t n = strlen(cainfo) + 1;
    leg->default_cainfo = malloc(n);
    if (leg->default_cainfo == NULL) return 0;
    memcpy(leg->default_cainfo, cainfo, n);
  }
  return !bad;
}

/* core.http_leg(): created closed, then the handles are acquired. */
static int l_http_leg(lua_State *L) {
  Leg *leg;
  ensure_curl(L);
  leg = lua_newuserdatauv(L, sizeof *leg, 0);
  memset(leg, 0, sizeof *leg);
  leg->last_socket = CURL_SOCKET_BAD;
  luaL_setmetatable(L, LEG_MT);
  leg->easy = curl_easy_init();
  leg->multi = curl_multi_init();
  if (leg->multi != NULL) curl_multi_setopt(leg->multi, CURLMOPT_MAXCONNECTS, 1L);
  leg->parsed = curl_url();
  if (leg->easy == NULL || leg->multi == NULL || leg->parsed == NULL || !set_fixed_options(leg)) {
    leg_release(leg);
    return luaL_error(L, "libcurl could not create a transfer handle");
  }
  return 1;
}

/* ===================================================================== */
/* Reading the request table (may raise: nothing is allocated yet)        */
/* ===================================================================== */

/* Which request field a key names, or -1: a linear scan beats hashing for 14 short names. */
static int field_index(const char *k, size_t len) {
  int f;
  for (f = 0; f < F_COUNT; f++)
    if (field_names[f].len == len && memcmp(field_names[f].name, k, len) == 0) return f;
  return -1;
}

/* A string field or NULL when absent; a header-like one may carry no line break. */
static const char *string_field(lua_State *L, int f, size_t *len, int line) {
  size_t n, i;
  const char *s;
  int t = lua_type(L, SLOT(f));
  if (t == LUA_TNIL) return NULL;
  if (t != LUA_TSTRING) luaL_error(L, "send: '%s' must be a string", field_names[f].name);
  s = lua_tolstring(L, SLOT(f), &n);
  if (len != NULL) *len = n;
  if (f == F_BODY) return s;
  for (i = 0; i < n; i++)
    if (s[i] == '\0' || (line && (s[i] == '\r' || s[i] == '\n')))
      luaL_error(L, "send: '%s' must not contain NUL%s", field_names[f].name,
                 line ? " or line breaks" : "");
  return s;
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

/* The 'headers' field: an array of strings without holes, NUL or line breaks. */
static void read_headers(lua_State *L, Request *r) {
  r->n_headers = 0;
  if (!lua_isnil(L, SLOT(F_HEADERS))) {
    lua_Integer i;
    if (!lua_istable(L, SLOT(F_HEADERS))) luaL_error(L, "send: 'headers' must be an array of strings");
    r->n_headers = (lua_Integer)lua_rawlen(L, SLOT(F_HEADERS));
    lua_pushnil(L);
    while (lua_next(L, SLOT(F_HEADERS))) {
      int isint = 0;
      lua_Integer k = lua_tointegerx(L, -2, &isint);
      const char *h;
      size_t hlen, j;
      if (lua_type(L, -2) != LUA_TNUMBER || !isint || k < 1 || k > r->n_headers)
        luaL_error(L, "send: 'headers' must be an array of strings");
      if (lua_type(L, -1) != LUA_TSTRING) luaL_error(L, "send: headers[%I] must be a string", k);
      h = lua_tolstring(L, -1, &hlen);
      for (j = 0; j < hlen; j++)
        if (h[j] == '\0' || h[j] == '\r' || h[j] == '\n')
          luaL_error(L, "send: headers[%I] must not contain NUL or line breaks", k);
      lua_pop(L, 1);
    }
    for (i = 1; i <= r->n_headers; i++)  /* holes would make rawlen unreliable */
      if (lua_rawgeti(L, SLOT(F_HEADERS), i) != LUA_TSTRING) luaL_error(L, "send: 'headers' has a hole at %I", i);
      else lua_pop(L, 1);
  }
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
  if (r->body != NULL && r->method != M_POST) luaL_error(L, "send: a 'body' is only sent with POST");
  r->timeout_ms = (long)count_field(L, F_TIMEOUT_MS, 0, LONG_MAX);
  r->connect_timeout_ms = (long)count_field(L, F_CONNECT_TIMEOUT_MS, DEFAULT_CONNECT_TIMEOUT_MS, LONG_MAX);
  r->max_bytes = (size_t)count_field(L, F_MAX_BYTES, DEFAULT_MAX_BYTES, MAX_BYTES_LIMIT);
  r->pin = string_field(L, F_PIN, &len, 1);
  r->pin_hostport = 0;
  if (r->pin != NULL && (r->pin_hostport = pin_hostport(r->pin, len)) == 0)
    luaL_error(L, "send: 'pin' must be \"host:port:address\"");
  r->ca_file = string_field(L, F_CA_FILE, NULL, 0);
  r->client_cert = string_field(L, F_CLIENT_CERT, NULL, 0);
  r->client_key = string_field(L, F_CLIENT_KEY, NULL, 0);
  if (!lua_isnil(L, SLOT(F_CANCEL)) && !lua_isfunction(L, SLOT(F_CANCEL)))
    luaL_error(L, "send: 'cancel' must be a function");
  if (!lua_isnil(L, SLOT(F_ON_STREAM)) && !lua_isfunction(L, SLOT(F_ON_STREAM)))
    luaL_error(L, "send: 'on_stream' must be a function");
  if (!lua_isnil(L, SLOT(F_SEND_ONLY)) && !lua_isboolean(L, SLOT(F_SEND_ONLY)))
    luaL_error(L, "send: 'send_only' must be a boolean");
  if (!lua_isnil(L, SLOT(F_IDEMPOTENT)) && !lua_isboolean(L, SLOT(F_IDEMPOTENT)))
    luaL_error(L, "send: 'idempotent' must be a boolean");
  r->idempotent = lua_toboolean(L, SLOT(F_IDEMPOTENT));
  r->has_cancel = lua_isfunction(L, SLOT(F_CANCEL));
  r->send_only = lua_toboolean(L, SLOT(F_SEND_ONLY));
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
  if (curl_url_set(leg->parsed, CURLUPART_URL, r->url, CURLU_GUESS_SCHEME | CURLU_NON_SUPPORT_SCHEME) != CURLUE_OK)
    return -1;
  if (curl_url_get(leg->parsed, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
      curl_url_get(leg->parsed, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK) {
    size_t hlen = strlen(host), plen = strlen(port);
    ok = hlen + 1 + plen == r->pin_hostport && ascii_ieq(host, r->pin, hlen) && r->pin[hlen] == ':' &&
         memcmp(port, r->pin + hlen + 1, plen) == 0;
  }
  curl_free(host);
  curl_free(port);
  return ok;
}

/* ===================================================================== */
/* Configuring one exchange (no Lua errors from here to the end of it)    */
/* ===================================================================== */

/*
** Make the DNS cache hold exactly this send's pin. A changed pin (added,
** replaced or removed) gets a fresh multi handle: its empty pool cannot hand
** back a kept-alive connection that was dialled to another address, and its
** empty DNS cache forgets the old pin. An unchanged pin keeps both, so the
** warm path stays one connection.
*/
static const char *apply_pin(Leg *leg, const Request *r) {
  struct curl_slist *list = NULL;
  CURLM *multi;
  char *copy = NULL;
  if (r->pin == NULL ? leg->pin == NULL : (leg->pin != NULL && strcmp(r->pin, leg->pin) == 0))
    return NULL;
  if (r->pin != NULL) {
    size_t n = strlen(r->pin) + 1;
    copy = malloc(n);
    if (copy == NULL) return "out of memory";
    memcpy(copy, r->pin, n);
    list = curl_slist_append(NULL, r->pin);
    if (list == NULL) {
      free(copy);
      return "out of memory";
    }
  }
  multi = curl_multi_init();
  if (multi != NULL) curl_multi_setopt(multi, CURLMOPT_MAXCONNECTS, 1L);
  if (multi == NULL) {
    free(copy);
    curl_slist_free_all(list);
    return "libcurl could not create a multi handle";
  }
  curl_multi_cleanup(leg->multi);
  leg->multi = multi;
  curl_easy_setopt(leg->easy, CURLOPT_RESOLVE, list);
  curl_slist_free_all(leg->resolve);
  leg->resolve = list;
  free(leg->pin);
  leg->pin = copy;
  return NULL;
}

/*
** Bytes waiting on the idle kept-alive connection arrived unasked (a server
** writing past its Content-Length): libcurl 7.88 would read them as the next
** response. Such a connection is not reused.
*/
static int idle_connection_dirty(Leg *leg) {
  struct pollfd p;
  if (leg->last_socket == CURL_SOCKET_BAD) return 0;
  p.fd = leg->last_socket;
  p.events = POLLIN;
  p.revents = 0;
  return poll(&p, 1, 0) != 0;
}

/* TLS files: set when given, and put back to libcurl's defaults once after. */
static const char *apply_tls(Leg *leg, const Request *r) {
  int custom = r->ca_file != NULL || r->client_cert != NULL || r->client_key != NULL;
  if (!custom && !leg->custom_tls) return NULL;
  leg->custom_tls = 1;  /* until all three are known to be reset */
  if (curl_easy_setopt(leg->easy, CURLOPT_CAINFO, r->ca_file ? r->ca_file : leg->default_cainfo) != CURLE_OK ||
      curl_easy_setopt(leg->easy, CURLOPT_SSLCERT, r->client_cert) != CURLE_OK ||
      curl_easy_setopt(leg->easy, CURLOPT_SSLKEY, r->client_key) != CURLE_OK)
    return "out of memory";
  leg->custom_tls = custom;
  return NULL;
}

/*
** Set this send's options and build its header list (credential last, so its
** node is the tail). Everything allocated here is owned by the leg. Returns
** NULL, or a reason that becomes a "transport" failure.
*/
static const char *configure(lua_State *L, Leg *leg, const Request *r) {
  CURL *e = leg->easy;
  struct curl_slist *node;
  const char *why;
  lua_Integer i;

  if (curl_easy_setopt(e, CURLOPT_URL, r->url) != CURLE_OK) return "out of memory";
  curl_easy_setopt(e, CURLOPT_FRESH_CONNECT, idle_connection_dirty(leg) ? 1L : 0L);
  if (r->method == M_POST) {
    curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, (char *)NULL);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(r->body ? r->body_len : 0));
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, r->body ? r->body : "");
  } else {
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, (char *)NULL);  /* no pointer to an old body */
    curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    if (curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, r->method == M_DELETE ? "DELETE" : NULL) != CURLE_OK)
      return "out of memory";
  }
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, r->timeout_ms);
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, r->connect_timeout_ms);
  if ((why = apply_pin(leg, r)) != NULL) return why;
  if ((why = apply_tls(leg, r)) != NULL) return why;

  /* The list is built node by node into the leg, so a failure part-way frees it. */
  if ((leg->headers = curl_slist_append(NULL, "Expect:")) == NULL) return "out of memory";
  node = leg->headers;
  for (i = 1; i <= r->n_headers; i++) {
    lua_rawgeti(L, SLOT(F_HEADERS), i);  /* checked: a string, anchored by the table */
    node = curl_slist_append(node, lua_tostring(L, -1));
    lua_pop(L, 1);
    if (node == NULL) return "out of memory";
    node = node->next;
  }
  if (r->secret != NULL) {
    if (curl_slist_append(node, r->secret) == NULL) return "out of memory";
    leg->secret = node->next;
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
  leg->idempotent = r->idempotent;
  leg->errbuf[0] = '\0';
  return NULL;
}

/* ===================================================================== */
/* Driving the exchange                                                   */
/* ===================================================================== */

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
** buffer) once they are counted.
*/
static int request_sent(Leg *leg, const Request *r) {
  long head = 0;
  curl_off_t up = 0;
  if (curl_easy_getinfo(leg->easy, CURLINFO_REQUEST_SIZE, &head) != CURLE_OK || head <= 0) return 0;
  if (r->body == NULL || r->body_len == 0) return 1;
  return curl_easy_getinfo(leg->easy, CURLINFO_SIZE_UPLOAD_T, &up) == CURLE_OK && up >= (curl_off_t)r->body_len;
}

/*
** The loop: perform, note completion, deliver stream bytes, poll the cancel
** hook, wait at most POLL_MS. A send_only exchange stops as soon as the
** request is out. Every hook may close the leg, so the handles
** are re-checked after each one.
*/
static int drive(lua_State *L, Leg *leg, const Request *r, Exchange *x) {
  int running = 0;
  x->t0 = mcp_monotonic_ns();
  if ((x->multi_code = curl_multi_add_handle(leg->multi, leg->easy)) != CURLM_OK) return OUT_MULTI_FAIL;
  for (;;) {
    CURLMsg *msg;
    int queued, hook;
    if ((x->multi_code = curl_multi_perform(leg->multi, &running)) != CURLM_OK) return OUT_MULTI_FAIL;
    while ((msg = curl_multi_info_read(leg->multi, &queued)) != NULL)
      if (msg->msg == CURLMSG_DONE && msg->easy_handle == leg->easy) {
        x->done = 1;
        x->code = msg->data.result;
      }
    if (x->done) x->t1 = mcp_monotonic_ns();
    if (leg->stream.len > 0) {
      hook = deliver(L, leg);
      if (hook < 0) return OUT_RAISE;
      if (leg->easy == NULL) return OUT_CLOSED;
      if (hook) {
        if (!x->done) x->t1 = mcp_monotonic_ns();
        return OUT_STOPPED;
      }
    }
    if (x->done) return OUT_DONE;
    if (r->send_only && request_sent(leg, r)) {
      x->t1 = mcp_monotonic_ns();
      return OUT_STOPPED;
    }
    if (r->has_cancel) {
      hook = poll_cancel(L);
      if (hook < 0) return OUT_RAISE;
      if (leg->easy == NULL) return OUT_CLOSED;
      if (hook) return OUT_CANCELLED;
    }
    if ((x->multi_code = curl_multi_poll(leg->multi, NULL, 0, POLL_MS, NULL)) != CURLM_OK) return OUT_MULTI_FAIL;
  }
}

/* ===================================================================== */
/* The result                                                             */
/* ===================================================================== */

/*
** The kept header lines as { [lower-case name] = trimmed value }, last wins.
** The first line is the status line; lines without a colon are skipped.
*/
static void push_headers(lua_State *L, Leg *leg) {
  char *p = leg->head.p, *end = p + leg->head.len;
  int first = 1;
  lua_createtable(L, 0, 8);
  while (p < end) {
    char *eol = memchr(p, '\n', (size_t)(end - p)), *line = p, *colon, *v, *ve, *c;
    if (eol == NULL) eol = end;
    p = eol < end ? eol + 1 : end;
    if (first) {
      first = 0;
      continue;
    }
    colon = memchr(line, ':', (size_t)(eol - line));
    if (colon == NULL || colon == line) continue;
    for (c = line; c < colon; c++) *c = ascii_lower(*c);
    v = colon + 1;
    ve = eol;
    while (v < ve && (*v == ' ' || *v == '\t')) v++;
    while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t' || ve[-1] == '\r')) ve--;
    lua_pushlstring(L, line, (size_t)(colon - line));
    lua_pushlstring(L, v, (size_t)(ve - v));
    lua_rawset(L, -3);
  }
}

/* The response table of a completed (or deliberately stopped) exchange. */
static void push_response(lua_State *L, Leg *leg, const Exchange *x, int stopped) {
  lua_createtable(L, 0, 8);
  lua_pushinteger(L, x->status);
  lua_setfield(L, -2, "status");
  push_headers(L, leg);
  lua_setfield(L, -2, "headers");
  lua_pushstring(L, leg->media);
  lua_setfield(L, -2, "media_type");
  if (leg->mode == BODY_STREAM) lua_pushliteral(L, "");
  else lua_pushlstring(L, leg->body.p ? leg->body.p : "", leg->body.len);
  lua_setfield(L, -2, "body");
  lua_pushnumber(L, (lua_Number)(x->t1 - x->t0) / 1e6);
  lua_setfield(L, -2, "duration_ms");
  lua_pushboolean(L, leg->mode == BODY_STREAM || (leg->mode == BODY_UNDECIDED && leg->want_stream && leg->event_stream));
  lua_setfield(L, -2, "streamed");
  lua_pushboolean(L, stopped);
  lua_setfield(L, -2, "stopped");
  lua_pushboolean(L, leg->truncated);
  lua_setfield(L, -2, "truncated");
}

/* nil, kind, message: the failure triple; message never holds request headers or body. */
static int push_failure(lua_State *L, const char *kind, const char *message) {
  lua_pushnil(L);
  lua_pushstring(L, kind);
  lua_pushstring(L, message);
  return 3;
}

/*
** nil, kind, text for a transfer libcurl ended with an error. The kind says
** how far the request got: "timeout" when the time ran out; "interrupted"
** when the request had left (the server may have acted on it, so it must not
** be sent again); "transport" when it never left (safe to send again).
*/
static int push_curl_failure(lua_State *L, Leg *leg, CURLcode code, int sent) {
  const char *text = leg->errbuf[0] ? leg->errbuf : curl_easy_strerror(code);
  if (leg->out_of_memory) text = "out of memory while reading the response";
  else if (leg->head_overflow) text = "the response headers are larger than 262144 bytes";
  else if (leg->attempts > 1 && !leg->idempotent)
    text = "the connection closed after the request was sent, before any answer";
  if (leg->attempts > 1 && !leg->idempotent) return push_failure(L, "interrupted", text);
  if (code == CURLE_OPERATION_TIMEDOUT) return push_failure(L, "timeout", text);
  return push_failure(L, sent ? "interrupted" : "transport", text);
}

/* ===================================================================== */
/* leg:send(req)                                                          */
/* ===================================================================== */

/*
** What a finished exchange returns: the response table, or the failure
** triple for a cancellation, a multi-handle failure or a libcurl error.
*/
static int push_outcome(lua_State *L, Leg *leg, const Exchange *x, int outcome, int sent) {
  int results;
  switch (outcome) {
    case OUT_CANCELLED:
      results = push_failure(L, "cancelled", "the call was cancelled");
      break;
    case OUT_MULTI_FAIL:
      results = push_failure(L, "transport", curl_multi_strerror(x->multi_code));
      break;
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
** leg:send(req) -> response | nil, kind, message. Everything that can raise
** (validation, the pre-send cancel poll) happens before anything is allocated;
** from configure() to the end of the exchange Lua runs only under lua_pcall,
** and a hook's error is re-raised after the handle is out of the multi and
** the credential copy is wiped.
*/
static int leg_send(lua_State *L) {
  Leg *leg = luaL_checkudata(L, 1, LEG_MT);
  Request r;
  Exchange x;
  const char *why;
  int outcome, results, sent;

  if (leg->easy == NULL) return luaL_error(L, "attempt to use a closed http leg");
  if (leg->busy) return luaL_error(L, "the http leg is busy with another send");
  luaL_checktype(L, 2, LUA_TTABLE);
  lua_settop(L, 2);
  luaL_checkstack(L, F_COUNT + 12, "http leg send");
  memset(&r, 0, sizeof r);
  memset(&x, 0, sizeof x);
  read_request(L, &r);
  if (r.pin != NULL && pin_matches_url(leg, &r) == 0)
    return luaL_error(L, "send: 'pin' does not name the url's host and port");

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
  leg->busy = 1;
  if ((why = configure(L, leg, &r)) != NULL) {
    drop_headers(leg);
    leg->busy = 0;
    return push_failure(L, "transport", why);
  }
  outcome = drive(L, leg, &r, &x);
  if (outcome == OUT_CLOSED) {  /* leg_release already removed the handle and wiped */
    leg->busy = 0;
    return luaL_error(L, "the http leg was closed during its send");
  }
  curl_easy_getinfo(leg->easy, CURLINFO_RESPONSE_CODE, &x.status);
  sent = x.status > 0 || request_sent(leg, &r);
  if (curl_easy_getinfo(leg->easy, CURLINFO_ACTIVESOCKET, &leg->last_socket) != CURLE_OK)
    leg->last_socket = CURL_SOCKET_BAD;
  curl_multi_remove_handle(leg->multi, leg->easy);
  drop_headers(leg);
  leg->busy = 0;

  if (outcome == OUT_RAISE) return lua_error(L);
  results = push_outcome(L, leg, &x, outcome, sent);
  buf_trim(&leg->body);
  buf_trim(&leg->stream);
  buf_trim(&leg->head);
  return results;
}

/* ===================================================================== */
/* core.resolve(host)                                                     */
/* ===================================================================== */

/* The getaddrinfo list lives in a box so a raise while it is read cannot leak it. */
typedef struct AddrBox {
  struct addrinfo *list;
} AddrBox;

/* Frees the list if resolve() was interrupted by a raise while reading it. */
static int addrbox_gc(lua_State *L) {
  AddrBox *box = luaL_checkudata(L, 1, ADDRS_MT);
  if (box->list != NULL) freeaddrinfo(box->list);
  box->list = NULL;
  return 0;
}

/*
** resolve(host) -> { numeric addresses } in getaddrinfo order, duplicates
** removed; an IP literal (brackets allowed) comes back as itself. Failures
** return nil, message. It blocks for as long as the system resolver does.
*/
static int l_resolve(lua_State *L) {
  size_t len;
  const char *host = luaL_checklstring(L, 1, &len);
  char name[256];
  struct addrinfo hints, *ai;
  AddrBox *box;
  lua_Integer n = 0;
  int rc;
  if (len >= 2 && host[0] == '[' && host[len - 1] == ']') {
    host++;
    len -= 2;
  }
  if (len == 0 || len >= sizeof name || memchr(host, '\0', len) != NULL) {
    lua_pushnil(L);
    lua_pushliteral(L, "the host name is empty, too long or contains NUL");
    return 2;
  }
  memcpy(name, host, len);
  name[len] = '\0';
  box = lua_newuserdatauv(L, sizeof *box, 0);
  box->list = NULL;
  luaL_setmetatable(L, ADDRS_MT);
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  rc = getaddrinfo(name, NULL, &hints, &box->list);
  if (rc != 0) {
    lua_pushnil(L);
    lua_pushstring(L, rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
    return 2;
  }
  lua_newtable(L);
  for (ai = box->list; ai != NULL; ai = ai->ai_next) {
    char text[256];
    lua_Integer j;
    int seen = 0;
    if (getnameinfo(ai->ai_addr, ai->ai_addrlen, text, sizeof text, NULL, 0, NI_NUMERICHOST) != 0) continue;
    for (j = 1; j <= n && !seen; j++) {
      lua_rawgeti(L, -1, j);
      seen = strcmp(lua_tostring(L, -1), text) == 0;
      lua_pop(L, 1);
    }
    if (seen) continue;
    lua_pushstring(L, text);
    lua_rawseti(L, -2, ++n);
  }
  freeaddrinfo(box->list);
  box->list = NULL;
  if (n == 0) {
    lua_pushnil(L);
    lua_pushliteral(L, "the host name resolved to no address");
    return 2;
  }
  return 1;
}

/* ===================================================================== */
/* Registration                                                           */
/* ===================================================================== */

/*
** Adds http_leg and resolve to the module table. Metatables are made only the
** first time (busted reopens the module per spec file).
*/
void mcp_register_http(lua_State *L) {
  static const luaL_Reg methods[] = {{"send", leg_send}, {"close", leg_close}, {NULL, NULL}};
  static const luaL_Reg fns[] = {{"http_leg", l_http_leg}, {"resolve", l_resolve}, {NULL, NULL}};
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
  if (luaL_newmetatable(L, ADDRS_MT)) {
    lua_pushcfunction(L, addrbox_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_pop(L, 1);
  luaL_setfuncs(L, fns, 0);
}
