/* Opening the library's cache files (tuning cache, program binaries) for reading. */
#ifndef HD_CORE_FILE_H
#define HD_CORE_FILE_H

#include <stddef.h>
#include <stdio.h>

/* Opens path for binary reading only if it is a regular file, without ever blocking: a FIFO,
 * a device or a directory at that path is refused. Returns NULL with a message in msg (may be
 * NULL) and errno set on failure. */
FILE *hd__file_open_regular(const char *path, char *msg, size_t size);

#endif
