/*
** echo_server.c: a fast local MCP server for the benchmarks (bench/run.lua).
**
** Single-threaded epoll, HTTP/1.1 keep-alive, 127.0.0.1 only, Streamable
** HTTP at /mcp. It is here so that the server is never the bottleneck: the
** clients under test are compared with each other and with a bare libcurl
** loop (bench/floor.c) against it. It also counts what it receives (per
** JSON-RPC method, per HTTP verb, TCP connections) so a benchmark can say how
** many round trips a warm call costs; GET /stats answers the counts as JSON,
** and SIGTERM prints them on stdout before exiting.
**
** usage: echo_server [--port N] [--session] [--sse] [--tools N] [--page-size M]
**                    [--slow-ms N] [--exit-with-parent]
**   --session     initialize answers an Mcp-Session-Id; later requests must carry it
**                 (missing: 400, unknown or deleted: 404); DELETE ends it.
**   --sse         answers are text/event-stream (`event: message` + `data:`).
**   --tools N     a generated catalogue of N tools (echo and slow first) with
**                 realistic schemas; --page-size M pages it with nextCursor.
**   --slow-ms N   how long `slow` waits when its arguments carry no `ms` (1000).
**   --exit-with-parent  ends the server (SIGTERM) when its parent process dies.
** Prints exactly `listening <port>` on stdout once it accepts connections.
**
** Tools: echo {message} -> text = message; slow {ms} -> waits ms without
** blocking other connections (a timer per connection), then "slept <ms> ms".
** This is a benchmark peer, not a general server: no chunked request bodies,
** no batches.
*/
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>

#define MAX_HEAD       (64 * 1024)
#define MAX_BODY       (16 * 1024 * 1024)
#define MAX_METHODS    32
#define MAX_EVENTS     128
#define MAX_JSON_DEPTH 64

#define ATTR_PRINTF(f, a) __attribute__((format(printf, f, a)))

/* ===================================================================== */
/* Buffers                                                                */
/* ===================================================================== */

typedef struct Buf {
  char *p;
  size_t len, cap;
} Buf;

/*
** Out of memory in a benchmark peer is fatal: there is nothing sensible to
** answer, and a half-working server would skew the figures silently.
*/
static void die(const char *what) {
  fprintf(stderr, "echo_server: %s: %s\n", what, strerror(errno));
  exit(1);
}

/* ** Make room for extra more bytes (plus a NUL the printf helper may need). */
static void buf_reserve(Buf *b, size_t extra) {
  size_t need = b->len + extra + 1;
  if (need <= b->cap) return;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < need) cap *= 2;
  char *p = realloc(b->p, cap);
  if (!p) die("realloc");
  b->p = p;
  b->cap = cap;
}

/* ** Append n bytes. */
static void buf_add(Buf *b, const void *s, size_t n) {
  buf_reserve(b, n);
  memcpy(b->p + b->len, s, n);
  b->len += n;
}

/* ** Append a C string. */
static void buf_str(Buf *b, const char *s) {
  buf_add(b, s, strlen(s));
}

/* ** Append formatted text; the catalogue and the headers are built with it. */
ATTR_PRINTF(2, 3)
static void buf_printf(Buf *b, const char *fmt, ...) {
  char small[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) die("vsnprintf");
  if ((size_t)n < sizeof small) {
    buf_add(b, small, (size_t)n);
    return;
  }
  buf_reserve(b, (size_t)n);
  va_start(ap, fmt);
  vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

/* ===================================================================== */
/* Options, counters, sessions                                            */
/* ===================================================================== */

static struct {
  int port, session, sse, tools, page_size, slow_ms, exit_with_parent;
} opt = {0, 0, 0, 2, 0, 1000, 0};

static struct {
  unsigned long connections, post, get, del, other_verb, stats;
  int nmethods;
  char *method[MAX_METHODS];
  unsigned long method_count[MAX_METHODS];
  unsigned long other_method, responses, invalid;
} count;

static volatile sig_atomic_t stop_requested;

static unsigned session_tag; /* a per-process prefix, so stale ids from another run fail */
static unsigned long sessions_issued;
static unsigned char *session_deleted; /* index n: session n was deleted */

/* ** Count one JSON-RPC method by name; names beyond the table count as other. */
static void count_method(const char *m, size_t n) {
  for (int i = 0; i < count.nmethods; i++) {
    if (strlen(count.method[i]) == n && memcmp(count.method[i], m, n) == 0) {
      count.method_count[i]++;
      return;
    }
  }
  if (count.nmethods == MAX_METHODS) {
    count.other_method++;
    return;
  }
  char *copy = malloc(n + 1);
  if (!copy) die("malloc");
  memcpy(copy, m, n);
  copy[n] = '\0';
  count.method[count.nmethods] = copy;
  count.method_count[count.nmethods++] = 1;
}

/* ** The counters as one JSON object (GET /stats, and the SIGTERM report). */
static void stats_json(Buf *b, unsigned long open_conns) {
  buf_printf(b,
             "{\"connections\":%lu,\"open_connections\":%lu,\"stats_requests\":%lu,"
             "\"http\":{\"POST\":%lu,\"GET\":%lu,\"DELETE\":%lu,\"other\":%lu},"
             "\"requests\":%lu,\"responses\":%lu,\"invalid\":%lu,\"methods\":{",
             count.connections, open_conns, count.stats, count.post, count.get, count.del, count.other_verb,
             count.post + count.get + count.del + count.other_verb, count.responses, count.invalid);
  for (int i = 0; i < count.nmethods; i++) {
    buf_printf(b, "%s\"%s\":%lu", i ? "," : "", count.method[i], count.method_count[i]);
  }
  buf_printf(b, "%s\"(other)\":%lu}}", count.nmethods ? "," : "", count.other_method);
}

/* ** A new session id: the process tag and a serial number, so lookup is arithmetic. */
static void new_session(char *out, size_t cap) {
  sessions_issued++;
  unsigned char *d = realloc(session_deleted, sessions_issued + 1);
  if (!d) die("realloc");
  session_deleted = d;
  session_deleted[sessions_issued] = 0;
  snprintf(out, cap, "bench-%08x-%lu", session_tag, sessions_issued);
}

/*
** Look a session id up: its serial number if it was issued by this process
** and not deleted, else 0.
*/
static unsigned long find_session(const char *id, size_t n) {
  char prefix[32];
  int plen = snprintf(prefix, sizeof prefix, "bench-%08x-", session_tag);
  if (plen < 0 || n <= (size_t)plen || memcmp(id, prefix, (size_t)plen) != 0) return 0;
  unsigned long serial = 0;
  for (size_t i = (size_t)plen; i < n; i++) {
    if (id[i] < '0' || id[i] > '9' || serial > 100000000UL) return 0;
    serial = serial * 10 + (unsigned long)(id[i] - '0');
  }
  if (serial == 0 || serial > sessions_issued || session_deleted[serial]) return 0;
  return serial;
}

/* ===================================================================== */
/* A small JSON scanner: spans of the request, never a tree               */
/* ===================================================================== */

/* ** Skip JSON whitespace. */
static const char *ws(const char *p, const char *e) {
  while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
  return p;
}

/* ** p at '"': the byte after the closing quote, or NULL. */
static const char *skip_string(const char *p, const char *e) {
  for (p++; p < e; p++) {
    if (*p == '\\') {
      if (++p == e) return NULL;
    } else if (*p == '"') {
      return p + 1;
    } else if ((unsigned char)*p < 0x20) {
      return NULL;
    }
  }
  return NULL;
}

/*
** The byte after the value starting at p, or NULL when it is not JSON. Loose
** about number grammar (a benchmark peer echoes what it is sent), strict about
** structure, so a span is always a whole value.
*/
static const char *skip_value(const char *p, const char *e, int depth) {
  p = ws(p, e);
  if (p == e || depth > MAX_JSON_DEPTH) return NULL;
  if (*p == '"') return skip_string(p, e);
  if (*p == '{' || *p == '[') {
    char close = *p == '{' ? '}' : ']';
    int object = *p == '{';
    p = ws(p + 1, e);
    if (p < e && *p == close) return p + 1;
    for (;;) {
      if (object) {
        if (p == e || *p != '"' || !(p = skip_string(p, e))) return NULL;
        p = ws(p, e);
        if (p == e || *p != ':') return NULL;
        p++;
      }
      if (!(p = skip_value(p, e, depth + 1))) return NULL;
      p = ws(p, e);
      if (p == e) return NULL;
      if (*p == close) return p + 1;
      if (*p != ',') return NULL;
      p = ws(p + 1, e);
    }
  }
  static const char *const words[] = {"true", "false", "null"};
  for (size_t i = 0; i < 3; i++) {
    size_t n = strlen(words[i]);
    if ((size_t)(e - p) >= n && memcmp(p, words[i], n) == 0) return p + n;
  }
  const char *s = p;
  while (p < e && (strchr("+-.eE", *p) || (*p >= '0' && *p <= '9'))) p++;
  return p > s ? p : NULL;
}

typedef struct Span {
  const char *s, *e;
} Span;

/*
** The value of member `key` of the object spanning [p, e): 1 and the span
** when present, 0 when absent, -1 when [p, e) is not an object. Keys are
** compared as raw bytes (this peer's clients never escape key names).
*/
static int member(Span obj, const char *key, Span *out) {
  const char *p = ws(obj.s, obj.e), *e = obj.e;
  size_t klen = strlen(key);
  int found = 0;
  if (p == e || *p != '{') return -1;
  p = ws(p + 1, e);
  if (p < e && *p == '}') return 0;
  for (;;) {
    const char *k = p;
    if (p == e || *p != '"' || !(p = skip_string(p, e))) return -1;
    int match = (size_t)(p - k) == klen + 2 && memcmp(k + 1, key, klen) == 0;
    p = ws(p, e);
    if (p == e || *p != ':') return -1;
    const char *v = ws(p + 1, e);
    if (!(p = skip_value(v, e, 1))) return -1;
    if (match && !found) {
      out->s = v;
      out->e = p;
      found = 1;
    }
    p = ws(p, e);
    if (p == e) return -1;
    if (*p == '}') return found;
    if (*p != ',') return -1;
    p = ws(p + 1, e);
  }
}

/* ** Is the span a JSON string? */
static int is_string(Span v) {
  return v.e - v.s >= 2 && *v.s == '"';
}

/* ** Does the string span hold exactly text (raw, unescaped comparison)? */
static int string_is(Span v, const char *text) {
  size_t n = strlen(text);
  return is_string(v) && (size_t)(v.e - v.s) == n + 2 && memcmp(v.s + 1, text, n) == 0;
}

/* ===================================================================== */
/* The catalogue: generated once, served from memory                      */
/* ===================================================================== */

static Buf *pages; /* each the JSON text of one tools/list result */
static int npages;

static const char *const verbs[] = {"search", "update", "export", "summarise", "archive", "count", "tag"};
static const char *const nouns[] = {"invoices",  "tickets",   "contacts",     "orders",
                                    "documents", "events",    "repositories", "incidents",
                                    "shipments", "contracts", "notes"};

/* ** The two tools the benchmarks call, with the schemas their arguments need. */
static void fixed_tool(Buf *b, int which) {
  if (which == 0) {
    buf_str(b,
            "{\"name\":\"echo\",\"title\":\"Echo\",\"description\":\"Returns the message it is given.\","
            "\"inputSchema\":{\"type\":\"object\",\"properties\":{\"message\":{\"type\":\"string\","
            "\"description\":\"The text to send back.\"}},\"required\":[\"message\"],"
            "\"additionalProperties\":false},\"annotations\":{\"readOnlyHint\":true}}");
  } else {
    buf_str(b,
            "{\"name\":\"slow\",\"title\":\"Slow\",\"description\":\"Waits the given number of "
            "milliseconds, then answers.\",\"inputSchema\":{\"type\":\"object\",\"properties\":"
            "{\"ms\":{\"type\":\"integer\",\"description\":\"How long to wait, in milliseconds.\","
            "\"minimum\":0}},\"additionalProperties\":false},\"annotations\":{\"readOnlyHint\":true}}");
  }
}

/*
** One generated tool, about 1.3 KB: a handful of described properties, an
** enum, a bounded integer, a nested object with its own required list and an
** array, the shapes real catalogues carry. Varied by index so no two pages
** are byte-identical.
*/
static void generated_tool(Buf *b, int i) {
  const char *verb = verbs[i % 7], *noun = nouns[(i / 7) % 11];
  buf_printf(
    b,
    "{\"name\":\"%s_%s_%05d\",\"title\":\"%c%s %s (%d)\","
    "\"description\":\"%c%s the %s of workspace %d. Use it when the user asks about %s kept in "
    "workspace %d; the answer lists at most `limit` entries, newest first, with their identifiers.\","
    "\"inputSchema\":{\"type\":\"object\",\"properties\":{"
    "\"query\":{\"type\":\"string\",\"description\":\"Free-text query; words are matched against "
    "titles and bodies.\",\"maxLength\":%d},"
    "\"limit\":{\"type\":\"integer\",\"description\":\"Maximum number of entries to return.\","
    "\"minimum\":1,\"maximum\":%d,\"default\":20},"
    "\"order\":{\"type\":\"string\",\"description\":\"Sort order of the entries.\","
    "\"enum\":[\"newest\",\"oldest\",\"relevance\"]},"
    "\"filter\":{\"type\":\"object\",\"description\":\"Restricts the %s to entries whose field "
    "matches.\",\"properties\":{"
    "\"field\":{\"type\":\"string\",\"description\":\"The field to compare.\","
    "\"enum\":[\"owner\",\"status\",\"label\",\"created\"]},"
    "\"value\":{\"type\":\"string\",\"description\":\"The value the field must hold.\"},"
    "\"exact\":{\"type\":\"boolean\",\"description\":\"Exact comparison (default: prefix match).\"}},"
    "\"required\":[\"field\",\"value\"],\"additionalProperties\":false},"
    "\"tags\":{\"type\":\"array\",\"description\":\"Only entries carrying every one of these tags.\","
    "\"items\":{\"type\":\"string\",\"minLength\":1},\"maxItems\":%d}},"
    "\"required\":[\"query\"],\"additionalProperties\":false},"
    "\"annotations\":{\"readOnlyHint\":%s,\"openWorldHint\":false}}",
    verb, noun, i, verb[0] - 'a' + 'A', verb + 1, noun, i, verb[0] - 'a' + 'A', verb + 1, noun, i % 97, noun,
    i % 97, 200 + i % 300, 50 + i % 50, noun, 4 + i % 8, (i % 7 == 0 || i % 7 == 5) ? "true" : "false");
}

/*
** Render every tools/list result up front (cursor "p<k>" names page k), so
** a listing costs the server a memcpy.
*/
static void build_catalogue(void) {
  int per = opt.page_size > 0 ? opt.page_size : opt.tools;
  if (per <= 0) per = 1;
  npages = opt.tools > 0 ? (opt.tools + per - 1) / per : 1;
  pages = calloc((size_t)npages, sizeof *pages);
  if (!pages) die("calloc");
  for (int k = 0; k < npages; k++) {
    Buf *b = &pages[k];
    buf_str(b, "{\"tools\":[");
    for (int i = k * per; i < opt.tools && i < (k + 1) * per; i++) {
      if (i > k * per) buf_str(b, ",");
      if (i < 2) fixed_tool(b, i);
      else generated_tool(b, i);
    }
    buf_str(b, "]");
    if (k + 1 < npages) buf_printf(b, ",\"nextCursor\":\"p%d\"", k + 1);
    buf_str(b, "}");
  }
}

/* ===================================================================== */
/* Connections                                                            */
/* ===================================================================== */

typedef struct Conn {
  int fd;
  Buf in;
  size_t in_off;
  Buf out;
  size_t out_off;
  int64_t due;     /* monotonic ns when `held` is due; 0: nothing held */
  Buf held;        /* a slow tool's answer (or its stream's tail) */
  int close_after; /* close once `out` is drained */
  int want_out;    /* EPOLLOUT is registered */
  int continued;   /* 100 Continue sent for the request being read */
} Conn;

static int epfd;
static Conn **conns;
static size_t conns_cap;
static unsigned long open_conns, held_conns;

/* ** Monotonic nanoseconds. */
static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ** Release a connection and everything it holds. */
static void conn_close(Conn *c) {
  epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
  close(c->fd);
  conns[c->fd] = NULL;
  if (c->due) held_conns--;
  open_conns--;
  free(c->in.p);
  free(c->out.p);
  free(c->held.p);
  free(c);
}

/* ** Register or drop interest in writability, only when it changes. */
static void want_out(Conn *c, int on) {
  if (c->want_out == on) return;
  struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | (on ? EPOLLOUT : 0u), .data.fd = c->fd};
  if (epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev) != 0) die("epoll_ctl");
  c->want_out = on;
}

/*
** Send what is queued. Returns 0 when the connection was closed (an error,
** or a Connection: close answer fully sent), else 1.
*/
static int flush(Conn *c) {
  while (c->out_off < c->out.len) {
    ssize_t n = send(c->fd, c->out.p + c->out_off, c->out.len - c->out_off, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        want_out(c, 1);
        return 1;
      }
      conn_close(c);
      return 0;
    }
    c->out_off += (size_t)n;
  }
  c->out.len = c->out_off = 0;
  want_out(c, 0);
  if (c->close_after) {
    conn_close(c);
    return 0;
  }
  return 1;
}

/* ===================================================================== */
/* HTTP answers                                                           */
/* ===================================================================== */

typedef struct Req {
  const char *method, *target;
  size_t method_len, target_len;
  const char *session;
  size_t session_len;
  const char *body;
  size_t body_len;
} Req;

/* ** The reason phrase of the few statuses this server answers. */
static const char *reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 202: return "Accepted";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Payload Too Large";
    case 431: return "Request Header Fields Too Large";
    case 501: return "Not Implemented";
    default: return "Status";
  }
}

/* ** Queue a whole answer with a Content-Length. */
static void answer(Conn *c, int status, const char *type, const char *extra, const char *body, size_t n) {
  buf_printf(&c->out, "HTTP/1.1 %d %s\r\n", status, reason(status));
  if (type) buf_printf(&c->out, "Content-Type: %s\r\n", type);
  if (extra) buf_str(&c->out, extra);
  if (c->close_after) buf_str(&c->out, "Connection: close\r\n");
  buf_printf(&c->out, "Content-Length: %zu\r\n\r\n", n);
  buf_add(&c->out, body, n);
}

/* ** A JSON-RPC error with a null id, the way the SDK server answers transport faults. */
static void transport_error(Conn *c, int status, int code, const char *message) {
  Buf b = {0};
  buf_printf(&b, "{\"jsonrpc\":\"2.0\",\"error\":{\"code\":%d,\"message\":\"%s\"},\"id\":null}", code,
             message);
  answer(c, status, "application/json", NULL, b.p, b.len);
  free(b.p);
}

/*
** Frame one JSON-RPC message as this server's answers are framed: a JSON body,
** or an event-stream body holding one `message` event.
*/
static void rpc_answer(Conn *c, const char *extra, const char *json, size_t n) {
  if (!opt.sse) {
    answer(c, 200, "application/json", extra, json, n);
    return;
  }
  Buf b = {0};
  buf_str(&b, "event: message\ndata: ");
  buf_add(&b, json, n);
  buf_str(&b, "\n\n");
  answer(c, 200, "text/event-stream", extra, b.p, b.len);
  free(b.p);
}

/* ===================================================================== */
/* JSON-RPC                                                               */
/* ===================================================================== */

static const char *const versions[] = {"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"};

/*
** Start a result: {"jsonrpc":"2.0","id":<the request's id, verbatim>,"result":
** The caller appends the result and the closing brace.
*/
static void result_head(Buf *b, Span id) {
  buf_str(b, "{\"jsonrpc\":\"2.0\",\"id\":");
  buf_add(b, id.s, (size_t)(id.e - id.s));
  buf_str(b, ",\"result\":");
}

/* ** A JSON-RPC error answer for a request. */
static void rpc_error(Conn *c, Span id, int code, const char *message) {
  Buf b = {0};
  buf_str(&b, "{\"jsonrpc\":\"2.0\",\"id\":");
  buf_add(&b, id.s, (size_t)(id.e - id.s));
  buf_printf(&b, ",\"error\":{\"code\":%d,\"message\":\"%s\"}}", code, message);
  rpc_answer(c, NULL, b.p, b.len);
  free(b.p);
}

/* ** initialize: echo a supported protocol revision, else offer ours; maybe a session. */
static void do_initialize(Conn *c, Span id, Span params) {
  Span v;
  const char *version = versions[0];
  if (member(params, "protocolVersion", &v) == 1) {
    for (size_t i = 0; i < sizeof versions / sizeof versions[0]; i++) {
      if (string_is(v, versions[i])) version = versions[i];
    }
  }
  Buf b = {0};
  result_head(&b, id);
  buf_printf(&b,
             "{\"protocolVersion\":\"%s\",\"capabilities\":{\"tools\":{\"listChanged\":false}},"
             "\"serverInfo\":{\"name\":\"bench-echo\",\"version\":\"1.0.0\"}}}",
             version);
  char extra[96] = "";
  if (opt.session) {
    char sid[48];
    new_session(sid, sizeof sid);
    snprintf(extra, sizeof extra, "Mcp-Session-Id: %s\r\n", sid);
  }
  rpc_answer(c, extra[0] ? extra : NULL, b.p, b.len);
  free(b.p);
}

/* ** tools/list: one pre-rendered page, chosen by the cursor. */
static void do_list(Conn *c, Span id, Span params) {
  Span cur;
  int page = 0;
  if (params.s && member(params, "cursor", &cur) == 1) {
    char *end;
    if (!is_string(cur) || cur.s[1] != 'p') {
      rpc_error(c, id, -32602, "Invalid cursor");
      return;
    }
    long k = strtol(cur.s + 2, &end, 10);
    if (end != cur.e - 1 || k < 1 || k >= npages) {
      rpc_error(c, id, -32602, "Invalid cursor");
      return;
    }
    page = (int)k;
  }
  Buf b = {0};
  result_head(&b, id);
  buf_add(&b, pages[page].p, pages[page].len);
  buf_str(&b, "}");
  rpc_answer(c, NULL, b.p, b.len);
  free(b.p);
}

/*
** `slow`: hold the answer on a per-connection timer. With --sse the stream's
** head goes out now (chunked) and the event when the timer fires, as a
** streaming server would; otherwise the whole JSON answer waits.
*/
static void do_slow(Conn *c, Span id, Span args) {
  Span v;
  long ms = opt.slow_ms;
  if (args.s && member(args, "ms", &v) == 1 && !is_string(v)) {
    char tmp[32];
    size_t n = (size_t)(v.e - v.s) < sizeof tmp - 1 ? (size_t)(v.e - v.s) : sizeof tmp - 1;
    memcpy(tmp, v.s, n);
    tmp[n] = '\0';
    ms = strtol(tmp, NULL, 10);
    if (ms < 0) ms = 0;
    if (ms > 600000) ms = 600000;
  }
  Buf json = {0};
  result_head(&json, id);
  buf_printf(&json, "{\"content\":[{\"type\":\"text\",\"text\":\"slept %ld ms\"}]}}", ms);
  if (opt.sse) {
    buf_str(&c->out,
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
            "Transfer-Encoding: chunked\r\n\r\n");
    Buf ev = {0};
    buf_str(&ev, "event: message\ndata: ");
    buf_add(&ev, json.p, json.len);
    buf_str(&ev, "\n\n");
    buf_printf(&c->held, "%zx\r\n", ev.len);
    buf_add(&c->held, ev.p, ev.len);
    buf_str(&c->held, "\r\n0\r\n\r\n");
    free(ev.p);
  } else {
    buf_printf(&c->held, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
               json.len);
    buf_add(&c->held, json.p, json.len);
  }
  free(json.p);
  c->due = now_ns() + (int64_t)ms * 1000000;
  held_conns++;
}

/* ** tools/call: echo, slow, or a tool error for anything else (as MCP servers answer). */
static void do_call(Conn *c, Span id, Span params) {
  Span name = {0}, args = {0}, msg;
  if (!params.s || member(params, "name", &name) != 1 || !is_string(name)) {
    rpc_error(c, id, -32602, "tools/call needs a tool name");
    return;
  }
  if (member(params, "arguments", &args) != 1 || *args.s != '{') args.s = args.e = NULL;
  if (string_is(name, "slow")) {
    do_slow(c, id, args);
    return;
  }
  Buf b = {0};
  result_head(&b, id);
  if (string_is(name, "echo")) {
    buf_str(&b, "{\"content\":[{\"type\":\"text\",\"text\":");
    /* The message's JSON string token is already valid JSON: copy it verbatim. */
    if (args.s && member(args, "message", &msg) == 1 && is_string(msg)) {
      buf_add(&b, msg.s, (size_t)(msg.e - msg.s));
    } else {
      buf_str(&b, "\"\"");
    }
    buf_str(&b, "}]}}");
  } else {
    buf_str(&b, "{\"content\":[{\"type\":\"text\",\"text\":\"unknown tool\"}],\"isError\":true}}");
  }
  rpc_answer(c, NULL, b.p, b.len);
  free(b.p);
}

/* ** A POST to /mcp: one JSON-RPC message (request, notification or response). */
static void handle_post(Conn *c, const Req *r) {
  Span body = {r->body, r->body + r->body_len}, method, id = {0}, params = {0};
  const char *p = ws(body.s, body.e);
  if (p == body.e || *p != '{' || !skip_value(p, body.e, 0)) {
    count.invalid++;
    transport_error(c, 400, -32700, "Parse error");
    return;
  }
  int has_method = member(body, "method", &method);
  if (has_method != 1) {
    Span any;
    if (member(body, "result", &any) == 1 || member(body, "error", &any) == 1) {
      count.responses++;
      answer(c, 202, NULL, NULL, "", 0);
    } else {
      count.invalid++;
      transport_error(c, 400, -32600, "Invalid Request");
    }
    return;
  }
  if (!is_string(method)) {
    count.invalid++;
    transport_error(c, 400, -32600, "Invalid Request");
    return;
  }
  count_method(method.s + 1, (size_t)(method.e - method.s - 2));
  int has_id = member(body, "id", &id) == 1;
  if (member(body, "params", &params) != 1 || *params.s != '{') params.s = params.e = NULL;
  int init = string_is(method, "initialize");
  if (opt.session && !init) {
    if (!r->session) {
      transport_error(c, 400, -32000, "Bad Request: Mcp-Session-Id header is required");
      return;
    }
    if (!find_session(r->session, r->session_len)) {
      transport_error(c, 404, -32001, "Session not found");
      return;
    }
  }
  if (!has_id) {
    answer(c, 202, NULL, NULL, "", 0);
    return;
  }
  if (init) {
    static const char empty[] = "{}";
    do_initialize(c, id, params.s ? params : (Span){empty, empty + 2});
  } else if (string_is(method, "tools/call")) {
    do_call(c, id, params);
  } else if (string_is(method, "tools/list")) {
    do_list(c, id, params);
  } else if (string_is(method, "ping")) {
    Buf b = {0};
    result_head(&b, id);
    buf_str(&b, "{}}");
    rpc_answer(c, NULL, b.p, b.len);
    free(b.p);
  } else {
    rpc_error(c, id, -32601, "Method not found");
  }
}

/* ** Route one complete HTTP request. */
static void handle(Conn *c, const Req *r) {
  size_t tlen = r->target_len;
  const char *q = memchr(r->target, '?', tlen);
  if (q) tlen = (size_t)(q - r->target);
  int is_get = r->method_len == 3 && memcmp(r->method, "GET", 3) == 0;
  int is_post = r->method_len == 4 && memcmp(r->method, "POST", 4) == 0;
  int is_delete = r->method_len == 6 && memcmp(r->method, "DELETE", 6) == 0;
  if (tlen == 6 && memcmp(r->target, "/stats", 6) == 0 && is_get) {
    count.stats++;
    Buf b = {0};
    stats_json(&b, open_conns);
    answer(c, 200, "application/json", NULL, b.p, b.len);
    free(b.p);
    return;
  }
  if (is_post) count.post++;
  else if (is_get) count.get++;
  else if (is_delete) count.del++;
  else count.other_verb++;
  if (tlen != 4 || memcmp(r->target, "/mcp", 4) != 0) {
    answer(c, 404, "text/plain", NULL, "not found\n", 10);
    return;
  }
  if (is_post) {
    handle_post(c, r);
  } else if (is_delete && opt.session) {
    unsigned long serial = r->session ? find_session(r->session, r->session_len) : 0;
    if (!serial) {
      transport_error(c, 404, -32001, "Session not found");
      return;
    }
    session_deleted[serial] = 1;
    answer(c, 200, NULL, NULL, "", 0);
  } else {
    /* GET: no server-initiated stream here (405 is the spec's "none offered"). */
    transport_error(c, 405, -32000, "Method not allowed.");
  }
}

/* ** Case-insensitive header-name match. */
static int header_is(const char *line, size_t n, const char *name) {
  size_t k = strlen(name);
  return n > k && line[k] == ':' && strncasecmp(line, name, k) == 0;
}

/* ** The header's value with surrounding blanks trimmed. */
static Span header_value(const char *line, const char *eol, size_t name_len) {
  Span v = {line + name_len + 1, eol};
  while (v.s < v.e && (*v.s == ' ' || *v.s == '\t')) v.s++;
  while (v.e > v.s && (v.e[-1] == ' ' || v.e[-1] == '\t')) v.e--;
  return v;
}

/*
** Answer every complete request in the input, in order; stop while a slow
** answer is held (pipelined requests wait behind it). Returns 0 when the
** connection is gone.
*/
static int process(Conn *c) {
  while (!c->due && !c->close_after) {
    const char *base = c->in.p;
    size_t avail = c->in.len - c->in_off;
    if (base == NULL || avail == 0) break;
    const char *p = base + c->in_off;
    const char *end = memmem(p, avail, "\r\n\r\n", 4); /* the head's blank line */
    if (!end) {
      if (avail > MAX_HEAD) {
        c->close_after = 1;
        answer(c, 431, NULL, NULL, "", 0);
      }
      break;
    }
    Req r = {0};
    const char *eol = memmem(p, (size_t)(end - p) + 2, "\r\n", 2);
    const char *sp1 = memchr(p, ' ', (size_t)(eol - p));
    const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(eol - sp1 - 1)) : NULL;
    if (!sp2) {
      c->close_after = 1;
      answer(c, 400, NULL, NULL, "", 0);
      break;
    }
    r.method = p;
    r.method_len = (size_t)(sp1 - p);
    r.target = sp1 + 1;
    r.target_len = (size_t)(sp2 - sp1 - 1);
    int http10 = (size_t)(eol - sp2 - 1) == 8 && memcmp(sp2 + 1, "HTTP/1.0", 8) == 0;
    size_t clen = 0;
    int chunked = 0, expect = 0, conn_close_hdr = 0, keep_alive_hdr = 0;
    for (const char *line = eol + 2; line < end + 2;) {
      const char *le = memmem(line, (size_t)(end + 2 - line), "\r\n", 2);
      size_t n = (size_t)(le - line);
      if (header_is(line, n, "content-length")) {
        Span v = header_value(line, le, 14);
        clen = 0;
        for (const char *d = v.s; d < v.e && *d >= '0' && *d <= '9' && clen <= MAX_BODY; d++) {
          clen = clen * 10 + (size_t)(*d - '0');
        }
      } else if (header_is(line, n, "mcp-session-id")) {
        Span v = header_value(line, le, 14);
        r.session = v.s;
        r.session_len = (size_t)(v.e - v.s);
      } else if (header_is(line, n, "transfer-encoding")) {
        chunked = 1;
      } else if (header_is(line, n, "expect")) {
        expect = 1;
      } else if (header_is(line, n, "connection")) {
        Span v = header_value(line, le, 10);
        if ((size_t)(v.e - v.s) == 5 && strncasecmp(v.s, "close", 5) == 0) conn_close_hdr = 1;
        if ((size_t)(v.e - v.s) == 10 && strncasecmp(v.s, "keep-alive", 10) == 0) keep_alive_hdr = 1;
      }
      line = le + 2;
    }
    size_t head = (size_t)(end + 4 - p);
    if (chunked || clen > MAX_BODY) {
      c->close_after = 1;
      answer(c, chunked ? 501 : 413, NULL, NULL, "", 0);
      break;
    }
    if (avail < head + clen) {
      if (expect && !c->continued) {
        buf_str(&c->out, "HTTP/1.1 100 Continue\r\n\r\n");
        c->continued = 1;
      }
      break;
    }
    c->continued = 0;
    if (conn_close_hdr || (http10 && !keep_alive_hdr)) c->close_after = 1;
    r.body = p + head;
    r.body_len = clen;
    handle(c, &r);
    c->in_off += head + clen;
  }
  if (c->in_off == c->in.len) {
    c->in.len = c->in_off = 0;
  } else if (c->in_off > 0 && c->in_off >= c->in.cap / 2) {
    memmove(c->in.p, c->in.p + c->in_off, c->in.len - c->in_off);
    c->in.len -= c->in_off;
    c->in_off = 0;
  }
  return flush(c);
}

/* ** Read what the socket has; 0 when the peer is gone (the connection is then closed). */
static int readable(Conn *c) {
  for (;;) {
    buf_reserve(&c->in, 16384);
    ssize_t n = recv(c->fd, c->in.p + c->in.len, c->in.cap - c->in.len - 1, 0);
    if (n > 0) {
      c->in.len += (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 1;
    conn_close(c);
    return 0;
  }
}

/* ** Accept every pending connection: non-blocking, no Nagle delay. */
static void accept_all(int lfd) {
  for (;;) {
    int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED) return;
      if (errno == EMFILE || errno == ENFILE) return;
      die("accept4");
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if ((size_t)fd >= conns_cap) {
      size_t cap = conns_cap ? conns_cap : 64;
      while (cap <= (size_t)fd) cap *= 2;
      Conn **grown = realloc(conns, cap * sizeof *conns);
      if (!grown) die("realloc");
      memset(grown + conns_cap, 0, (cap - conns_cap) * sizeof *grown);
      conns = grown;
      conns_cap = cap;
    }
    Conn *c = calloc(1, sizeof *c);
    if (!c) die("calloc");
    c->fd = fd;
    conns[fd] = c;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.fd = fd};
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) != 0) die("epoll_ctl");
    count.connections++;
    open_conns++;
  }
}

/* ** Milliseconds until the earliest held answer is due (-1: none held). */
static int next_timeout(void) {
  if (held_conns == 0) return -1;
  int64_t first = INT64_MAX, now = now_ns();
  for (size_t i = 0; i < conns_cap; i++) {
    if (conns[i] && conns[i]->due && conns[i]->due < first) first = conns[i]->due;
  }
  if (first <= now) return 0;
  return (int)((first - now + 999999) / 1000000);
}

/* ** Release every held answer that is due, then serve what queued behind it. */
static void fire_timers(void) {
  if (held_conns == 0) return;
  int64_t now = now_ns();
  for (size_t i = 0; i < conns_cap; i++) {
    Conn *c = conns[i];
    if (!c || !c->due || c->due > now) continue;
    c->due = 0;
    held_conns--;
    buf_add(&c->out, c->held.p, c->held.len);
    c->held.len = 0;
    process(c);
  }
}

/* ** SIGTERM/SIGINT: ask the loop to stop (it prints the counts on the way out). */
static void on_signal(int sig) {
  (void)sig;
  stop_requested = 1;
}

/* ** Parse a non-negative integer option or exit with usage. */
static int int_arg(int argc, char **argv, int *i) {
  if (*i + 1 >= argc) {
    fprintf(stderr, "echo_server: %s needs a value\n", argv[*i]);
    exit(2);
  }
  char *end;
  long v = strtol(argv[++*i], &end, 10);
  if (*end || v < 0 || v > 10000000) {
    fprintf(stderr, "echo_server: bad value for %s: %s\n", argv[*i - 1], argv[*i]);
    exit(2);
  }
  return (int)v;
}

/* ** Options, the listener, the loop; the counts on the way out. */
int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--port")) opt.port = int_arg(argc, argv, &i);
    else if (!strcmp(argv[i], "--session")) opt.session = 1;
    else if (!strcmp(argv[i], "--sse")) opt.sse = 1;
    else if (!strcmp(argv[i], "--tools")) opt.tools = int_arg(argc, argv, &i);
    else if (!strcmp(argv[i], "--page-size")) opt.page_size = int_arg(argc, argv, &i);
    else if (!strcmp(argv[i], "--slow-ms")) opt.slow_ms = int_arg(argc, argv, &i);
    else if (!strcmp(argv[i], "--exit-with-parent")) opt.exit_with_parent = 1;
    else {
      fprintf(stderr,
              "usage: echo_server [--port N] [--session] [--sse] [--tools N] [--page-size M] "
              "[--slow-ms N] [--exit-with-parent]\n");
      return 2;
    }
  }
  if (opt.port > 65535) {
    fprintf(stderr, "echo_server: --port must be 0..65535\n");
    return 2;
  }
  if (opt.exit_with_parent) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() == 1) return 0;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  session_tag = (unsigned)getpid() * 2654435761u ^ (unsigned)now_ns();
  build_catalogue();

  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (lfd < 0) die("socket");
  int one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in addr;
  memset(&addr, 0, sizeof addr);
  addr.sin_family = AF_INET;
  addr.sin_port = htons((uint16_t)opt.port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(lfd, (struct sockaddr *)&addr, sizeof addr) != 0) die("bind");
  if (listen(lfd, 512) != 0) die("listen");
  socklen_t alen = sizeof addr;
  if (getsockname(lfd, (struct sockaddr *)&addr, &alen) != 0) die("getsockname");
  epfd = epoll_create1(EPOLL_CLOEXEC);
  if (epfd < 0) die("epoll_create1");
  struct epoll_event lev = {.events = EPOLLIN, .data.fd = lfd};
  if (epoll_ctl(epfd, EPOLL_CTL_ADD, lfd, &lev) != 0) die("epoll_ctl");
  printf("listening %d\n", ntohs(addr.sin_port));
  fflush(stdout);

  struct epoll_event events[MAX_EVENTS];
  while (!stop_requested) {
    int n = epoll_wait(epfd, events, MAX_EVENTS, next_timeout());
    if (n < 0) {
      if (errno == EINTR) continue;
      die("epoll_wait");
    }
    for (int i = 0; i < n; i++) {
      int fd = events[i].data.fd;
      if (fd == lfd) {
        accept_all(lfd);
        continue;
      }
      Conn *c = (size_t)fd < conns_cap ? conns[fd] : NULL;
      if (!c) continue;
      uint32_t ev = events[i].events;
      if (ev & EPOLLOUT) {
        if (!flush(c)) continue;
      }
      if (ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
        if (!readable(c)) continue;
        process(c);
      }
    }
    fire_timers();
  }
  Buf b = {0};
  buf_str(&b, "stats ");
  stats_json(&b, open_conns);
  buf_str(&b, "\n");
  fwrite(b.p, 1, b.len, stdout);
  fflush(stdout);
  free(b.p);
  return 0;
}
