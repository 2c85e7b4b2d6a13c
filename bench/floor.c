/*
** floor.c: the floor for the benchmarks (bench/run.lua) — the least a
** client built on libcurl can do per call: one easy handle on a kept-alive
** connection posting the same JSON-RPC tools/call body again and again, no
** JSON encoding or decoding, no event-stream parsing, no Lua. A client under
** test is compared with this, against the same server, in the same run.
**
** usage: floor --url URL [--mode warm|cold|list] [--calls N] [--warmup W] [--message TEXT]
**        floor --get URL       print the body of one GET (bench/run.lua reads /stats with it)
**   warm  handshake once (initialize, notifications/initialized, keeping the session id and the
**         protocol revision), then N timed tools/call echo posts on the same connection.
**   cold  N times: a new handle and connection, handshake, one call, DELETE when there is a
**         session; each timed whole.
**   list  N times: the whole tools/list catalogue, page after page (nextCursor found by a byte
**         search, never parsed), on one connection.
** Prints one JSON line: client, mode, n, wall_s, ops_per_s, p50_ms, p99_ms, max_ms, cpu_s,
** cpu_per_op_us (getrusage user+system over the timed part), peak_rss_kb, pages (list), errors.
** An answer that is not 200 or carries no "result" counts as an error; any error exits 1.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <sys/resource.h>

#include <curl/curl.h>

typedef struct Buf {
  char *p;
  size_t len, cap;
} Buf;

/*
** The state one connection carries: the handle, the request headers (they
** gain the session id and revision after the handshake) and the response.
*/
typedef struct Client {
  CURL *easy;
  struct curl_slist *headers;
  Buf body;
  char session[256];
  char version[32];
  const char *url;
} Client;

static unsigned long errors;

/* ** Fatal setup failures: the benchmark cannot say anything useful after them. */
static void die(const char *what) {
  fprintf(stderr, "floor: %s\n", what);
  exit(1);
}

/* ** Monotonic nanoseconds. */
static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ** Process CPU seconds (user + system), as the other clients report theirs. */
static double cpu_seconds(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
         (double)ru.ru_stime.tv_usec / 1e6;
}

/* ** Peak resident set size in KiB. */
static long peak_rss_kb(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

/* ** libcurl write callback: append to the response buffer (reused between calls). */
static size_t on_body(char *data, size_t size, size_t nmemb, void *ud) {
  Buf *b = ud;
  size_t n = size * nmemb;
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + n + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return 0;
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->len, data, n);
  b->len += n;
  b->p[b->len] = '\0';
  return n;
}

/* ** libcurl header callback: keep the Mcp-Session-Id the handshake hands out. */
static size_t on_header(char *line, size_t size, size_t nmemb, void *ud) {
  Client *c = ud;
  size_t n = size * nmemb;
  static const char name[] = "mcp-session-id:";
  if (n > sizeof name - 1 && strncasecmp(line, name, sizeof name - 1) == 0) {
    const char *s = line + sizeof name - 1, *e = line + n;
    while (s < e && (*s == ' ' || *s == '\t')) s++;
    while (e > s && (e[-1] == '\r' || e[-1] == '\n' || e[-1] == ' ')) e--;
    size_t len = (size_t)(e - s) < sizeof c->session - 1 ? (size_t)(e - s) : sizeof c->session - 1;
    memcpy(c->session, s, len);
    c->session[len] = '\0';
  }
  return n;
}

/* ** (Re)build the request headers: the session ones only once the handshake gave them. */
static void set_headers(Client *c) {
  char line[320];
  curl_slist_free_all(c->headers);
  c->headers = curl_slist_append(NULL, "Content-Type: application/json");
  c->headers = curl_slist_append(c->headers, "Accept: application/json, text/event-stream");
  if (c->session[0]) {
    snprintf(line, sizeof line, "Mcp-Session-Id: %s", c->session);
    c->headers = curl_slist_append(c->headers, line);
  }
  if (c->version[0]) {
    snprintf(line, sizeof line, "MCP-Protocol-Version: %s", c->version);
    c->headers = curl_slist_append(c->headers, line);
  }
  if (!c->headers) die("curl_slist_append");
  curl_easy_setopt(c->easy, CURLOPT_HTTPHEADER, c->headers);
}

/* ** A new handle (hence a new connection) with the options every request shares. */
static void client_open(Client *c, const char *url) {
  memset(c, 0, sizeof *c);
  c->url = url;
  c->easy = curl_easy_init();
  if (!c->easy) die("curl_easy_init");
  curl_easy_setopt(c->easy, CURLOPT_URL, url);
  curl_easy_setopt(c->easy, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c->easy, CURLOPT_WRITEDATA, &c->body);
  curl_easy_setopt(c->easy, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c->easy, CURLOPT_HEADERDATA, c);
  curl_easy_setopt(c->easy, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(c->easy, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c->easy, CURLOPT_TIMEOUT_MS, 30000L);
  set_headers(c);
}

/* ** Release the handle, its connection and buffers. */
static void client_close(Client *c) {
  curl_easy_cleanup(c->easy);
  curl_slist_free_all(c->headers);
  free(c->body.p);
}

/*
** One exchange. `body` NULL means keep the POST body already set (the warm
** loop sets it once). Returns the HTTP status, 0 on a transport failure.
*/
static long perform(Client *c, const char *body) {
  long status = 0;
  if (body) {
    curl_easy_setopt(c->easy, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c->easy, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
  }
  c->body.len = 0;
  if (c->body.p) c->body.p[0] = '\0';
  if (curl_easy_perform(c->easy) != CURLE_OK) return 0;
  curl_easy_getinfo(c->easy, CURLINFO_RESPONSE_CODE, &status);
  return status;
}

/* ** Did the last exchange answer a result? */
static int answered(Client *c, long status) {
  int ok = status == 200 && c->body.p && strstr(c->body.p, "\"result\"");
  if (!ok) errors++;
  return ok;
}

/* ** initialize (keeping the session and revision), then notifications/initialized. */
static void handshake(Client *c) {
  static const char init[] =
    "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-11-25\","
    "\"capabilities\":{},\"clientInfo\":{\"name\":\"floor\",\"version\":\"1.0.0\"}}}";
  static const char initialized[] = "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}";
  if (!answered(c, perform(c, init))) die("initialize failed");
  const char *v = strstr(c->body.p, "\"protocolVersion\":\"");
  if (v) {
    v += strlen("\"protocolVersion\":\"");
    size_t n = 0;
    while (v[n] && v[n] != '"' && n < sizeof c->version - 1) n++;
    memcpy(c->version, v, n);
    c->version[n] = '\0';
  }
  set_headers(c);
  long status = perform(c, initialized);
  if (status != 202 && status != 200) die("notifications/initialized failed");
}

/* ** End a session the way the clients under test do on close. */
static void end_session(Client *c) {
  if (!c->session[0]) return;
  curl_easy_setopt(c->easy, CURLOPT_CUSTOMREQUEST, "DELETE");
  curl_easy_setopt(c->easy, CURLOPT_HTTPGET, 1L);
  perform(c, NULL);
}

/* ** qsort order for latencies. */
static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* ** Nearest-rank percentile of sorted latencies, in milliseconds. */
static double pct_ms(const int64_t *sorted, size_t n, double p) {
  if (n == 0) return 0;
  size_t k = (size_t)(p * (double)n + 0.999999);
  if (k < 1) k = 1;
  if (k > n) k = n;
  return (double)sorted[k - 1] / 1e6;
}

/* ** One listing: every page, following nextCursor. Returns the number of pages. */
static int list_all(Client *c) {
  char body[512], cursor[128] = "";
  int pages = 0;
  for (;;) {
    if (cursor[0]) {
      snprintf(body, sizeof body,
               "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"tools/list\",\"params\":{\"cursor\":\"%s\"}}",
               pages + 2, cursor);
    } else {
      snprintf(body, sizeof body, "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"tools/list\",\"params\":{}}",
               pages + 2);
    }
    pages++;
    if (!answered(c, perform(c, body))) return pages;
    const char *nc = strstr(c->body.p, "\"nextCursor\":\"");
    if (!nc || pages > 1000) return pages;
    nc += strlen("\"nextCursor\":\"");
    size_t n = 0;
    while (nc[n] && nc[n] != '"' && n < sizeof cursor - 1) n++;
    memcpy(cursor, nc, n);
    cursor[n] = '\0';
  }
}

/* ** Print the body of one GET (the echo server's /stats). */
static int get_once(const char *url) {
  Client c;
  client_open(&c, url);
  curl_easy_setopt(c.easy, CURLOPT_HTTPGET, 1L);
  long status = perform(&c, NULL);
  if (status != 200) {
    fprintf(stderr, "floor: GET %s answered %ld\n", url, status);
    client_close(&c);
    return 1;
  }
  fwrite(c.body.p, 1, c.body.len, stdout);
  fputc('\n', stdout);
  client_close(&c);
  return 0;
}

/* ** Parse a count option. */
static long count_arg(int argc, char **argv, int *i) {
  if (*i + 1 >= argc) die("an option needs a value");
  char *end;
  long v = strtol(argv[++*i], &end, 10);
  if (*end || v < 0) die("a count must be a non-negative integer");
  return v;
}

/* ** Options, the timed loop, one JSON line. */
int main(int argc, char **argv) {
  const char *url = NULL, *mode = "warm", *message = "hello", *get = NULL;
  long calls = 1000, warmup = 50;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--url") && i + 1 < argc) url = argv[++i];
    else if (!strcmp(argv[i], "--get") && i + 1 < argc) get = argv[++i];
    else if (!strcmp(argv[i], "--mode") && i + 1 < argc) mode = argv[++i];
    else if (!strcmp(argv[i], "--message") && i + 1 < argc) message = argv[++i];
    else if (!strcmp(argv[i], "--calls")) calls = count_arg(argc, argv, &i);
    else if (!strcmp(argv[i], "--warmup")) warmup = count_arg(argc, argv, &i);
    else die("usage: floor --url URL [--mode warm|cold|list] [--calls N] [--warmup W] | --get URL");
  }
  if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) die("curl_global_init");
  if (get) return get_once(get);
  if (!url) die("--url is required");
  int warm = !strcmp(mode, "warm"), cold = !strcmp(mode, "cold"), list = !strcmp(mode, "list");
  if (!warm && !cold && !list) die("--mode must be warm, cold or list");

  char call[1024];
  snprintf(call, sizeof call,
           "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\","
           "\"arguments\":{\"message\":\"%s\"}}}",
           message);
  int64_t *lat = calloc((size_t)(calls > 0 ? calls : 1), sizeof *lat);
  if (!lat) die("calloc");
  Client c;
  int pages = 0;
  double cpu0 = 0;
  int64_t t0 = 0;
  if (cold) {
    cpu0 = cpu_seconds();
    t0 = now_ns();
    for (long i = 0; i < calls; i++) {
      int64_t s = now_ns();
      client_open(&c, url);
      handshake(&c);
      answered(&c, perform(&c, call));
      end_session(&c);
      client_close(&c);
      lat[i] = now_ns() - s;
    }
  } else {
    client_open(&c, url);
    handshake(&c);
    if (list) {
      for (long i = 0; i < warmup; i++) list_all(&c);
      cpu0 = cpu_seconds();
      t0 = now_ns();
      for (long i = 0; i < calls; i++) {
        int64_t s = now_ns();
        pages = list_all(&c);
        lat[i] = now_ns() - s;
      }
    } else {
      perform(&c, call);
      for (long i = 0; i < warmup; i++) answered(&c, perform(&c, NULL));
      cpu0 = cpu_seconds();
      t0 = now_ns();
      for (long i = 0; i < calls; i++) {
        int64_t s = now_ns();
        answered(&c, perform(&c, NULL));
        lat[i] = now_ns() - s;
      }
    }
  }
  double wall = (double)(now_ns() - t0) / 1e9, cpu = cpu_seconds() - cpu0;
  if (!cold) {
    end_session(&c);
    client_close(&c);
  }
  qsort(lat, (size_t)calls, sizeof *lat, cmp_i64);
  printf(
    "{\"client\":\"floor\",\"mode\":\"%s\",\"n\":%ld,\"wall_s\":%.6f,\"ops_per_s\":%.3f,"
    "\"p50_ms\":%.4f,\"p99_ms\":%.4f,\"max_ms\":%.4f,\"cpu_s\":%.6f,\"cpu_per_op_us\":%.3f,"
    "\"peak_rss_kb\":%ld,\"pages\":%d,\"errors\":%lu}\n",
    mode, calls, wall, wall > 0 ? (double)calls / wall : 0.0, pct_ms(lat, (size_t)calls, 0.50),
    pct_ms(lat, (size_t)calls, 0.99), calls ? (double)lat[calls - 1] / 1e6 : 0.0, cpu,
    calls ? cpu / (double)calls * 1e6 : 0.0, peak_rss_kb(), pages, errors);
  free(lat);
  curl_global_cleanup();
  return errors ? 1 : 0;
}
