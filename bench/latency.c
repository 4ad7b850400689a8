/* How long one random memory read takes, by working-set size: this machine's memory floor.
 *
 * Run: cc -O2 bench/latency.c -o /tmp/latency && /tmp/latency
 *
 * A pointer chase through a random cycle of cache lines: each read's address is the value
 * of the one before, so reads cannot overlap and the time per read is the latency of the
 * level that holds the working set. At 100,000 endpoints a random pick lands on a record
 * that is in none of the caches; docs/performance.md (scaling) uses these figures to say
 * what a random pick must cost here, whatever the library does, and bench/misses.py
 * models the last level with the capacity at which the latency jumps.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(void) {
    const size_t sizes[] = {16 << 10, 256 << 10, 1 << 20, 2 << 20, 4 << 20, 8 << 20, 16 << 20, 32 << 20, 64 << 20, 256 << 20};
    srand(1);
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t lines = sizes[k] / 64;
        uint64_t *buf = aligned_alloc(64, lines * 64);
        size_t *order = malloc(lines * sizeof *order);
        if (buf == NULL || order == NULL) return 1;
        for (size_t i = 0; i < lines; i++) order[i] = i;
        for (size_t i = lines - 1; i > 0; i--) {  /* a random cycle through every line */
            size_t j = (size_t)rand() % (i + 1), t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        for (size_t i = 0; i < lines; i++) buf[order[i] * 8] = order[(i + 1) % lines] * 8;
        size_t p = 0;
        long reads = sizes[k] > (16 << 20) ? 5000000 : 20000000;
        for (long i = 0; i < 1000000; i++) p = buf[p];  /* warm */
        double start = now();
        for (long i = 0; i < reads; i++) p = buf[p];
        double took = now() - start;
        printf("%8zu KiB: %6.1f ns per read%s\n", sizes[k] >> 10, took / reads * 1e9, p == (size_t)-1 ? " " : "");
        free(buf);
        free(order);
    }
    return 0;
}
