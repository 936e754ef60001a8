/* Vectorscan (Hyperscan's portable fork) on a moderation table's regexes (issue 28).
 *
 *   hs_bench [-a 0|1] [-n ITER] [-t SECONDS] [-o IDS_DIR] [-v 1] [-c 1] [-s 1] PATTERNS MSG...
 *
 * PATTERNS holds one regex a line in the regex crate's syntax (extract.py writes them); a
 * leading `(?i)` becomes HS_FLAG_CASELESS. Every pattern is compiled with HS_FLAG_UTF8 |
 * HS_FLAG_UCP (Unicode `\w`, `\d`, `\s`, as the regex crate has them; Vectorscan refuses `\b`
 * in this mode) | HS_FLAG_SINGLEMATCH (one report a pattern: "which patterns match", what a
 * table asks) into one block-mode database. With -a 1, without HS_FLAG_UCP: ASCII classes
 * and `\b`, which answer otherwise than the regex crate on non-ASCII text. A pattern
 * Vectorscan refuses is left out and counted (with its error); a table would need another
 * engine for it.
 *
 * Prints one JSON object: compile time, database and scratch sizes, peak RSS, and per message
 * the median and 99th percentile time of one hs_scan (ITER scans, at most SECONDS each
 * message, after a warm-up) and the number of patterns that matched. With -o, writes
 * IDS_DIR/MSG_NAME.ids: the matching patterns' line numbers (from 0), one a line, sorted.
 * -v 1 logs each compile attempt; -c 1 only lists the patterns refused at parsing; -s 1
 * compiles each pattern alone and logs its time and size (which patterns are slow).
 */
#define _POSIX_C_SOURCE 200809L
#include <hs/hs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static long max_rss_kb(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(2);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc(n + 1);
    if (!buf || fread(buf, 1, n, f) != (size_t)n) {
        fprintf(stderr, "cannot read %s\n", path);
        exit(2);
    }
    buf[n] = 0;
    fclose(f);
    *len = n;
    return buf;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

struct hits {
    unsigned count;
    uint8_t *seen; /* by pattern id, when the ids are recorded */
};

static int on_match(unsigned id, unsigned long long from, unsigned long long to, unsigned flags, void *ctx) {
    (void)from, (void)to, (void)flags;
    struct hits *h = ctx;
    h->count++;
    if (h->seen) h->seen[id] = 1;
    return 0;
}

static void json_string(const char *s) {
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20) printf("\\u%04x", *s);
        else putchar(*s);
    }
    putchar('"');
}

static const char *base_name(const char *path) {
    const char *b = strrchr(path, '/');
    return b ? b + 1 : path;
}

int main(int argc, char **argv) {
    long iters = 2000;
    double max_seconds = 3.0;
    const char *ids_dir = NULL;
    int verbose = 0, single = 0, ascii = 0, check = 0;
    int a = 1;
    for (; a < argc && argv[a][0] == '-'; a += 2) {
        if (a + 1 >= argc) break;
        if (!strcmp(argv[a], "-n")) iters = atol(argv[a + 1]);
        else if (!strcmp(argv[a], "-t")) max_seconds = atof(argv[a + 1]);
        else if (!strcmp(argv[a], "-o")) ids_dir = argv[a + 1];
        else if (!strcmp(argv[a], "-v")) verbose = atoi(argv[a + 1]);
        else if (!strcmp(argv[a], "-s")) single = atoi(argv[a + 1]);
        else if (!strcmp(argv[a], "-a")) ascii = atoi(argv[a + 1]);
        else if (!strcmp(argv[a], "-c")) check = atoi(argv[a + 1]);
        else break;
    }
    if (argc - a < 2 || iters < 1) {
        fprintf(stderr, "usage: hs_bench [-a 0|1] [-n ITER] [-t SECONDS] [-o IDS_DIR] [-v 1] [-c 1] [-s 1] PATTERNS MSG...\n");
        return 2;
    }

    size_t plen;
    char *text = read_file(argv[a], &plen);
    unsigned n = 0;
    for (size_t i = 0; i < plen; i++) n += text[i] == '\n';
    const char **exprs = calloc(n, sizeof *exprs);
    unsigned *flags = calloc(n, sizeof *flags), *ids = calloc(n, sizeof *ids);
    char *refused_by = calloc(n, 1);
    char **why = calloc(n, sizeof *why);
    unsigned count = 0;
    for (char *line = text, *nl; (nl = strchr(line, '\n')); line = nl + 1) {
        *nl = 0;
        unsigned f = HS_FLAG_UTF8 | (ascii ? 0 : HS_FLAG_UCP) | HS_FLAG_SINGLEMATCH;
        if (!strncmp(line, "(?i)", 4)) {
            f |= HS_FLAG_CASELESS;
            line += 4;
        }
        exprs[count] = line;
        flags[count] = f;
        ids[count] = count;
        count++;
    }

    /* Parse errors first (hs_expression_info does not build the database): refused at once. */
    unsigned refused = 0;
    for (unsigned i = 0; i < count; i++) {
        hs_expr_info_t *xi = NULL;
        hs_compile_error_t *err = NULL;
        if (hs_expression_info(exprs[i], flags[i], &xi, &err) != HS_SUCCESS) {
            refused_by[i] = 1;
            why[i] = strdup(err ? err->message : "refused");
            refused++;
            hs_free_compile_error(err);
        }
        free(xi);
    }
    if (check) {
        /* -c: only which patterns Vectorscan refuses, and why */
        printf("{\"patterns\":%u,\"refused\":%u,\"refusals\":[", count, refused);
        for (unsigned i = 0, shown = 0; i < count; i++) {
            if (!refused_by[i]) continue;
            printf("%s{\"id\":%u,\"error\":", shown++ ? "," : "", i);
            json_string(why[i]);
            printf("}");
        }
        printf("]}\n");
        return 0;
    }
    if (single) {
        /* -s: each accepted pattern compiled alone (which ones are slow or large), to stderr */
        for (unsigned i = 0; i < count; i++) {
            if (refused_by[i]) continue;
            hs_database_t *one = NULL;
            hs_compile_error_t *err = NULL;
            double t0 = now_s();
            hs_error_t rc = hs_compile(exprs[i], flags[i], HS_MODE_BLOCK, NULL, &one, &err);
            double t = now_s() - t0;
            size_t sz = 0;
            if (rc == HS_SUCCESS) hs_database_size(one, &sz), hs_free_database(one);
            fprintf(stderr, "%u\t%.1f ms\t%zu B\t%s%s\t%s\n", i, t * 1e3, sz,
                    flags[i] & HS_FLAG_CASELESS ? "(?i)" : "", exprs[i], rc == HS_SUCCESS ? "ok" : err->message);
            if (err) hs_free_compile_error(err);
        }
        return 0;
    }

    /* Compile; each refused pattern is dropped and the rest compiled again. */
    const char **ex = calloc(count, sizeof *ex);
    unsigned *fl = calloc(count, sizeof *fl), *id = calloc(count, sizeof *id);
    unsigned attempts = 0;
    hs_database_t *db = NULL;
    double compile_s = 0, compile_total_s = 0;
    double t_all = now_s();
    for (;;) {
        unsigned k = 0;
        for (unsigned i = 0; i < count; i++)
            if (!refused_by[i]) ex[k] = exprs[i], fl[k] = flags[i], id[k] = ids[i], k++;
        hs_compile_error_t *err = NULL;
        double t0 = now_s();
        attempts++;
        hs_error_t rc = hs_compile_multi(ex, fl, id, k, HS_MODE_BLOCK, NULL, &db, &err);
        compile_s = now_s() - t0;
        if (verbose) fprintf(stderr, "compile %u: %u patterns, %.1f ms, %s\n", attempts, k, compile_s * 1e3,
                             rc == HS_SUCCESS ? "ok" : err ? err->message : "failed");
        if (rc == HS_SUCCESS) break;
        if (!err || err->expression < 0 || (unsigned)err->expression >= k) {
            fprintf(stderr, "hs_compile_multi: %s\n", err ? err->message : "failed");
            return 1;
        }
        unsigned bad = id[err->expression];
        refused_by[bad] = 1;
        why[bad] = strdup(err->message);
        refused++;
        hs_free_compile_error(err);
    }
    compile_total_s = now_s() - t_all;
    long rss_after_compile = max_rss_kb();

    size_t db_size = 0, scratch_size = 0;
    hs_database_size(db, &db_size);
    hs_scratch_t *scratch = NULL;
    if (hs_alloc_scratch(db, &scratch) != HS_SUCCESS) {
        fprintf(stderr, "hs_alloc_scratch failed\n");
        return 1;
    }
    hs_scratch_size(scratch, &scratch_size);
    char *info = NULL;
    hs_database_info(db, &info);

    printf("{\"engine\":\"%s\",\"version\":", ascii ? "vectorscan-ascii" : "vectorscan-ucp");
    json_string(hs_version());
    printf(",\"database\":");
    json_string(info ? info : "");
    printf(",\"patterns\":%u,\"refused\":%u,\"compile_attempts\":%u,\"compile_ms\":%.2f,\"compile_total_ms\":%.2f,",
           count, refused, attempts, compile_s * 1e3, compile_total_s * 1e3);
    printf("\"database_bytes\":%zu,\"scratch_bytes\":%zu,\"memory_bytes\":%zu,\"max_rss_after_compile_kb\":%ld,",
           db_size, scratch_size, db_size + scratch_size, rss_after_compile);
    printf("\"refusals\":[");
    unsigned shown = 0;
    for (unsigned i = 0; i < count && shown < 20; i++) {
        if (!refused_by[i]) continue;
        printf("%s{\"id\":%u,\"pattern\":", shown ? "," : "", i);
        json_string(exprs[i]);
        printf(",\"error\":");
        json_string(why[i]);
        printf("}");
        shown++;
    }
    printf("],\"messages\":[");

    double *times = calloc(iters, sizeof *times);
    uint8_t *seen = calloc(count, 1);
    for (int m = a + 1; m < argc; m++) {
        size_t mlen;
        char *msg = read_file(argv[m], &mlen);
        struct hits h = {0, seen};
        memset(seen, 0, count);
        if (hs_scan(db, msg, mlen, 0, scratch, on_match, &h) != HS_SUCCESS) {
            fprintf(stderr, "hs_scan failed\n");
            return 1;
        }
        unsigned matched = h.count;
        if (ids_dir) {
            char path[4096];
            char name[1024];
            snprintf(name, sizeof name, "%s", base_name(argv[m]));
            char *dot = strrchr(name, '.');
            if (dot) *dot = 0;
            snprintf(path, sizeof path, "%s/%s.ids", ids_dir, name);
            FILE *f = fopen(path, "w");
            if (!f) {
                perror(path);
                return 2;
            }
            for (unsigned i = 0; i < count; i++)
                if (seen[i]) fprintf(f, "%u\n", i);
            fclose(f);
        }
        /* warm-up, then the timed scans */
        h.seen = NULL;
        double until = now_s() + max_seconds * 0.1;
        while (now_s() < until) hs_scan(db, msg, mlen, 0, scratch, on_match, &h);
        long done = 0;
        until = now_s() + max_seconds;
        for (; done < iters; done++) {
            h.count = 0;
            double t0 = now_s();
            hs_scan(db, msg, mlen, 0, scratch, on_match, &h);
            times[done] = now_s() - t0;
            if (h.count != matched) {
                fprintf(stderr, "scan %ld of %s: %u matches, then %u\n", done, argv[m], matched, h.count);
                return 1;
            }
            if (times[done] > 0 && now_s() > until) {
                done++;
                break;
            }
        }
        qsort(times, done, sizeof *times, cmp_double);
        printf("%s{\"message\":", m > a + 1 ? "," : "");
        json_string(base_name(argv[m]));
        printf(",\"bytes\":%zu,\"matched\":%u,\"scans\":%ld,\"median_us\":%.3f,\"p99_us\":%.3f}", mlen, matched, done,
               times[done / 2] * 1e6, times[(done * 99) / 100] * 1e6);
        free(msg);
    }
    printf("],\"max_rss_kb\":%ld}\n", max_rss_kb());
    hs_free_scratch(scratch);
    hs_free_database(db);
    return 0;
}
