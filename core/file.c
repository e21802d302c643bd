#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/file.h"

/* O_NONBLOCK makes open() return at once on a FIFO with no writer, where fopen() would wait
 * for one forever; fstat on the opened descriptor then answers for the very file we read,
 * with no window between a check and the open. */
FILE *hd__file_open_regular(const char *path, char *msg, size_t size)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        int err = errno;
        if (msg != NULL)
            snprintf(msg, size, "cannot open '%s': %s", path, strerror(err));
        errno = err;
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        if (msg != NULL)
            snprintf(msg, size, "'%s' is not a regular file", path);
        errno = EINVAL;
        return NULL;
    }
    /* Regular files never block; clearing the flag keeps stdio's reads ordinary. */
    int flags = fcntl(fd, F_GETFL);
    if (flags >= 0)
        fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    FILE *fp = fdopen(fd, "rb");
    if (fp == NULL) {
        int err = errno;
        close(fd);
        if (msg != NULL)
            snprintf(msg, size, "cannot open '%s': %s", path, strerror(err));
        errno = err;
    }
    return fp;
}
