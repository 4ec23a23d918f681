/* Memory read bandwidth: T threads each sum their slice of one buffer (64-bit integer adds, which
 * the compiler vectorizes without -ffast-math), repeated; prints one JSON line with the best and
 * mean GB/s (1 GB = 1e9 bytes). Compiled on the fly by compare_llamacpp.py:
 *   cc -O3 -march=native -pthread read_bandwidth.c -o read_bandwidth
 *   ./read_bandwidth THREADS [MIB=1024] [REPS=5]
 * Pages are first touched by the thread that later reads them. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
  const uint64_t *data;
  size_t n;
  uint64_t sum;
  pthread_barrier_t *start, *done;
  int reps;
  int init;
} Slice;

static uint64_t sum_words(const uint64_t *p, size_t n) {
  uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    a0 += p[i];
    a1 += p[i + 1];
    a2 += p[i + 2];
    a3 += p[i + 3];
  }
  for (; i < n; ++i) a0 += p[i];
  return a0 + a1 + a2 + a3;
}

static void *worker(void *arg) {
  Slice *s = (Slice *)arg;
  uint64_t *w = (uint64_t *)s->data;
  for (size_t i = 0; i < s->n; ++i) w[i] = i * 2654435761u;  /* first touch, nonzero contents */
  pthread_barrier_wait(s->done);
  for (int r = 0; r < s->reps; ++r) {
    pthread_barrier_wait(s->start);
    s->sum += sum_words(s->data, s->n);
    pthread_barrier_wait(s->done);
  }
  return NULL;
}

static long parse(const char *text, const char *what, long lo, long hi) {
  char *end = NULL;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (*text == '\0' || *end != '\0' || errno != 0 || v < lo || v > hi) {
    fprintf(stderr, "read_bandwidth: %s must be an integer in [%ld, %ld], got '%s'\n", what, lo, hi, text);
    exit(2);
  }
  return v;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  if (argc < 2 || argc > 4) {
    fprintf(stderr, "usage: read_bandwidth THREADS [MIB=1024] [REPS=5]\n");
    return 2;
  }
  const int threads = (int)parse(argv[1], "THREADS", 1, 1024);
  const long mib = argc > 2 ? parse(argv[2], "MIB", 1, 1 << 20) : 1024;
  const int reps = argc > 3 ? (int)parse(argv[3], "REPS", 1, 1000) : 5;
  const size_t bytes = (size_t)mib << 20, words = bytes / sizeof(uint64_t);
  uint64_t *buf = NULL;
  if (posix_memalign((void **)&buf, 4096, bytes) != 0) {
    fprintf(stderr, "read_bandwidth: cannot allocate %ld MiB\n", mib);
    return 1;
  }
  pthread_barrier_t start, done;
  pthread_barrier_init(&start, NULL, threads + 1);
  pthread_barrier_init(&done, NULL, threads + 1);
  Slice *slices = calloc(threads, sizeof(Slice));
  pthread_t *tids = calloc(threads, sizeof(pthread_t));
  const size_t per = words / threads;
  for (int t = 0; t < threads; ++t) {
    slices[t].data = buf + per * t;
    slices[t].n = t == threads - 1 ? words - per * t : per;
    slices[t].start = &start;
    slices[t].done = &done;
    slices[t].reps = reps;
    if (pthread_create(&tids[t], NULL, worker, &slices[t]) != 0) {
      fprintf(stderr, "read_bandwidth: cannot start thread %d\n", t);
      return 1;
    }
  }
  pthread_barrier_wait(&done);  /* contents written */
  double best = 0, total = 0;
  for (int r = 0; r < reps; ++r) {
    const double t0 = now_s();
    pthread_barrier_wait(&start);
    pthread_barrier_wait(&done);
    const double gbs = bytes / (now_s() - t0) / 1e9;
    total += gbs;
    if (gbs > best) best = gbs;
  }
  uint64_t check = 0;
  for (int t = 0; t < threads; ++t) {
    pthread_join(tids[t], NULL);
    check += slices[t].sum;
  }
  printf("{\"threads\": %d, \"bytes\": %zu, \"repetitions\": %d, \"best_gb_per_s\": %.3f, "
         "\"mean_gb_per_s\": %.3f, \"checksum\": %llu}\n",
         threads, bytes, reps, best, total / reps, (unsigned long long)check);
  free(slices);
  free(tids);
  free(buf);
  return 0;
}
