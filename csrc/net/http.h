/*
** http.h: what the files of the HTTP leg share, and nothing outside
** csrc/net/ includes it (the module's one entry is mcp_register_http, in
** core.h). The leg was one file; it is cut by job:
**
**   http_buffer.c   the response buffers, the read cap, held bodies
**   http_headers.c  the response head (media type, header table) and the
**                   request's header lines, the credential among them
**   http_pool.c     the pools: a share handle of kept-alive connections and
**                   pinned addresses per connection to a server
**   http_multi.c    the one curl-multi handle per Lua state, the engine's driver
**   http_leg.c      the leg object and its Lua API (send, start, pump, ...)
**
** The leg uses the other four; none of them calls into http_leg.c, and
** http_headers.c uses only http_buffer.c. The types below are the leg's
** state, which the libcurl callbacks of each file write. No Lua error may
** cross a libcurl callback: every callback (on_header, on_body, on_prereq,
** on_socket, on_timer) touches C memory only and reports instead of raising.
*/
#ifndef MCP_NET_HTTP_H
#define MCP_NET_HTTP_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "core.h"
#include "engine.h"

#define LEG_MT      "mcpclient.http_leg"
#define POOL_MT     "mcpclient.http_pool"
#define MULTI_MT    "mcpclient.http_multi"
#define RESPONSE_MT "mcpclient.http_response"
/* The registry slot holding the multi handle: not MULTI_MT, which names the metatable in the same registry. */
#define MULTI_KEY   "mcpclient.http_multi.instance"

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
  X(PROXY, proxy) \
  X(PROXY_USER, proxy_user) \
  X(PROXY_PASSWORD, proxy_password) \
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
** pin loaded into that DNS cache, and the proxy (or none) its connections go
** through, are fixed once a transfer used the pool; a leg that needs another
** pin or proxy moves to a fresh pool, so a kept-alive connection dialled to
** one address is never handed to a send pinned to another, and a direct
** connection and one through a proxy are never mixed.
*/
typedef struct Pool {
  CURLSH *share;              /* NULL once closed */
  char *pin;                  /* the pin of its DNS cache, or NULL */
  char *proxy;                /* the proxy its connections go through, or NULL: they are direct */
  struct curl_slist *resolve; /* that pin as a CURLOPT_RESOLVE list */
  int used;                   /* a transfer ran through it: the pin is fixed */
  int closing;                /* close was refused while a leg used it: the last leg ends it */
  unsigned version;           /* changes whenever share or resolve does */
} Pool;

#define TRACKED_SOCKETS 1024 /* sockets numbered below this may be parked (http_multi.c) */

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
  /* by socket number: opened by libcurl for a connection, parked, the epoll interest (http_multi.c) */
  unsigned char sockets[TRACKED_SOCKETS];
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
  int proxy_login;          /* libcurl holds proxy credentials of the running (or last) send */
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
  const char *proxy;   /* "http://", "https://" or "socks5h://" host:port, or NULL for direct */
  const char *proxy_user, *proxy_password; /* Basic credentials for the proxy, or NULL */
  const char *ca_file, *client_cert, *client_key;
  lua_Integer n_headers;
  int has_cancel;
  int send_only;  /* stop once the request is sent: nobody waits for the answer */
  int idempotent; /* sending it twice does no harm (initialize, GET, DELETE) */
  int hold_body;  /* hand a large 2xx body over instead of copying it */
} Request;

/* ASCII-only case folding: header names and media types are ASCII, and the
   C library's tolower would follow the locale. */
static inline char mcp_http_ascii_lower(char c) {
  return (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
}

static inline int mcp_http_ascii_ieq(const char *a, const char *b, size_t n) {
  size_t i;
  for (i = 0; i < n; i++)
    if (mcp_http_ascii_lower(a[i]) != mcp_http_ascii_lower(b[i])) return 0;
  return 1;
}

/* http_buffer.c */
void mcp_http_wipe(void *p, size_t n);
int mcp_http_buf_append(Buf *b, const char *s, size_t n);
void mcp_http_buf_trim(Buf *b);
void mcp_http_buf_free(Buf *b);
size_t mcp_http_on_body(char *data, size_t size, size_t n, void *ud);
void mcp_http_push_body(lua_State *L, Leg *leg, const Exchange *x);

/* http_headers.c */
size_t mcp_http_on_header(char *line, size_t size, size_t n, void *ud);
void mcp_http_free_header_list(Leg *leg);
void mcp_http_drop_headers(Leg *leg);
const char *mcp_http_build_headers(lua_State *L, Leg *leg, const Request *r, int expect);
void mcp_http_push_headers(lua_State *L, char *head, size_t len);
const char *mcp_http_header_value(const Leg *leg, const char *name, size_t *vlen);
int mcp_http_response_index(lua_State *L);

/* http_pool.c */
void mcp_http_pool_release(Pool *pool);
int mcp_http_pool_gc(lua_State *L);
int mcp_http_pool_new(lua_State *L);
void mcp_http_choose_pool(lua_State *L, Leg *leg, const Request *r);
const char *mcp_http_apply_pool(Leg *leg);

/* http_multi.c */
void mcp_http_ensure_curl(lua_State *L);
Multi *mcp_http_engine(lua_State *L);
int mcp_http_engine_add(Leg *leg);
int mcp_http_own_sockets(Leg *leg);
CURLMcode mcp_http_engine_turn(Multi *m, int ms);

#endif
