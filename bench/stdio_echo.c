/*
** stdio_echo.c: the least an MCP server over stdio can be (a benchmark
** program, not part of the module): one JSON-RPC message per line on stdin,
** one answer per line on stdout, each written with one write. It answers
** initialize (2025-11-25), ping, tools/list (one tool, echo) and tools/call
** echo ("Echo: " and the message, copied as the client escaped it); a
** server/discover probe, and every other method, is "method not found", so
** a client asking for the 2026-07-28 era falls back to 2025-11-25.
** Notifications are read and ignored. The JSON is found by byte search, never
** parsed: it serves well-formed benchmark clients, nothing else.
**
** With a server this cheap, a benchmark of a warm call over stdio measures
** the client and the pipe, not a Node server's event loop.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
  char *p;
  size_t len, cap;
} Buf;

/*
** Grow the buffer to hold `extra` more bytes; exits on allocation failure.
*/
static void reserve(Buf *b, size_t extra) {
  if (b->len + extra <= b->cap) return;
  while (b->len + extra > b->cap) b->cap = b->cap ? b->cap * 2 : 65536;
  b->p = realloc(b->p, b->cap);
  if (!b->p) exit(3);
}

static void add(Buf *b, const char *s, size_t n) {
  reserve(b, n);
  memcpy(b->p + b->len, s, n);
  b->len += n;
}

static void add_str(Buf *b, const char *s) {
  add(b, s, strlen(s));
}

/*
** The value after `"key":` in the line (up to the next `,` or `}` for a
** number, the closing quote for a string, quotes kept), or NULL.
*/
static const char *value_of(const char *line, const char *key, size_t *n) {
  char pattern[32];
  const char *v, *e;
  snprintf(pattern, sizeof pattern, "\"%s\":", key);
  v = strstr(line, pattern);
  if (!v) return NULL;
  v += strlen(pattern);
  if (*v == '"') {
    for (e = v + 1; *e && *e != '"'; e++)
      if (*e == '\\' && e[1]) e++;
    if (*e != '"') return NULL;
    *n = (size_t)(e - v) + 1;
    return v;
  }
  e = v + strcspn(v, ",}");
  *n = (size_t)(e - v);
  return v;
}

static int method_is(const char *m, size_t n, const char *name) {
  return n == strlen(name) + 2 && strncmp(m + 1, name, n - 2) == 0;
}

/*
** Write the whole buffer to stdout (one write when the pipe takes it).
*/
static void emit(Buf *out) {
  size_t done = 0;
  while (done < out->len) {
    ssize_t w = write(1, out->p + done, out->len - done);
    if (w <= 0) exit(0);
    done += (size_t)w;
  }
  out->len = 0;
}

/*
** Answer one request line (a notification gets nothing).
*/
static void answer(const char *line, Buf *out) {
  size_t id_n, m_n, msg_n;
  const char *id = value_of(line, "id", &id_n), *m = value_of(line, "method", &m_n), *msg;
  if (!id || !m) return;
  add_str(out, "{\"jsonrpc\":\"2.0\",\"id\":");
  add(out, id, id_n);
  if (method_is(m, m_n, "initialize")) {
    add_str(out,
            ",\"result\":{\"protocolVersion\":\"2025-11-25\",\"capabilities\":{\"tools\":{}},"
            "\"serverInfo\":{\"name\":\"stdio-echo\",\"version\":\"1\"}}}\n");
  } else if (method_is(m, m_n, "ping")) {
    add_str(out, ",\"result\":{}}\n");
  } else if (method_is(m, m_n, "tools/list")) {
    add_str(out,
            ",\"result\":{\"tools\":[{\"name\":\"echo\",\"description\":\"Echo a message.\","
            "\"inputSchema\":{\"type\":\"object\",\"properties\":{\"message\":{\"type\":\"string\"}},"
            "\"required\":[\"message\"]}}]}}\n");
  } else if (method_is(m, m_n, "tools/call") && (msg = value_of(line, "message", &msg_n)) && *msg == '"') {
    add_str(out, ",\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"Echo: ");
    add(out, msg + 1, msg_n - 2);
    add_str(out, "\"}]}}\n");
  } else {
    add_str(out, ",\"error\":{\"code\":-32601,\"message\":\"Method not found\"}}\n");
  }
  emit(out);
}

int main(void) {
  Buf in = {0}, out = {0};
  size_t start = 0;
  for (;;) {
    char *nl;
    ssize_t r;
    reserve(&in, 65536);
    r = read(0, in.p + in.len, in.cap - in.len - 1);
    if (r <= 0) return 0;
    in.len += (size_t)r;
    in.p[in.len] = '\0';
    while ((nl = memchr(in.p + start, '\n', in.len - start)) != NULL) {
      *nl = '\0';
      answer(in.p + start, &out);
      start = (size_t)(nl - in.p) + 1;
    }
    memmove(in.p, in.p + start, in.len - start);
    in.len -= start;
    start = 0;
  }
}
