/*
** stdio_floor.c: the floors of a warm call over stdio (a benchmark program,
** not part of the module). Two of them:
**
**   bench/stdio_floor N              a child `cat` is written one request
**                                    line of a tools/call's size and read
**                                    one line back, N times: a line written,
**                                    a line read over a pipe. cat answers
**                                    within the write, so the client rarely
**                                    sleeps: what no round trip goes below.
**   bench/stdio_floor N -- ARGV...   the child is a real MCP server (ARGV):
**                                    initialize, notifications/initialized,
**                                    then N tools/call echo, each written
**                                    with one write and its answer read with
**                                    a blocking poll and read. The server
**                                    answers after its own delay, so every
**                                    call sleeps and is woken: what a client
**                                    that does nothing but wait pays for a
**                                    round trip with that server.
**
** Prints the JSON line the stdio clients print: client, n, wall_s,
** wall_per_op_us, cpu_s, cpu_per_op_us (getrusage, user + system),
** peak_rss_kb, first_answer_ms (spawn to the first line back), errors.
*/
#include <errno.h>
#include <poll.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BUF_SIZE 65536

static const char CAT_LINE[] =
  "{\"jsonrpc\":\"2.0\",\"id\":12,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\","
  "\"arguments\":{\"message\":\"hello\"}}}\n";

static const char INITIALIZE[] =
  "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-11-25\","
  "\"capabilities\":{},\"clientInfo\":{\"name\":\"stdio-floor\",\"version\":\"1\"}}}\n";
static const char INITIALIZED[] = "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n";

static char buf[BUF_SIZE]; /* what the child wrote that is not yet taken as lines */
static size_t buffered;

/*
** Seconds on the monotonic clock.
*/
static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/*
** CPU seconds of this process so far (user + system).
*/
static double cpu(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/*
** Write the whole line; 0 on failure.
*/
static int write_all(int fd, const char *s, size_t len) {
  while (len > 0) {
    ssize_t n = write(fd, s, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return 0;
    s += n;
    len -= (size_t)n;
  }
  return 1;
}

/*
** Read until one whole line is buffered, copy it (without its newline, cut
** to size) into line and take it off the buffer; 0 on failure.
*/
static int read_line(int fd, char *line, size_t size) {
  for (;;) {
    char *nl = memchr(buf, '\n', buffered);
    if (nl) {
      size_t len = (size_t)(nl - buf), keep = len < size - 1 ? len : size - 1;
      memcpy(line, buf, keep);
      line[keep] = '\0';
      memmove(buf, nl + 1, buffered - len - 1);
      buffered -= len + 1;
      return 1;
    }
    if (buffered == sizeof buf) return 0;
    struct pollfd p = {fd, POLLIN, 0};
    ssize_t n;
    if (poll(&p, 1, 5000) <= 0) return 0;
    n = read(fd, buf + buffered, sizeof buf - buffered);
    if (n <= 0) return 0;
    buffered += (size_t)n;
  }
}

/*
** One round trip: cat's line, or a tools/call echo with this id whose answer
** (the line carrying its id) must hold the echo; 0 on failure.
*/
static int round_trip(int in, int out, int mcp, long id) {
  char req[512], line[4096], want[64];
  size_t len;
  if (!mcp) return write_all(in, CAT_LINE, sizeof CAT_LINE - 1) && read_line(out, line, sizeof line);
  len = (size_t)snprintf(
    req, sizeof req,
    "{\"jsonrpc\":\"2.0\",\"id\":%ld,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\","
    "\"arguments\":{\"message\":\"hello\"}}}\n",
    id);
  snprintf(want, sizeof want, "\"id\":%ld", id);
  if (!write_all(in, req, len)) return 0;
  do {
    if (!read_line(out, line, sizeof line)) return 0;
  } while (!strstr(line, want));
  return strstr(line, "Echo: hello") != NULL;
}

/*
** Spawn the child on two pipes (cat, or the server after --, opened with
** initialize), time the first round trip from the spawn, then N.
*/
int main(int argc, char **argv) {
  long n = argc > 1 ? strtol(argv[1], NULL, 10) : 20000, id = 1;
  int mcp = argc > 3 && strcmp(argv[2], "--") == 0;
  int to_child[2], from_child[2];
  static char cat[] = "cat";
  char *cat_argv[] = {cat, NULL};
  char **child_argv = mcp ? argv + 3 : cat_argv;
  char line[4096];
  posix_spawn_file_actions_t fa;
  pid_t pid;
  double t_spawn, first_ms, t0, c0, wall, used;
  struct rusage ru;
  if (n < 1 || pipe(to_child) != 0 || pipe(from_child) != 0) return 2;
  t_spawn = now();
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, to_child[0], 0);
  posix_spawn_file_actions_adddup2(&fa, from_child[1], 1);
  posix_spawn_file_actions_addclose(&fa, to_child[1]);
  posix_spawn_file_actions_addclose(&fa, from_child[0]);
  if (posix_spawnp(&pid, child_argv[0], &fa, NULL, child_argv, environ) != 0) return 2;
  posix_spawn_file_actions_destroy(&fa);
  close(to_child[0]);
  close(from_child[1]);
  if (mcp && !(write_all(to_child[1], INITIALIZE, sizeof INITIALIZE - 1) &&
               read_line(from_child[0], line, sizeof line) &&
               write_all(to_child[1], INITIALIZED, sizeof INITIALIZED - 1)))
    return 1;
  if (!round_trip(to_child[1], from_child[0], mcp, id++)) return 1;
  first_ms = (now() - t_spawn) * 1000;
  for (int i = 0; i < (mcp ? 200 : 1000); i++)
    if (!round_trip(to_child[1], from_child[0], mcp, id++)) return 1;
  t0 = now();
  c0 = cpu();
  for (long i = 0; i < n; i++)
    if (!round_trip(to_child[1], from_child[0], mcp, id++)) return 1;
  wall = now() - t0;
  used = cpu() - c0;
  close(to_child[1]);
  waitpid(pid, NULL, 0);
  getrusage(RUSAGE_SELF, &ru);
  printf(
    "{\"client\":\"floor-stdio\",\"n\":%ld,\"wall_s\":%.6f,\"wall_per_op_us\":%.3f,\"cpu_s\":%.6f,"
    "\"cpu_per_op_us\":%.3f,\"peak_rss_kb\":%ld,\"first_answer_ms\":%.3f,\"errors\":0}\n",
    n, wall, wall / (double)n * 1e6, used, used / (double)n * 1e6, ru.ru_maxrss, first_ms);
  return 0;
}
