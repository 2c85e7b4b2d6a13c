/*
** http_headers.c: header lines, both ways. In: libcurl's header callback
** keeps the response head (up to 256 KiB, a new status line starting a new
** response), reads its media type (which decides whether a body is
** streamed), and the kept head goes to Lua with the response, whose header
** table is made from it when a header is first read (the session id, read
** from every answer, is found in it directly). Out: the
** request's header lines as a libcurl list kept in the leg and reused while a
** send has the same lines, with the credential in a node of its own after
** them, cut off and wiped (with a secret body's copy) when the exchange ends.
**
** Rule: on_header is a libcurl callback: it touches only C buffers owned by
** the leg userdata, never Lua, so no Lua error can cross libcurl. The
** response fuzz harness (fuzz/response_fuzz.c) includes this file to reach
** its static functions.
*/
#include "http.h"

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
  if (n < i || !mcp_http_ascii_ieq(line, name, i) || leg->event_stream) return;
  while (i < n && (line[i] == ' ' || line[i] == '\t')) i++;
  end = i;
  while (end < n && line[end] != ';' && line[end] != '\r' && line[end] != '\n') end++;
  while (end > i && (line[end - 1] == ' ' || line[end - 1] == '\t')) end--;
  leg->event_stream = end - i == sizeof stream - 1 && mcp_http_ascii_ieq(line + i, stream, sizeof stream - 1);
  for (k = 0; k < end - i && k < MEDIA_CAP - 1; k++) leg->media[k] = mcp_http_ascii_lower(line[i + k]);
  leg->media[k] = '\0';
}

/*
** One header line at a time, status lines included. A new status line starts
** a new response (an interim 1xx, whose headers must not leak into the final
** one), so it resets what was kept. Trailers after the body are kept as
** headers but never change the media type.
*/
size_t mcp_http_on_header(char *line, size_t size, size_t n, void *ud) {
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
  if (!mcp_http_buf_append(&leg->head, line, n)) {
    leg->out_of_memory = 1;
    return 0;
  }
  return n;
}

/*
** Free the kept header list. libcurl must not keep a pointer to the freed
** memory, so it is told first.
*/
void mcp_http_free_header_list(Leg *leg) {
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
void mcp_http_drop_headers(Leg *leg) {
  if (leg->secret != NULL) {
    if (leg->secret->data != NULL) mcp_http_wipe(leg->secret->data, strlen(leg->secret->data));
    if (leg->tail != NULL) leg->tail->next = NULL;
    else leg->headers = NULL;
    curl_slist_free_all(leg->secret);
    leg->secret = NULL;
  }
  if (leg->secret_body != NULL) {
    if (leg->easy != NULL) curl_easy_setopt(leg->easy, CURLOPT_POSTFIELDS, (char *)NULL);
    mcp_http_wipe(leg->secret_body, leg->secret_body_len);
    free(leg->secret_body);
    leg->secret_body = NULL;
    leg->secret_body_len = 0;
  }
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
const char *mcp_http_build_headers(lua_State *L, Leg *leg, const Request *r, int expect) {
  lua_Integer i;
  if (same_headers(L, leg, r, expect)) return NULL;
  mcp_http_free_header_list(leg);
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

/* One header line of a head: its name and its value trimmed of blanks; 0 for a line without a name. */
static int split_line(char *line, char *eol, char **colon, char **v, char **ve) {
  *colon = memchr(line, ':', (size_t)(eol - line));
  if (*colon == NULL || *colon == line) return 0;
  *v = *colon + 1;
  *ve = eol;
  while (*v < *ve && (**v == ' ' || **v == '\t')) (*v)++;
  while (*ve > *v && ((*ve)[-1] == ' ' || (*ve)[-1] == '\t' || (*ve)[-1] == '\r')) (*ve)--;
  return 1;
}

/*
** A kept head's lines as { [lower-case name] = trimmed value }, last wins.
** The first line is the status line; lines without a colon are skipped. The
** names are lower-cased in place: head is the caller's copy.
*/
void mcp_http_push_headers(lua_State *L, char *head, size_t len) {
  char *p = head, *end = p + len, *c;
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
    if (!split_line(line, eol, &colon, &v, &ve)) continue;
    for (c = line; c < colon; c++) *c = mcp_http_ascii_lower(*c);
    lua_pushlstring(L, line, (size_t)(colon - line));
    lua_pushlstring(L, v, (size_t)(ve - v));
    lua_rawset(L, -3);
  }
}

/*
** The value the header table would hold for a lower-case name (the last such
** line, trimmed), read from the kept head without building the table; NULL
** when no line names it.
*/
const char *mcp_http_header_value(const Leg *leg, const char *name, size_t *vlen) {
  char *p = leg->head.p, *end, *found = NULL;
  size_t nlen = strlen(name);
  int first = 1;
  if (p == NULL) return NULL; /* nothing came */
  end = p + leg->head.len;
  while (p < end) {
    char *eol = memchr(p, '\n', (size_t)(end - p)), *line = p, *colon, *v, *ve;
    if (eol == NULL) eol = end;
    p = eol < end ? eol + 1 : end;
    if (first) {
      first = 0;
      continue;
    }
    if (!split_line(line, eol, &colon, &v, &ve)) continue;
    if ((size_t)(colon - line) == nlen && mcp_http_ascii_ieq(line, name, nlen)) {
      found = v;
      *vlen = (size_t)(ve - v);
    }
  }
  return found;
}

/*
** __index of a response table: its 'headers' is made from the kept head
** (the 'head' field) the first time it is read, then stored in the table.
** Most responses are never asked for a header beyond those the leg hands
** over as fields, so most never make the table.
*/
int mcp_http_response_index(lua_State *L) {
  size_t len = 0;
  const char *head;
  char *copy;
  if (lua_type(L, 2) != LUA_TSTRING || strcmp(lua_tostring(L, 2), "headers") != 0) return 0;
  lua_pushliteral(L, "head");
  lua_rawget(L, 1);
  head = lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, &len) : "";
  copy = lua_newuserdatauv(L, len > 0 ? len : 1, 0);
  memcpy(copy, head, len);
  mcp_http_push_headers(L, copy, len);
  lua_pushliteral(L, "headers");
  lua_pushvalue(L, -2);
  lua_rawset(L, 1);
  return 1;
}
