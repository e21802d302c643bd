/* The tuning cache file's writer: the text of a file, and the locked, atomic save that merges
 * with what is on disk. Part of the tools' library (dispatch-autotune writes caches; the
 * installed library only reads them, dispatch/tune_file.c). The format is in dispatch/tune_file.h. */
#define _DEFAULT_SOURCE /* flock() */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dispatch/tune_file.h"
#include "core/error.h"
#include "core/file.h"
#include "core/op.h"

typedef struct text {
    char *p;
    size_t len, cap;
    bool failed;
} text;

static void put(text *t, const char *fmt, ...) HD_PRINTF(2, 3);

static void put(text *t, const char *fmt, ...)
{
    if (t->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->p + t->len, t->cap - t->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->failed = true;
            return;
        }
        if ((size_t)n < t->cap - t->len) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = (t->cap + (size_t)n + 1) * 2;
        char *p = realloc(t->p, cap);
        if (p == NULL) {
            t->failed = true;
            return;
        }
        t->p = p;
        t->cap = cap;
    }
}

/* A string as the format quotes it. TAB is kept: the parser takes it inside quotes. Other
 * characters the parser would reject (never in a parsed file) become '?', so the writer never
 * produces a file its reader refuses. */
static void put_quoted(text *t, const char *s)
{
    put(t, "\"");
    for (; *s != '\0'; s++) {
        char c = *s;
        if (c == '"' || c == '\\')
            put(t, "\\%c", c);
        else
            put(t, "%c", (c >= 0x20 && c < 0x7f) || c == '\t' ? c : '?');
    }
    put(t, "\"");
}

/* A header value the parser takes bare or quoted (library, clblast): bare where it is one
 * plain token, as files have always been written, else quoted. */
static void put_word(text *t, const char *s)
{
    if (s[0] != '\0' && strpbrk(s, " \t\"\\") == NULL && hd__tune_printable(s, strlen(s)))
        put(t, "%s", s);
    else
        put_quoted(t, s);
}

/* The shortest of %.6g .. %.17g that reads back as exactly v: people read "41.25", and a
 * parsed file written again parses to the same numbers. */
static void put_number(text *t, double v)
{
    char buf[40];
    locale_t previous = hd__tune_numbers_begin();
    for (int digits = 6; digits <= 17; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    hd__tune_numbers_end(previous);
    put(t, "%s", buf);
}

static int record_cmp(const void *pa, const void *pb)
{
    const hd_tune_record *a = pa, *b = pb;
    if (a->op != b->op)
        return a->op < b->op ? -1 : 1;
    for (int i = 0; i < 4; i++)
        if (a->shape.dim[i] != b->shape.dim[i])
            return a->shape.dim[i] < b->shape.dim[i] ? -1 : 1;
    int ta = a->shape.trans_a * 2 + a->shape.trans_b, tb = b->shape.trans_a * 2 + b->shape.trans_b;
    if (ta != tb)
        return ta - tb;
    if (a->shape.lora_layout != b->shape.lora_layout)
        return a->shape.lora_layout < b->shape.lora_layout ? -1 : 1;
    return (int)a->precision - (int)b->precision;
}

char *hd__tune_format(const hd_tune_file *f)
{
    text t = {.cap = 4096};
    t.p = malloc(t.cap);
    if (t.p == NULL)
        return NULL;
    t.p[0] = '\0';
    put(&t, "hd-tune %d\n# written by dispatch-autotune; see docs/tuner.md\n", HD_TUNE_FORMAT);
    hd_tune_key key = f->key;
    hd__tune_key_normalize(&key);
    put(&t, "library ");
    put_word(&t, key.library);
    put(&t, "\nplatform ");
    put_quoted(&t, key.platform);
    put(&t, "\ndevice ");
    put_quoted(&t, key.device);
    put(&t, "\ndriver ");
    put_quoted(&t, key.driver);
    put(&t, "\nclblast ");
    put_word(&t, key.clblast);
    put(&t, "\n");

    bool any = false;
    for (size_t i = 0; i < hd__tune_cal_item_count; i++) {
        double v = *(const double *)((const char *)&f->cal + hd__tune_cal_items[i].offset);
        if (v > 0.0 && isfinite(v)) {
            put(&t, "%s %s=", any ? "" : "calibration", hd__tune_cal_items[i].name);
            put_number(&t, fmin(fmax(v, HD_TUNE_CAL_MIN), HD_TUNE_CAL_MAX));
            any = true;
        }
    }
    if (any)
        put(&t, "\n");

    for (size_t i = 0; i < f->param_count; i++) {
        put(&t, "param %s %s ", hd_backend_name(f->params[i].backend), f->params[i].name);
        put_quoted(&t, f->params[i].value);
        put(&t, "\n");
    }

    hd_tune_record *sorted = NULL;
    if (f->count > 0) {
        sorted = malloc(f->count * sizeof *sorted);
        if (sorted == NULL) {
            free(t.p);
            return NULL;
        }
        memcpy(sorted, f->records, f->count * sizeof *sorted);
        qsort(sorted, f->count, sizeof *sorted, record_cmp);
    }
    for (size_t i = 0; i < f->count; i++) {
        const hd_tune_record *r = &sorted[i];
        put(&t, "%s", hd_op_name(r->op));
        if (r->precision != HD_PRECISION_FP32)
            put(&t, ".%s", hd_precision_name(r->precision));
        for (int d = 0; d < hd__tune_dim_count(r->op); d++)
            put(&t, " %zu", r->shape.dim[d]);
        if (hd__tune_has_transposes(r->op))
            put(&t, " %c%c", r->shape.trans_a ? 't' : 'n', r->shape.trans_b ? 't' : 'n');
        char layout[8];
        if (r->shape.lora_layout != 0)
            put(&t, " %s", hd__lora_layout_name(r->shape.lora_layout, layout));
        put(&t, " %s ", hd_backend_name(r->backend));
        if (r->variant[0] == '\0')
            put(&t, "-");
        else
            put_quoted(&t, r->variant);
        put(&t, " ");
        put_number(&t, r->median_us);
        if (r->runner_up == HD_BACKEND_AUTO) {
            put(&t, " - -\n");
        } else {
            put(&t, " %s ", hd_backend_name(r->runner_up));
            put_number(&t, r->margin_pct);
            put(&t, "\n");
        }
    }
    free(sorted);
    if (t.failed) {
        free(t.p);
        return NULL;
    }
    return t.p;
}

static bool same_tune_key(const hd_tune_key *a, const hd_tune_key *b)
{
    return strcmp(a->library, b->library) == 0 && strcmp(a->platform, b->platform) == 0 &&
           strcmp(a->device, b->device) == 0 && strcmp(a->driver, b->driver) == 0 &&
           strcmp(a->clblast, b->clblast) == 0;
}

/* mkdir -p of the directory part of path. */
static bool make_parent_dirs(const char *path, char *msg, size_t size)
{
    char dir[PATH_MAX];
    if (strlen(path) >= sizeof dir) {
        snprintf(msg, size, "path too long");
        return false;
    }
    strcpy(dir, path);
    char *slash = strrchr(dir, '/');
    if (slash == NULL || slash == dir)
        return true;
    *slash = '\0';
    for (char *p = dir + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char saved = *p;
            *p = '\0';
            if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
                snprintf(msg, size, "cannot create directory '%s': %s", dir, strerror(errno));
                return false;
            }
            *p = saved;
            if (saved == '\0')
                return true;
        }
    }
}

static bool write_all(int fd, const char *p, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        p += n;
        len -= (size_t)n;
    }
    return true;
}

static void fsync_dir_of(const char *path)
{
    char dir[PATH_MAX];
    if (strlen(path) >= sizeof dir)
        return;
    strcpy(dir, path);
    char *slash = strrchr(dir, '/');
    if (slash == NULL)
        strcpy(dir, ".");
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
    int fd = open(dir, O_RDONLY);
    if (fd >= 0) {
        fsync(fd); /* best effort: some file systems refuse fsync on directories */
        close(fd);
    }
}

/* A line of the file on disk that a save keeps though it holds no record: one the reader could
 * not read, as a comment that starts so, and such a comment of an earlier save. */
#define NOT_READ "# not read: "

/* Appends the comment line prefix + s[0..len) so that the parser reads it back as one comment
 * whatever s holds: each byte outside printable ASCII and TAB (a NUL, a CR, UTF-8) as \xHH, and
 * the line cut, with a marker saying so, where it would pass HD_TUNE_LINE_MAX bytes. Text that is
 * such a line already is appended as it is. */
static void put_comment(text *t, const char *prefix, const char *s, size_t len)
{
    char line[HD_TUNE_LINE_MAX + 1], marker[64];
    size_t n = (size_t)snprintf(line, sizeof line, "%s", prefix);
    if (hd__tune_escape(line + n, sizeof line - n, s, len) == len) {
        put(t, "%s\n", line);
        return;
    }
    int marker_len = snprintf(marker, sizeof marker, " [cut: the line held %zu bytes]", len);
    hd__tune_escape(line + n, sizeof line - n - (size_t)marker_len, s, len);
    put(t, "%s%s\n", line, marker);
}

/* The lines a save keeps from the file on disk, as comments for the end of the new one. */
typedef struct kept_lines {
    text comments;
    size_t unread_count; /* lines the reader could not read, now comments */
} kept_lines;

static void keep_line(void *arg, hd_tune_line_kind kind, size_t line_no, const char *s, size_t len)
{
    (void)line_no;
    kept_lines *k = arg;
    size_t prefix = sizeof NOT_READ - 1;
    if (kind == HD_TUNE_LINE_BAD) {
        put_comment(&k->comments, NOT_READ, s, len);
        k->unread_count++;
    } else if (len >= prefix && memcmp(s, NOT_READ, prefix) == 0) {
        put_comment(&k->comments, "", s, len);
    }
}

static void kept_lines_free(kept_lines *k)
{
    free(k->comments.p);
    memset(k, 0, sizeof *k);
}

/* What is on disk under key into *disk, and the lines kept of it into *kept: nothing where no
 * file is there yet, or where the file is for another key (its records could never be used with
 * this one, which replaces them). A file that is there but cannot be read or whose header is
 * broken is refused, msg says why: writing over it would throw away records that a person can
 * still repair. */
static hd_status read_disk(const char *path, const hd_tune_key *key, hd_tune_file *disk,
                           kept_lines *kept, char *msg, size_t size)
{
    char why[200];
    hd__tune_file_init(disk);
    memset(kept, 0, sizeof *kept);
    hd_status s = hd__tune_load_lines(path, disk, keep_line, kept, why, sizeof why);
    if (s == HD_OK) {
        if (!same_tune_key(&disk->key, key)) {
            hd__tune_file_free(disk);
            kept_lines_free(kept);
        }
        return kept->comments.failed ? HD_ERR_OUT_OF_MEMORY : HD_OK;
    }
    kept_lines_free(kept);
    struct stat st;
    if (s == HD_ERR_IO && stat(path, &st) != 0 && errno == ENOENT)
        return HD_OK;
    snprintf(msg, size,
             "the cache '%s' on disk cannot be read (%s): not replaced, so that its records are "
             "kept; repair or remove it",
             path, why);
    return s;
}

/* Merges what is on disk (same key) with f into *out: on-disk first, f's entries win. */
static hd_status merge_with_disk(const char *path, const hd_tune_file *f, hd_tune_file *out,
                                 kept_lines *kept, char *msg, size_t size)
{
    hd_tune_key key = f->key;
    hd__tune_key_normalize(&key);
    hd_status s = read_disk(path, &key, out, kept, msg, size);
    if (s != HD_OK) {
        if (s == HD_ERR_OUT_OF_MEMORY)
            snprintf(msg, size, "no memory to keep the lines of '%s' it cannot read", path);
        return s;
    }
    out->key = key;
    const double *src = &f->cal.launch_us;
    double *dst = &out->cal.launch_us;
    for (size_t i = 0; i < sizeof f->cal / sizeof(double); i++)
        if (src[i] > 0.0)
            dst[i] = src[i];
    for (size_t i = 0; i < f->param_count && s == HD_OK; i++)
        s = hd__tune_put_param(out, &f->params[i]);
    for (size_t i = 0; i < f->count && s == HD_OK; i++)
        s = hd__tune_put(out, &f->records[i]);
    if (s != HD_OK)
        snprintf(msg, size, "%s",
                 s == HD_ERR_CACHE_INVALID   ? "too many records or params"
                 : s == HD_ERR_OUT_OF_MEMORY ? "no memory to merge the cache"
                                             : "a record or param the cache cannot hold");
    return s;
}

/* The file a save replaces. A symbolic link is followed on purpose, so that a cache kept
 * elsewhere (a shared or versioned file) is updated where it lives and the link stays; a
 * dangling link is refused rather than guessed at. Anything but a regular file or a missing
 * one is refused: renaming over it would replace a FIFO, a device or a socket. */
static bool save_target(const char *path, char *target, size_t tsize, char *msg, size_t size)
{
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno != ENOENT) {
            snprintf(msg, size, "cannot examine '%s': %s", path, strerror(errno));
            return false;
        }
        snprintf(target, tsize, "%s", path);
        return true;
    }
    if (S_ISLNK(st.st_mode)) {
        char *real = realpath(path, NULL);
        if (real == NULL) {
            snprintf(msg, size, "'%s' is a symbolic link that resolves to no file: not followed",
                     path);
            return false;
        }
        int n = snprintf(target, tsize, "%s", real);
        free(real);
        if (n < 0 || (size_t)n >= tsize || stat(target, &st) != 0) {
            snprintf(msg, size, "cannot follow the symbolic link '%s'", path);
            return false;
        }
    } else {
        snprintf(target, tsize, "%s", path);
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(msg, size, "'%s' is not a regular file: refusing to replace it", path);
        return false;
    }
    return true;
}

/* The lock file, opened without blocking and only if it is a regular file. */
static int open_lock(const char *lock_path, char *msg, size_t size)
{
    int lock = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW, 0644);
    struct stat st;
    if (lock >= 0 && (fstat(lock, &st) != 0 || !S_ISREG(st.st_mode))) {
        close(lock);
        snprintf(msg, size, "lock file '%s' is not a regular file", lock_path);
        return -1;
    }
    if (lock < 0)
        snprintf(msg, size, "cannot open lock file '%s': %s", lock_path, strerror(errno));
    return lock;
}

/* Temporary files of writers killed before their rename ("tune.txt.tmp.XXXXXX"), older than a
 * day: no live writer holds one that long. Called with the lock held. */
static void remove_stale_temps(const char *target)
{
    char dir[PATH_MAX], prefix[PATH_MAX + 8], full[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", target);
    char *slash = strrchr(dir, '/');
    const char *base = strrchr(target, '/') != NULL ? strrchr(target, '/') + 1 : target;
    if (slash == NULL)
        strcpy(dir, ".");
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
    snprintf(prefix, sizeof prefix, "%s.tmp.", base);
    DIR *d = opendir(dir);
    if (d == NULL)
        return;
    time_t now = time(NULL);
    size_t plen = strlen(prefix);
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        struct stat st;
        if (strncmp(e->d_name, prefix, plen) != 0 ||
            snprintf(full, sizeof full, "%s/%s", dir, e->d_name) >= (int)sizeof full)
            continue;
        if (lstat(full, &st) == 0 && S_ISREG(st.st_mode) &&
            now - st.st_mtime > HD_TUNE_STALE_SECONDS)
            unlink(full);
    }
    closedir(d);
}

/* A save's temporary file "<target>.tmp.XXXXXX", created with mode 0666 less the umask, as
 * any file the program creates (mkstemp makes it 0600, and reading the umask means setting it,
 * which races with other threads). Returns the descriptor, or -1 with errno set. */
static int create_temp(char *tmp_path, size_t size, const char *target)
{
    static const char letters[] = "abcdefghijklmnopqrstuvwxyz0123456789";
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    unsigned long long x = (unsigned long long)ts.tv_nsec ^ ((unsigned long long)ts.tv_sec << 30) ^
                           ((unsigned long long)getpid() << 12);
    for (int attempt = 0; attempt < 100; attempt++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull; /* Knuth's MMIX LCG */
        char suffix[7];
        for (int i = 0; i < 6; i++)
            suffix[i] = letters[(x >> (16 + 6 * i)) % (sizeof letters - 1)];
        suffix[6] = '\0';
        int len = snprintf(tmp_path, size, "%s.tmp.%s", target, suffix);
        if (len < 0 || (size_t)len >= size) {
            errno = ENAMETOOLONG;
            return -1;
        }
        int fd = open(tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd >= 0 || errno != EEXIST)
            return fd;
    }
    return -1; /* errno: EEXIST */
}

/* The text of merged with the kept lines after it; NULL with *s and msg set where it cannot be
 * made or would be larger than the reader reads. msg then says how many lines the reader could
 * not read are kept as comments, and which was the first. */
static char *format_with_kept_lines(const hd_tune_file *merged, const kept_lines *kept,
                                    const char *target, char *msg, size_t size, hd_status *s)
{
    char *records = hd__tune_format(merged);
    size_t len = records != NULL ? strlen(records) : 0;
    text t = {.p = records, .len = len, .cap = len + 1};
    if (records != NULL && kept->comments.len > 0)
        put(&t, "%s", kept->comments.p);
    if (records == NULL || t.failed) {
        free(t.p);
        snprintf(msg, size, "no memory to format the cache");
        *s = HD_ERR_OUT_OF_MEMORY;
        return NULL;
    }
    if (t.len > HD_TUNE_FILE_MAX) {
        free(t.p);
        snprintf(msg, size,
                 "'%s' would grow past %zu bytes with the lines of it that cannot be read kept "
                 "as comments: not replaced; repair or remove it",
                 target, HD_TUNE_FILE_MAX);
        *s = HD_ERR_CACHE_INVALID;
        return NULL;
    }
    if (kept->unread_count > 0)
        snprintf(msg, size,
                 "'%s': kept %zu line(s) that could not be read, as comments '" NOT_READ
                 "...' at its end; the first, line %zu: %s",
                 target, kept->unread_count, merged->first_bad_line, merged->first_problem);
    return t.p;
}

hd_status hd__tune_save(const char *path, const hd_tune_file *f, char *msg, size_t size)
{
    msg[0] = '\0';
    if (!make_parent_dirs(path, msg, size))
        return HD_ERR_IO;
    char target[PATH_MAX], lock_path[PATH_MAX], tmp_path[PATH_MAX];
    if (!save_target(path, target, sizeof target, msg, size))
        return HD_ERR_IO;
    if (snprintf(lock_path, sizeof lock_path, "%s.lock", target) >= (int)sizeof lock_path ||
        snprintf(tmp_path, sizeof tmp_path, "%s.tmp.XXXXXX", target) >= (int)sizeof tmp_path) {
        snprintf(msg, size, "path too long");
        return HD_ERR_IO;
    }
    int lock = open_lock(lock_path, msg, size);
    if (lock < 0)
        return HD_ERR_IO;
    while (flock(lock, LOCK_EX) != 0) {
        if (errno != EINTR) {
            snprintf(msg, size, "cannot lock '%s': %s", lock_path, strerror(errno));
            close(lock);
            return HD_ERR_IO;
        }
    }
    /* Checked again under the lock: the check before it raced with other processes. */
    struct stat st;
    bool replaces = lstat(target, &st) == 0;
    if (replaces && !S_ISREG(st.st_mode)) {
        snprintf(msg, size, "'%s' is not a regular file: refusing to replace it", target);
        close(lock);
        return HD_ERR_IO;
    }
    remove_stale_temps(target);

    hd_tune_file merged;
    kept_lines kept;
    hd_status s = merge_with_disk(target, f, &merged, &kept, msg, size);
    char *body = s == HD_OK ? format_with_kept_lines(&merged, &kept, target, msg, size, &s) : NULL;
    hd__tune_file_free(&merged);
    kept_lines_free(&kept);
    if (body == NULL) {
        close(lock);
        return s;
    }

    int fd = create_temp(tmp_path, sizeof tmp_path, target);
    if (fd < 0) {
        snprintf(msg, size, "cannot create '%s': %s", tmp_path, strerror(errno));
        free(body);
        close(lock);
        return HD_ERR_IO;
    }
    /* the replaced file's permissions where the file system keeps them: best effort, as a
     * file system without modes (vfat, some network mounts) refuses chmod but takes the file */
    if (replaces)
        (void)fchmod(fd, st.st_mode & 0777);
    bool ok = write_all(fd, body, strlen(body)) && fsync(fd) == 0;
    int err = ok ? 0 : errno;
    if (close(fd) != 0 && ok) {
        err = errno;
        ok = false;
    }
    free(body);
    if (ok && rename(tmp_path, target) != 0) {
        err = errno;
        ok = false;
    }
    if (!ok) {
        snprintf(msg, size, "cannot write '%s': %s", target, strerror(err));
        unlink(tmp_path);
        close(lock);
        return HD_ERR_IO;
    }
    fsync_dir_of(target);
    close(lock); /* releases the flock */
    return HD_OK;
}
