/* Opening a file a user names (regular_file.h). */
#include "regular_file.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

llama_file_open llama_open_regular(const char *path, int *fd, uint64_t *bytes)
{
    *fd = -1;
    *bytes = 0;
    int f = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (f < 0)
        return LLAMA_FILE_CANNOT_OPEN;
    struct stat st;
    if (fstat(f, &st) != 0) {
        int saved = errno;
        close(f);
        errno = saved;
        return LLAMA_FILE_CANNOT_STAT;
    }
    if (!S_ISREG(st.st_mode) || st.st_size < 0) {
        close(f);
        return LLAMA_FILE_NOT_REGULAR;
    }
    *fd = f;
    *bytes = (uint64_t)st.st_size;
    return LLAMA_FILE_OPENED;
}
