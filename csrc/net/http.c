/*
** http.c: the HTTP leg (one exchange: no redirects, TLS verified, the read
** cap, millisecond timeouts, a polled cancel hook, the credential header and
** a secret body copied in at send time and wiped after). Names are resolved
** by the host gate (address.c), which pins what it allowed.
**
** One curl-multi handle per process drives every transfer, so many
** exchanges can be in flight at once. It is the driver of the engine
** (engine.c): libcurl's socket and timer callbacks put its sockets and its
** timeout into the engine's one wait, and the engine hands their readiness
** back (curl_multi_socket_action), so a transfer, a watched pipe and a host's
** own loop all wait on one descriptor. A leg owns one libcurl easy
** handle; a pool (a libcurl share handle) holds the connection cache and the
** DNS cache of the legs made from it, so kept-alive connections and pinned
** addresses belong to one connection to one server and never cross to
** another. We drive the multi handle ourselves, which is what lets Lua run
** (the cancel hook, the stream consumer) between libcurl calls instead of
** inside a libcurl callback: a Lua error can never longjmp through libcurl.
** libcurl's callbacks only touch C buffers owned by the leg userdata, so a
** raise at any point leaves nothing unowned (close/__gc frees it all).
**
** Two ways to run an exchange share that engine: leg:send(req) blocks until
** it ends (polling the hooks under lua_pcall); leg:start(req), leg:pump(),
** core.engine_step(ms) and leg:finish(how) let a Lua scheduler run many
** exchanges from coroutines, each waiting without blocking the others.
*/
#include <poll.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <curl/curl.h>
#include <openssl/crypto.h>

#include "core.h"
#include "engine.h"

#define LEG_MT    "mcpclient.http_leg"
#define POOL_MT   "mcpclient.http_pool"
#define MULTI_MT  "mcpclient.http_multi"
/* The registry slot holding the multi handle: not MULTI_MT, which names the metatable in the same registry. */
#define MULTI_KEY "mcpclient.http_multi.instance"

#define DEFAULT_CONNECT_TIMEOUT_MS 10000
#define DEFAULT_MAX_BYTES          2097152
#define POLL_MS                    10           /* the cancel hook's polling period */
#define HEAD_CAP                   (256 * 1024) /* response header bytes, all lines */
#define KEEP_CAP                   (256 * 1024) /* larger buffers are released after a send */
/* libcurl's receive buffer: a catalogue page of ~130 KB takes a quarter of the reads and write
** callbacks of libcurl's 16 KB default (measured: ~10 % of a listing's CPU, warm calls alike);
** its pages are touched only as far as an answer fills them. */
#define RECEIVE_BUFFER             65536L
#define MAX_BYTES_LIMIT            (1024 * 1024 * 1024) /* the largest max_bytes accepted */
#define MEDIA_CAP                  128                  /* media type bytes reported; longer ones are cut */
#define ENGINE_CONNECTIONS         64                   /* idle connections the engine keeps, all pools */
#define HOST_CONNECTIONS           16                   /* connections to one server in one pool; more wait */
#define SMALL_BODY                 1024 /* no libcurl asks for 100-continue for a body this small */
/* A hold_body answer this large is handed over, not copied: as a string, a listing page of 8 KiB
   and more would wait for the collector. */
#define HOLD_MIN                   (8 * 1024)

/* Leg user values: the pool it dials through, and the body of the running send. */
#define UV_POOL 1
#define UV_BODY 2

/* ==================================================================== */
/* Request fields: one list for the enum, the names, the slots          */
/* ==================================================================== */

/* clang-format off */
#define REQ_FIELDS(X) \
  X(METHOD, method) \
  X(URL, url) \
  X(HEADERS, headers) \
  X(SECRET_HEADER, secret_header) \
  X(BODY, body) \
  X(SECRET_BODY, secret_body) \
  X(TIMEOUT_MS, timeout_ms) \
  X(CONNECT_TIMEOUT_MS, connect_timeout_ms) \
  X(MAX_BYTES, max_bytes) \
  X(PIN, pin) \
  X(CA_FILE, ca_file) \
  X(CLIENT_CERT, client_cert) \
  X(CLIENT_KEY, client_key) \
  X(CANCEL, cancel) \
  X(ON_STREAM, on_stream) \
  X(SEND_ONLY, send_only) \
  X(IDEMPOTENT, idempotent) \
  X(HOLD_BODY, hold_body)
/* clang-format on */

#define AS_ENUM(id, name) F_##id,
enum { REQ_FIELDS(AS_ENUM) F_COUNT };
#undef AS_ENUM

#define AS_NAME(id, name) {#name, sizeof(#name) - 1},
static const struct {
  const char *name;
  size_t len;
} field_names[F_COUNT] = {REQ_FIELDS(AS_NAME)};
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

/* What the driving loop saw. */
typedef struct Exchange {
  int64_t t0, t1;
  CURLcode code;
  CURLMcode multi_code;
  long status;
  int done;
} Exchange;

/*
** A pool: a share handle holding one connection cache and one DNS cache. The
** pin loaded into that DNS cache is fixed once a transfer used the pool; a
** leg that needs another pin moves to a fresh pool, so a kept-alive
** connection dialled to one address is never handed to a send pinned to
** another.
*/
typedef struct Pool {
  CURLSH *share;              /* NULL once closed */
  char *pin;                  /* the pin of its DNS cache, or NULL */
  struct curl_slist *resolve; /* that pin as a CURLOPT_RESOLVE list */
  int used;                   /* a transfer ran through it: the pin is fixed */
  int closing;                /* close was refused while a leg used it: the last leg ends it */
  unsigned version;           /* changes whenever share or resolve does */
} Pool;

/*
** The multi handle: the engine's driver. libcurl tells it which sockets to
** watch and when its timer is due; it puts them into the engine's epoll
** descriptor, and the engine hands their readiness back (socket_action).
*/
typedef struct Multi {
  CURLM *multi;
  mcp_engine *engine;
  int handles;    /* easy handles in it, done or not */
  int running;    /* what libcurl last reported as still running */
  CURLMcode code; /* the first failure of the current engine turn, else CURLM_OK */
} Multi;

typedef struct Leg {
  CURL *easy;                 /* NULL once closed */
  CURLM *multi;               /* the engine's multi handle while the handle is in it, else NULL */
  Multi *driver;              /* the multi handle of the engine */
  CURLU *parsed;              /* reused to check a pin against the url */
  struct curl_slist *headers; /* the last send's plain header lines, kept for the next */
  struct curl_slist *tail;    /* the last node of headers (before any credential), or NULL */
  int kept;                   /* headers holds a whole list (it may be empty) */
  int kept_expect;            /* ... that starts with "Expect:" */
  lua_Integer n_kept;         /* ... and then this many of the send's lines */
  struct curl_slist *secret;  /* this send's credential node, linked after tail */
  char *checked_url;          /* the url and pin last found to agree, or NULL */
  char *checked_pin;
  char *secret_body; /* this send's copy of a secret body, or NULL */
  size_t secret_body_len;
  Pool *pool;               /* the pool in user value UV_POOL */
  const Pool *applied;      /* the pool the handle was last given, or NULL */
  unsigned applied_version; /* that pool's version then */
  char *default_cainfo;     /* libcurl's built-in CA bundle, restored after a custom one */
  int custom_tls;           /* the last send set ca_file, client_cert or client_key */
  int busy;                 /* a send is running: hooks may re-enter */
  int started;              /* busy with a send begun by start(), driven from Lua */
  Exchange x;               /* the running exchange, as the engine reports it */
  size_t body_len;          /* the running send's body length */
  int has_body, send_only;
  curl_socket_t last_socket; /* the socket the last exchange used, or CURL_SOCKET_BAD */
  /* per exchange, written by the libcurl callbacks */
  Buf body, stream, head;
  size_t max_bytes, held; /* body bytes kept or streamed so far */
  int want_stream;        /* on_stream was given */
  int mode;               /* BODY_*: decided at the first body byte */
  int in_head;            /* between a status line and its blank line */
  int event_stream;       /* the current response is text/event-stream */
  char media[MEDIA_CAP];  /* its media type: the last Content-Type of the head, lower case */
  int truncated, out_of_memory, head_overflow;
  int attempts;      /* requests libcurl began for this exchange (see on_prereq) */
  int64_t budget_ns; /* the exchange's timeout, which also bounds its wait for a connection */
  int idempotent;    /* this exchange may be resent on a fresh connection */
  int hold_body;     /* a large 2xx body is handed over as a held body (body.c) */
  char errbuf[CURL_ERROR_SIZE];
} Leg;

/* The request after validation: pointers into strings anchored in SLOT()s. */
typedef struct Request {
  int method;
  const char *url;
  const char *secret;
  const char *body;
  size_t body_len;
  const char *secret_body; /* sent like body, but from a copy the leg wipes */
  size_t secret_body_len;
  long timeout_ms, connect_timeout_ms;
  size_t max_bytes;
  const char *pin;
  size_t pin_hostport; /* length of "host:port" in pin */
  const char *ca_file, *client_cert, *client_key;
  lua_Integer n_headers;
  int has_cancel;
  int send_only;  /* stop once the request is sent: nobody waits for the answer */
  int idempotent; /* sending it twice does no harm (initialize, GET, DELETE) */
  int hold_body;  /* hand a large 2xx body over instead of copying it */
} Request;

/* ==================================================================== */
/* Small helpers                                                        */
/* ==================================================================== */

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

/* ==================================================================== */
/* libcurl callbacks: C buffers only, never Lua                         */
/* ==================================================================== */

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
  (void)size; /* always 1 */
  if (n >= 5 && memcmp(line, "HTTP/", 5) == 0) {
    leg->head.len = 0;
    leg->event_stream = 0;
    leg->media[0] = '\0';
    leg->in_head = 1;
  } else if (leg->in_head) {
    if (n >= 1 && n <= 2 && (line[0] == '\r' || line[0] == '\n')) leg->in_head = 0;
    else note_media_type(leg, line, n);
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
** Room for a kept body of declared length, taken at its first bytes: a
** catalogue page (~130 KB) would otherwise grow by doubling from 16 KB and
** be copied four times on the way. The declaration is only a hint, bounded
** by max_bytes; a body that outgrows it grows as any other.
*/
static void reserve_declared(Leg *leg) {
  curl_off_t declared = -1;
  Buf *b = &leg->body;
  char *p;
  if (curl_easy_getinfo(leg->easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &declared) != CURLE_OK ||
      declared <= 0 || (curl_off_t)b->cap >= declared)
    return;
  if ((curl_off_t)leg->max_bytes < declared) declared = (curl_off_t)leg->max_bytes;
  p = realloc(b->p, (size_t)declared);
  if (p == NULL) return; /* growing by appends will say it */
  b->p = p;
  b->cap = (size_t)declared;
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
  (void)size; /* always 1 */
  if (leg->mode == BODY_UNDECIDED) {
    leg->mode = (leg->want_stream && leg->event_stream) ? BODY_STREAM : BODY_KEEP;
    if (leg->mode == BODY_KEEP) reserve_declared(leg);
  }
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

/* ==================================================================== */
/* Leg lifetime                                                         */
/* ==================================================================== */

/*
** Free the kept header list. libcurl must not keep a pointer to the freed
** memory, so it is told first.
*/
static void free_header_list(Leg *leg) {
  if (leg->headers != NULL) {
    if (leg->easy != NULL) curl_easy_setopt(leg->easy, CURLOPT_HTTPHEADER, (struct curl_slist *)NULL);
    curl_slist_free_all(leg->headers);
  }
  leg->headers = leg->tail = NULL;
  leg->kept = 0;
}

/*
** Forget this send's credential and secret body, wiping both copies first.
** The plain header list stays for the next send (a warm call sends the same
** lines again); the credential node is cut off its tail. Every way an
** exchange ends (settled, failed to start, leg closed) comes through here,
** so a secret lives in C memory no longer than its transfer.
*/
static void drop_headers(Leg *leg) {
  if (leg->secret != NULL) {
    if (leg->secret->data != NULL) wipe(leg->secret->data, strlen(leg->secret->data));
    if (leg->tail != NULL) leg->tail->next = NULL;
    else leg->headers = NULL;
    curl_slist_free_all(leg->secret);
    leg->secret = NULL;
  }
  if (leg->secret_body != NULL) {
    if (leg->easy != NULL) curl_easy_setopt(leg->easy, CURLOPT_POSTFIELDS, (char *)NULL);
    wipe(leg->secret_body, leg->secret_body_len);
    free(leg->secret_body);
    leg->secret_body = NULL;
    leg->secret_body_len = 0;
  }
}

static void pool_release(Pool *pool);

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
  drop_headers(leg);
  free_header_list(leg);
  if (leg->easy != NULL) curl_easy_cleanup(leg->easy); /* leaves the pool's share too */
  if (leg->easy != NULL && leg->pool != NULL && leg->pool->closing) pool_release(leg->pool);
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

/*
** libcurl's global state is process-wide; busted reopens the module per file.
** libcurl's global init also initialises OpenSSL, which by default loads
** libcrypto's table of error texts: 0.6 MiB of resident memory, a twentieth
** of the whole process. Those texts are left out. TLS failures keep their
** wording (libssl's texts and the certificate verdicts are tables of their
** own); a failure inside libcrypto shows as its code, which `openssl errstr`
** turns back into text. A host that loaded the texts already keeps them.
*/
static void ensure_curl(lua_State *L) {
  static int ready = 0;
  if (!ready) {
    OPENSSL_init_crypto(OPENSSL_INIT_NO_LOAD_CRYPTO_STRINGS, NULL);
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) luaL_error(L, "libcurl could not be initialised");
    ready = 1;
  }
}

/* __gc: at exit, after every leg (legs are made after the multi handle, so they are finalized first). */
static int multi_gc(lua_State *L) {
  Multi *m = luaL_checkudata(L, 1, MULTI_MT);
  if (m->engine != NULL && m->engine->driver == m) m->engine->driver = NULL;
  if (m->multi != NULL) curl_multi_cleanup(m->multi);
  m->multi = NULL;
  return 0;
}

/*
** Read the engine's completion messages into the legs they belong to. A
** message for a leg that is not the caller's must not be lost: that leg's
** own loop (or its coroutine) reads its outcome from the leg.
*/
static void engine_collect(CURLM *multi) {
  CURLMsg *msg;
  int queued;
  while ((msg = curl_multi_info_read(multi, &queued)) != NULL) {
    char *owner = NULL;
    Leg *leg;
    if (msg->msg != CURLMSG_DONE) continue;
    if (curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &owner) != CURLE_OK || owner == NULL) continue;
    leg = (Leg *)(void *)owner;
    if (leg->x.done) continue;
    leg->x.done = 1;
    leg->x.code = msg->data.result;
    leg->x.t1 = mcp_monotonic_ns();
  }
}

/* libcurl's socket callback: watch s in the engine for what libcurl wants (nothing: forget it). */
static int on_socket(CURL *easy, curl_socket_t s, int what, void *userp, void *socketp) {
  Multi *m = userp;
  unsigned events = 0;
  (void)easy;
  if (what == CURL_POLL_IN || what == CURL_POLL_INOUT) events |= MCP_ENGINE_IN;
  if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT) events |= MCP_ENGINE_OUT;
  mcp_engine_driver_fd(m->engine, s, events, socketp != NULL);
  curl_multi_assign(m->multi, s, events ? (void *)m : NULL); /* non-NULL: registered */
  return 0;
}

/* libcurl's timer callback: when the engine must next call it, whatever the sockets do. */
static int on_timer(CURLM *multi, long timeout_ms, void *userp) {
  Multi *m = userp;
  (void)multi;
  mcp_engine_driver_timer(m->engine, timeout_ms);
  return 0;
}

/* The engine's turn for one ready socket: libcurl works on it, then the outcomes are routed. */
static void driver_ready(void *driver, int fd, unsigned events) {
  Multi *m = driver;
  int action = 0;
  CURLMcode code;
  if (events & MCP_ENGINE_IN) action |= CURL_CSELECT_IN;
  if (events & MCP_ENGINE_OUT) action |= CURL_CSELECT_OUT;
  if (events & MCP_ENGINE_ERR) action |= CURL_CSELECT_ERR;
  code = curl_multi_socket_action(m->multi, fd, action, &m->running);
  if (code != CURLM_OK && code != CURLM_BAD_SOCKET && m->code == CURLM_OK) m->code = code;
  engine_collect(m->multi);
}

/* The engine's turn for libcurl's timer. */
static void driver_timer(void *driver) {
  Multi *m = driver;
  CURLMcode code = curl_multi_socket_action(m->multi, CURL_SOCKET_TIMEOUT, 0, &m->running);
  if (code != CURLM_OK && m->code == CURLM_OK) m->code = code;
  engine_collect(m->multi);
}

/* Transfers in the engine (core.engine_step reports it). */
static int driver_running(void *driver) {
  return ((Multi *)driver)->handles;
}

/*
** The engine's driver: one multi handle for the Lua state (the process, for
** a host with one state), made on first use and held by the registry until
** the state closes, so no leg can outlive it; it holds the engine (made by
** the core module) the same way. Connections are bounded per pool and host;
** a transfer beyond the bound waits inside libcurl for a connection to come
** free.
*/
static Multi *engine(lua_State *L) {
  Multi *m;
  mcp_engine *e;
  ensure_curl(L);
  if (lua_getfield(L, LUA_REGISTRYINDEX, MULTI_KEY) == LUA_TUSERDATA) {
    m = lua_touserdata(L, -1);
    lua_pop(L, 1);
    return m;
  }
  lua_pop(L, 1);
  if (lua_getfield(L, LUA_REGISTRYINDEX, MCP_ENGINE_KEY) != LUA_TUSERDATA)
    luaL_error(L, "the engine is missing (mcpclient.core makes it)");
  e = lua_touserdata(L, -1);
  m = lua_newuserdatauv(L, sizeof *m, 1);
  memset(m, 0, sizeof *m);
  if (luaL_newmetatable(L, MULTI_MT)) {
    lua_pushcfunction(L, multi_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_setmetatable(L, -2);
  lua_insert(L, -2);
  lua_setiuservalue(L, -2, 1); /* the engine lives as long as its driver */
  m->engine = e;
  m->multi = curl_multi_init();
  if (m->multi == NULL) luaL_error(L, "libcurl could not create the engine's multi handle");
  curl_multi_setopt(m->multi, CURLMOPT_MAXCONNECTS, (long)ENGINE_CONNECTIONS);
  curl_multi_setopt(m->multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long)HOST_CONNECTIONS);
  curl_multi_setopt(m->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
  curl_multi_setopt(m->multi, CURLMOPT_SOCKETDATA, (void *)m);
  curl_multi_setopt(m->multi, CURLMOPT_TIMERFUNCTION, on_timer);
  curl_multi_setopt(m->multi, CURLMOPT_TIMERDATA, (void *)m);
  lua_setfield(L, LUA_REGISTRYINDEX, MULTI_KEY);
  e->driver = m;
  e->driver_ready = driver_ready;
  e->driver_timer = driver_timer;
  e->driver_running = driver_running;
  return m;
}

/* ==================================================================== */
/* Pools                                                                */
/* ==================================================================== */

/*
** Closes the pool's idle connections and frees it; safe on a half-built pool
** and idempotent. libcurl refuses while a leg still uses the share (at exit
** the collector may finalize a pool before its legs): the pool is then marked
** closing, and the release of a leg that used it ends it.
*/
static void pool_release(Pool *pool) {
  if (pool->share != NULL && curl_share_cleanup(pool->share) != CURLSHE_OK) {
    pool->closing = 1;
    return;
  }
  pool->share = NULL;
  curl_slist_free_all(pool->resolve);
  pool->resolve = NULL;
  free(pool->pin);
  pool->pin = NULL;
  pool->version++;
}

/* close() and __gc: a pool is collected only after every leg made with it (they hold it). */
static int pool_gc(lua_State *L) {
  pool_release(luaL_checkudata(L, 1, POOL_MT));
  return 0;
}

/*
** core.http_pool(): created closed, then the share handle is acquired; it
** shares connections and DNS answers (the pin) among the legs made with it.
*/
static int l_http_pool(lua_State *L) {
  Pool *pool;
  ensure_curl(L);
  pool = lua_newuserdatauv(L, sizeof *pool, 1); /* its successor, once retired */
  memset(pool, 0, sizeof *pool);
  luaL_setmetatable(L, POOL_MT);
  pool->share = curl_share_init();
  if (pool->share == NULL ||
      curl_share_setopt(pool->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT) != CURLSHE_OK ||
      curl_share_setopt(pool->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS) != CURLSHE_OK) {
    pool_release(pool);
    return luaL_error(L, "libcurl could not create a connection pool");
  }
  return 1;
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
  bad |= curl_easy_setopt(e, CURLOPT_BUFFERSIZE, RECEIVE_BUFFER) != CURLE_OK;
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

/*
** core.http_leg([pool]): created closed, then the handles are acquired. Legs
** made with one pool share its kept-alive connections (several may be open
** at once); without one the leg gets a pool of its own.
*/
static int l_http_leg(lua_State *L) {
  Leg *leg;
  if (lua_isnoneornil(L, 1)) {
    lua_settop(L, 0);
    l_http_pool(L);
  }
  Multi *driver;
  luaL_checkudata(L, 1, POOL_MT);
  driver = engine(L);
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
    ok = hlen + 1 + plen == r->pin_hostport && ascii_ieq(host, r->pin, hlen) && r->pin[hlen] == ':' &&
         memcmp(port, r->pin + hlen + 1, plen) == 0;
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

/* Move the leg (at index 1) to the pool on top of the stack, which is popped. */
static Pool *move_to_pool(lua_State *L, Leg *leg) {
  lua_pushvalue(L, -1);
  lua_setiuservalue(L, 1, UV_POOL);
  leg->pool = lua_touserdata(L, -1);
  leg->applied = NULL;
  lua_pop(L, 1);
  return leg->pool;
}

/*
** A pool whose idle connection was found dirty is retired: its successor (a
** fresh pool with the same pin) takes every leg that comes to send, so no
** leg of the connection is handed that connection again.
*/
static Pool *current_pool(lua_State *L, Leg *leg) {
  lua_getiuservalue(L, 1, UV_POOL);
  while (lua_getiuservalue(L, -1, 1) == LUA_TUSERDATA) lua_remove(L, -2);
  lua_pop(L, 1);
  if (lua_touserdata(L, -1) != leg->pool) return move_to_pool(L, leg);
  lua_pop(L, 1);
  if (idle_connection_dirty(leg)) {
    Pool *old = leg->pool, *fresh;
    leg->last_socket = CURL_SOCKET_BAD;
    l_http_pool(L);
    fresh = lua_touserdata(L, -1);
    if (old->pin != NULL && (fresh->pin = strdup(old->pin)) == NULL) luaL_error(L, "not enough memory");
    if (old->pin != NULL && (fresh->resolve = curl_slist_append(NULL, old->pin)) == NULL)
      luaL_error(L, "not enough memory");
    lua_getiuservalue(L, 1, UV_POOL);
    lua_pushvalue(L, -2);
    lua_setiuservalue(L, -2, 1);
    lua_pop(L, 1);
    return move_to_pool(L, leg);
  }
  return leg->pool;
}

/*
** Make sure the leg's pool holds exactly this send's pin (may raise: it runs
** before anything is allocated for the send). An unused pool adopts the pin;
** a pool whose pin differs is left to the legs still using it and this leg
** moves to a fresh pool: its empty connection cache cannot hand back a
** connection dialled to another address, and its empty DNS cache forgets the
** old pin. An unchanged pin keeps both, so the warm path stays one connection.
*/
static void choose_pool(lua_State *L, Leg *leg, const Request *r) {
  Pool *pool = current_pool(L, leg);
  struct curl_slist *list = NULL;
  char *copy = NULL;
  if (r->pin == NULL ? pool->pin == NULL : (pool->pin != NULL && strcmp(r->pin, pool->pin) == 0)) return;
  if (pool->used || pool->share == NULL) {
    l_http_pool(L);
    pool = move_to_pool(L, leg);
  }
  if (r->pin != NULL) {
    size_t n = strlen(r->pin) + 1;
    if ((copy = malloc(n)) == NULL || (list = curl_slist_append(NULL, r->pin)) == NULL) {
      free(copy);
      luaL_error(L, "not enough memory");
    }
    memcpy(copy, r->pin, n);
  }
  curl_slist_free_all(pool->resolve);
  pool->resolve = list;
  free(pool->pin);
  pool->pin = copy;
  pool->version++;
}

/*
** Send through the leg's pool, with the pool's pin loaded into its DNS cache.
** libcurl keeps a loaded pin in the pool's cache for good, so the handle is
** given the pool again only when it is another pool, or this one's share or
** pin changed since: a warm call does not make libcurl re-read the pin.
*/
static const char *apply_pool(Leg *leg) {
  Pool *pool = leg->pool;
  if (leg->applied == pool && leg->applied_version == pool->version) return NULL;
  leg->applied = NULL;
  if (curl_easy_setopt(leg->easy, CURLOPT_SHARE, pool->share) != CURLE_OK ||
      curl_easy_setopt(leg->easy, CURLOPT_RESOLVE, pool->resolve) != CURLE_OK)
    return "libcurl could not use the connection pool";
  pool->used = 1;
  leg->applied = pool;
  leg->applied_version = pool->version;
  return NULL;
}

/* TLS files: set when given, and put back to libcurl's defaults once after. */
static const char *apply_tls(Leg *leg, const Request *r) {
  int custom = r->ca_file != NULL || r->client_cert != NULL || r->client_key != NULL;
  if (!custom && !leg->custom_tls) return NULL;
  leg->custom_tls = 1; /* until all three are known to be reset */
  if (curl_easy_setopt(leg->easy, CURLOPT_CAINFO, r->ca_file ? r->ca_file : leg->default_cainfo) !=
        CURLE_OK ||
      curl_easy_setopt(leg->easy, CURLOPT_SSLCERT, r->client_cert) != CURLE_OK ||
      curl_easy_setopt(leg->easy, CURLOPT_SSLKEY, r->client_key) != CURLE_OK)
    return "out of memory";
  leg->custom_tls = custom;
  return NULL;
}

/*
** The body libcurl sends: the caller's string (anchored for the exchange), or
** for a secret body a malloc'd copy owned by the leg, so the leg keeps no Lua
** string of it and can wipe the bytes once the transfer is over. NULL when
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

/* Does the kept list hold exactly this send's header lines, in order? */
static int same_headers(lua_State *L, const Leg *leg, const Request *r, int expect) {
  const struct curl_slist *node;
  lua_Integer i;
  int same = 1;
  if (!leg->kept || leg->kept_expect != expect || leg->n_kept != r->n_headers) return 0;
  node = expect ? leg->headers->next : leg->headers;
  for (i = 1; same && i <= r->n_headers; i++, node = node->next) {
    lua_rawgeti(L, SLOT(F_HEADERS), i); /* checked: a string, anchored by the table */
    same = strcmp(node->data, lua_tostring(L, -1)) == 0;
    lua_pop(L, 1);
  }
  return same;
}

/* Link one more line after the tail; 0 when memory ran out. */
static int add_line(Leg *leg, const char *line) {
  struct curl_slist *node = curl_slist_append(NULL, line);
  if (node == NULL) return 0;
  if (leg->tail != NULL) leg->tail->next = node;
  else leg->headers = node;
  leg->tail = node;
  return 1;
}

/*
** The plain header list: "Expect:" when the body is large enough for libcurl
** to ask for a 100-continue wait otherwise, then the send's lines; reused
** when the last send had the same ones. Built node by node into the leg, so
** a failure part-way leaves nothing unowned.
*/
static const char *build_headers(lua_State *L, Leg *leg, const Request *r, int expect) {
  lua_Integer i;
  if (same_headers(L, leg, r, expect)) return NULL;
  free_header_list(leg);
  if (expect && !add_line(leg, "Expect:")) return "out of memory";
  for (i = 1; i <= r->n_headers; i++) {
    int added;
    lua_rawgeti(L, SLOT(F_HEADERS), i); /* checked: a string, anchored by the table */
    added = add_line(leg, lua_tostring(L, -1));
    lua_pop(L, 1);
    if (!added) return "out of memory";
  }
  leg->kept_expect = expect;
  leg->n_kept = r->n_headers;
  leg->kept = 1;
  return NULL;
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
  if ((why = apply_pool(leg)) != NULL) return why;
  if ((why = apply_tls(leg, r)) != NULL) return why;

  if ((why = build_headers(L, leg, r, r->method == M_POST && body_len > SMALL_BODY)) != NULL) return why;
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
** Put the configured handle into the engine; the exchange starts now.
*/
static int engine_add(Leg *leg) {
  CURLM *multi = leg->driver->multi;
  memset(&leg->x, 0, sizeof leg->x);
  leg->x.t0 = mcp_monotonic_ns();
  if ((leg->x.multi_code = curl_multi_add_handle(multi, leg->easy)) != CURLM_OK) return 0;
  leg->multi = multi;
  leg->driver->handles++;
  return 1;
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

/* One turn of the engine (waiting at most ms): libcurl works on what is ready. */
static CURLMcode engine_turn(Multi *m, int ms) {
  m->code = CURLM_OK;
  m->engine->run(m->engine, ms);
  return m->code;
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
    if ((x->multi_code = engine_turn(m, wait)) != CURLM_OK) return OUT_MULTI_FAIL;
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
** The kept header lines as { [lower-case name] = trimmed value }, last wins.
** The first line is the status line; lines without a colon are skipped.
*/
static void push_headers(lua_State *L, Leg *leg) {
  char *p = leg->head.p, *end = p + leg->head.len, *c;
  int first = 1, lines = 0;
  for (c = p; c < end && (c = memchr(c, '\n', (size_t)(end - c))) != NULL; c++) lines++;
  lua_createtable(L, 0, lines > 2 ? lines - 2 : 0); /* less the status line and the blank one */
  while (p < end) {
    char *eol = memchr(p, '\n', (size_t)(end - p)), *line = p, *colon, *v, *ve;
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

/*
** The response's body: "" for a streamed one; a held body (body.c) taking
** the buffer itself for a large, whole 2xx answer of a hold_body send (the
** leg starts its next body afresh); otherwise a string copy.
*/
static void push_body(lua_State *L, Leg *leg, const Exchange *x) {
  if (leg->mode == BODY_STREAM) lua_pushliteral(L, "");
  else if (leg->hold_body && x->status >= 200 && x->status < 300 && !leg->truncated &&
           leg->body.len >= HOLD_MIN) {
    mcp_body_push(L, leg->body.p, leg->body.len);
    leg->body.p = NULL;
    leg->body.len = leg->body.cap = 0;
  } else lua_pushlstring(L, leg->body.p ? leg->body.p : "", leg->body.len);
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
  push_body(L, leg, x);
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
** nil, kind, text, sent for a transfer libcurl ended with an error. The kind says
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
** Take the ended exchange out of the engine and wipe the credential copy.
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
  drop_headers(leg);
  leg->busy = leg->started = 0;
  return sent;
}

/* The outcome of a settled exchange, then the buffers trimmed for the next. */
static int leg_outcome(lua_State *L, Leg *leg, int outcome, int sent) {
  int results = push_outcome(L, leg, &leg->x, outcome, sent);
  buf_trim(&leg->body);
  buf_trim(&leg->stream);
  buf_trim(&leg->head);
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
  choose_pool(L, leg, r);
  return leg;
}

/*
** Configure and hand the exchange to the engine. NULL, or the reason it could
** not start (a "transport" failure: nothing was sent). Nothing here raises.
*/
static const char *leg_launch(lua_State *L, Leg *leg, const Request *r) {
  const char *why;
  leg->busy = 1;
  if ((why = configure(L, leg, r)) == NULL && !engine_add(leg)) why = curl_multi_strerror(leg->x.multi_code);
  if (why != NULL) {
    drop_headers(leg);
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
    buf_trim(&leg->body);
    buf_trim(&leg->stream);
    buf_trim(&leg->head);
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
  static const luaL_Reg fns[] = {{"http_leg", l_http_leg}, {"http_pool", l_http_pool}, {NULL, NULL}};
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
    lua_pushcfunction(L, pool_gc);
    lua_setfield(L, -2, "__gc");
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, pool_gc);
    lua_setfield(L, -2, "close");
    lua_setfield(L, -2, "__index");
  }
  lua_pop(L, 1);
  luaL_setfuncs(L, fns, 0);
}
