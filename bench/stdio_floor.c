/*
** stdio_floor.c: the floor of a warm call over stdio (a benchmark program,
** not part of the module): a child (`cat`, started by posix_spawn with pipes)
** is written one request line of a tools/call's size and read one line back,
** N times, with a blocking poll between. What no client of a server over
** stdio can go below: a line written, a line read over a pipe.
**
**   bench/stdio_floor [N]
**
** Prints the JSON line the stdio clients print: client, n, wall_s,
** wall_per_op_us, cpu_s, cpu_per_op_us (getrusage, user + system),
** peak_rss_kb, first_answer_ms (spawn to the first line back).
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

static const char LINE[] =
  "{\"jsonrpc\":\"2.0\",\"id\":12,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\","
  "\"arguments\":{\"message\":\"hello\"}}}\n";

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
** Write the line, then read until one whole line is back; 0 on failure.
*/
static int round_trip(int in, int out) {
  static char buf[4096];
  size_t got = 0;
  if (write(in, LINE, sizeof LINE - 1) != (ssize_t)(sizeof LINE - 1)) return 0;
  for (;;) {
    struct pollfd p = {out, POLLIN, 0};
    ssize_t n;
    if (poll(&p, 1, 5000) <= 0) return 0;
    n = read(out, buf + got, sizeof buf - got);
    if (n <= 0) return 0;
    got += (size_t)n;
    if (memchr(buf, '\n', got)) return 1;
  }
}

/*
** Spawn cat on two pipes, time the first round trip from the spawn, then N.
*/
int main(int argc, char **argv) {
  long n = argc > 1 ? strtol(argv[1], NULL, 10) : 20000;
  int to_child[2], from_child[2];
  static char cat[] = "cat";
  char *child_argv[] = {cat, NULL};
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
  if (posix_spawnp(&pid, "cat", &fa, NULL, child_argv, environ) != 0) return 2;
  posix_spawn_file_actions_destroy(&fa);
  close(to_child[0]);
  close(from_child[1]);
  if (!round_trip(to_child[1], from_child[0])) return 1;
  first_ms = (now() - t_spawn) * 1000;
  for (int i = 0; i < 1000; i++)
    if (!round_trip(to_child[1], from_child[0])) return 1;
  t0 = now();
  c0 = cpu();
  for (long i = 0; i < n; i++)
    if (!round_trip(to_child[1], from_child[0])) return 1;
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
