/*
 * The tuning cache file: what dispatch-autotune measured on one device, as text a person can
 * read and diff. The format (version 1), one item per line; a line whose first character
 * other than blanks is '#' is a comment, free text in any bytes and of any length:
 *
 *   hd-tune 1                                   format version, always the first line
 *   library 0.1.0                               hd_version() of the writer
 *   platform "Portable Computing Language"      device key: OpenCL platform,
 *   device "cpu-haswell-AMD EPYC 7B13"            device name,
 *   driver "5.0+debian"                           driver version,
 *   clblast 1.5.3                                 CLBlast version or none
 *   calibration launch_us=7.5 copy_gbps=2500 host_gbps=24 gemm_gflops=50000 cpu_gflops=90
 *               cpu_gbps=20 fused_gflops=50000 clblast_gflops=45000
 *                                                 (one line; any subset, each at most once)
 *   param clblast Xgemm "KWG=32 KWI=2 ..."     a device-level record for one backend
 *   gemm 1 4096 4096 nn fused "WPT=4" 41.25 clblast 12.5
 *   softmax 64 1024 fused - 7.1 cpu 80
 *
 * A record is: op, its dims (GEMM m n k and the transposes nn/nt/tn/tt; LoRA tokens in out
 * rank; gemm_batched m n k batch and the transposes; row ops rows cols), the winning backend, its
 * variant ("-" for the default, else a double-quoted string), the median in microseconds, the
 * runner-up backend and the winner's margin over it in percent ("- -" when nothing else ran).
 * Strings are double-quoted with \" and \\ as the only escapes, printable ASCII and TAB only;
 * the library and clblast values may be bare (one plain word) or quoted. Numbers are written
 * with the fewest digits that read back exactly, so a file parsed and written again parses to
 * the same records, always with '.' for the decimal point whatever the program's locale.
 *
 * Trust: the six header lines (hd-tune to clblast, in that order, before anything else but
 * comments) must be intact, else the whole file is ignored. A bad record or param line (unknown
 * name, malformed or absurd number, overlong line, duplicate key) is skipped and counted; the rest
 * are used. Lines other than comments are at most HD_TUNE_LINE_MAX bytes and files hold at most
 * HD_TUNE_RECORD_MAX records.
 */
#ifndef HD_DISPATCH_TUNE_FILE_H
#define HD_DISPATCH_TUNE_FILE_H

#include <locale.h>
#include <stdbool.h>
#include <stddef.h>

#include <hd/dispatch.h>

#include "backends/backend.h"
#include "dispatch/tuning.h"

#define HD_TUNE_FORMAT     1
#define HD_TUNE_LINE_MAX   1024
#define HD_TUNE_RECORD_MAX 4096
#define HD_TUNE_PARAM_MAX  16
#define HD_TUNE_FILE_MAX   ((size_t)HD_TUNE_LINE_MAX * (HD_TUNE_RECORD_MAX + 64))
#define HD_TUNE_DIM_MAX    ((size_t)1 << 24) /* larger dims are not a shape anyone tuned */
/* The numbers a record may hold: the parser refuses others, and hd__tune_put() clamps a
 * measured time or margin into them, so that the writer never writes a line its reader skips. */
#define HD_TUNE_TIME_MIN_US    1e-3
#define HD_TUNE_TIME_MAX_US    1e9      /* a quarter of an hour per call is not a tuned op */
#define HD_TUNE_MARGIN_MIN_PCT (-100.0) /* the runner-up cannot take less than no time */
#define HD_TUNE_MARGIN_MAX_PCT 1e6      /* 10000x slower runner-up */
/* A calibration value (µs, GB/s, GFLOP/s): well beyond any device either way. */
#define HD_TUNE_CAL_MIN 1e-9
#define HD_TUNE_CAL_MAX 1e9
/* A writer's temporary file older than this belongs to a writer that was killed. */
#define HD_TUNE_STALE_SECONDS (24 * 60 * 60)

/* What a file is valid for: it is used only when every field equals the context's. */
typedef struct hd_tune_key {
    char library[32];
    char platform[HD_TUNE_STRING_MAX];
    char device[HD_TUNE_STRING_MAX];
    char driver[HD_TUNE_STRING_MAX];
    char clblast[32];
} hd_tune_key;

/* hd_tune_calibration, the device's measured constants, is declared in backends/backend.h:
 * the backends' estimates read it. */

/* The items of the calibration line, in the order they are written: each one's name and the
 * offset of its field in hd_tune_calibration (the reader and the writer both go by it). */
typedef struct hd_tune_cal_item {
    const char *name;
    size_t offset;
} hd_tune_cal_item;
extern const hd_tune_cal_item hd__tune_cal_items[];
extern const size_t hd__tune_cal_item_count;

/* hd_tune_record, one tuned call, is declared in dispatch/tuning.h: the scheduler reads it. */

/* A device-level setting of one backend, e.g. CLBlast's Xgemm parameters for this device. */
typedef struct hd_tune_param {
    hd_backend backend;
    char name[32];                  /* e.g. "Xgemm", "XgemmDirect" */
    char value[HD_TUNE_STRING_MAX]; /* e.g. "KWG=32 MWG=64 ..." */
} hd_tune_param;

typedef struct hd_tune_file {
    hd_tune_key key;
    hd_tune_calibration cal;
    hd_tune_param params[HD_TUNE_PARAM_MAX];
    size_t param_count;
    hd_tune_record *records;
    size_t count, capacity;

    /* What the parser skipped, for the context's message. */
    size_t bad_lines;
    size_t first_bad_line;
    char first_problem[160];
} hd_tune_file;

/* The key as a file written with it reads back: an empty field as the writer fills it
 * ("unknown" library, else "none") and every byte a string of the format cannot hold as '?'.
 * A key is normalised wherever it is made or compared with a file's (a device name with a
 * byte outside printable ASCII would otherwise never match its own file). */
void hd__tune_key_normalize(hd_tune_key *k);

/* The file's numbers are written and read in the "C" locale between these two calls, on the
 * calling thread only: a program that set a comma-decimal LC_NUMERIC (setlocale is
 * process-wide) must not make "7.25" unreadable, nor have "7,25" written. begin returns the
 * thread's locale for end to put back. */
locale_t hd__tune_numbers_begin(void);
void hd__tune_numbers_end(locale_t previous);

void hd__tune_file_init(hd_tune_file *f);
void hd__tune_file_free(hd_tune_file *f);

/* A dimension written as len bytes of decimal digits and nothing else (no sign, blank,
 * exponent or leading text), from lo to HD_TUNE_DIM_MAX: how the cache and the tools' shapes
 * files read one. False otherwise. */
bool hd__tune_dim_parse(const char *text, size_t len, size_t lo, size_t *out);
/* GEMM's transposes as a record (and a shapes file) spells them: text[0..len) is nn, nt, tn or
 * tt; false otherwise. */
bool hd__tune_trans_parse(const char *text, size_t len, bool *trans_a, bool *trans_b);

/* Whether two records describe the same call (op, dims, transposes). */
bool hd__tune_same_key(const hd_tune_record *a, const hd_tune_record *b);
/* The number of dims a record of op carries (GEMM 3, LoRA 4, batched GEMM 4, row ops 2). */
int hd__tune_dim_count(hd_op op);
/* Whether op's records carry transposes (GEMM, batched GEMM). */
bool hd__tune_has_transposes(hd_op op);

/* Adds r, replacing a record with the same key. Its median time and margin are clamped into
 * the ranges the parser takes (HD_TUNE_TIME_MIN_US..HD_TUNE_TIME_MAX_US,
 * HD_TUNE_MARGIN_MIN_PCT..HD_TUNE_MARGIN_MAX_PCT). Returns HD_ERR_INVALID_ARGUMENT for a record
 * no clamping makes readable (an unknown op, backend, precision or layout, a dimension outside
 * [1 (0 for LoRA's rank), HD_TUNE_DIM_MAX], the runner-up the winner's backend, a time that is
 * negative or not a number, a margin that is NaN, a variant without its NUL), HD_ERR_OUT_OF_MEMORY,
 * or HD_ERR_CACHE_INVALID when the file already holds HD_TUNE_RECORD_MAX records. */
hd_status hd__tune_put(hd_tune_file *f, const hd_tune_record *r);
/* Sets or replaces the param (backend, name). Returns HD_ERR_INVALID_ARGUMENT for an unknown
 * backend, a name that is not one plain word or a string without its NUL, HD_ERR_CACHE_INVALID
 * when the file already holds HD_TUNE_PARAM_MAX params. */
hd_status hd__tune_put_param(hd_tune_file *f, const hd_tune_param *p);
/* The precision a record of op is keyed by: p for compute-bound ops (GEMM arithmetic),
 * fp32 for the others, whose arithmetic does not change with the context's GEMM mode. */
hd_precision hd__tune_precision_of(hd_op op, hd_precision p);

const hd_tune_record *hd__tune_find(const hd_tune_file *f, hd_op op, const hd_shape *shape,
                                    hd_precision precision);

/* Parses len bytes of text (not necessarily NUL-terminated) into *f, which must be freshly
 * initialised. Returns HD_OK (bad record lines are skipped and counted in f), or
 * HD_ERR_CACHE_INVALID with the reason in msg when the header is missing or broken; then f
 * holds no records. HD_ERR_OUT_OF_MEMORY. */
hd_status hd__tune_parse(const char *text, size_t len, hd_tune_file *f, char *msg, size_t size);

/* Reads and parses the file at path, opened only if it is a regular file and never blocking
 * (a FIFO is refused at once). HD_ERR_IO (msg says why; a missing file included),
 * else as hd__tune_parse(). */
hd_status hd__tune_load(const char *path, hd_tune_file *f, char *msg, size_t size);

/* The lines of a file that hold no record, told to a caller that keeps them (the writer). */
typedef enum hd_tune_line_kind {
    HD_TUNE_LINE_BAD,     /* a line after the header that was skipped and counted in bad_lines */
    HD_TUNE_LINE_COMMENT, /* a comment, anywhere */
} hd_tune_line_kind;

/* text: the line's len bytes as in the file, without its newline and a CR before it; not
 * NUL-terminated, and any bytes. */
typedef void hd_tune_line_fn(void *arg, hd_tune_line_kind kind, size_t line_no, const char *text,
                             size_t len);

/* hd__tune_parse() and hd__tune_load() that also call fn(arg, ...) for each bad line and each
 * comment, in the order of the file. On a broken header the calls made so far are for a file
 * that is then refused. */
hd_status hd__tune_parse_lines(const char *text, size_t len, hd_tune_file *f, hd_tune_line_fn *fn,
                               void *arg, char *msg, size_t size);
hd_status hd__tune_load_lines(const char *path, hd_tune_file *f, hd_tune_line_fn *fn, void *arg,
                              char *msg, size_t size);

/* Writes src[0..len) into dst (size bytes with the NUL) with each byte outside printable ASCII
 * and TAB as \xHH, as many of its bytes as fit whole; returns how many bytes of src it took
 * (len where all of it fit). The writer's comments and the tools' messages show text of any
 * bytes so. */
size_t hd__tune_escape(char *dst, size_t size, const char *src, size_t len);
/* Whether p[0..len) is printable ASCII and TAB alone, as a cache line must be. */
bool hd__tune_printable(const char *p, size_t len);
/* s[0..len) as a message quotes it, in buf (size bytes): its first max bytes escaped as
 * hd__tune_escape() writes them, then "..." where not all of s is shown. Returns buf. */
const char *hd__tune_shown(char *buf, size_t size, const char *s, size_t len, size_t max);

/* The file's text in the format above, malloc'd and NUL-terminated; NULL without memory.
 * Records are sorted by op and dims, so that files diff well. */
char *hd__tune_format(const hd_tune_file *f);

/*
 * Writes f's records and params to path, merged with those already there for the same key
 * (f's win on the same (op, shape)). Holds an flock on "<path>.lock" throughout, writes a
 * temporary file in the same directory, fsyncs it, renames it over path and fsyncs the
 * directory, so readers see the old or the new file and concurrent writers lose nothing.
 * A file there for another key is replaced. One that is there but cannot be read, or whose
 * header is broken, is left as it is and the save refused (HD_ERR_IO or HD_ERR_CACHE_INVALID,
 * msg names the file and the problem): its records may still be repaired by hand. The lines of
 * a file that loads that the reader skips are kept at the end as comments "# not read: <line>"
 * (bytes outside printable ASCII and TAB as \xHH, the line cut with a marker past
 * HD_TUNE_LINE_MAX bytes), and such comments of earlier saves with them; other comments are not
 * kept. On HD_OK msg is empty, or says how many lines were kept so and which was the first.
 * Where the kept lines would make the file larger than HD_TUNE_FILE_MAX the save is refused
 * (HD_ERR_CACHE_INVALID) and the file left as it is. The new file has the permission bits of
 * the one it replaces, or 0666 less the umask where there was none. Creates the directory if
 * needed. A symbolic link at path is followed: the file it resolves to is replaced and the
 * link kept (a dangling link is refused). Anything at path, or at the link's end, other than
 * a regular file (a FIFO, a device, a directory) is refused and left alone. Under the lock,
 * temporary files of killed writers ("<path>.tmp.*") older than HD_TUNE_STALE_SECONDS are
 * removed. Returns HD_OK, HD_ERR_IO (msg says why), HD_ERR_CACHE_INVALID (the file there is
 * damaged, or the merge would exceed HD_TUNE_RECORD_MAX records), HD_ERR_OUT_OF_MEMORY.
 */
hd_status hd__tune_save(const char *path, const hd_tune_file *f, char *msg, size_t size);

/* The default cache path: $XDG_CACHE_HOME/hd-dispatch/tune.txt, else
 * $HOME/.cache/hd-dispatch/tune.txt. Returns its length, as snprintf() does (size or more:
 * it did not fit), or 0 when neither variable is usable. */
size_t hd__tune_default_path(char *buf, size_t size);

#endif
