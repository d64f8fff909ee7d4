/*
 * file.h - small files replaced whole, so that a crash leaves either the
 * old content or the new one, never a mix (saved profiles, pins).
 */
#ifndef LARDER_FILE_H
#define LARDER_FILE_H

#include <stddef.h>

/* Writes n bytes of data to path atomically: to path.tmp, fsync, rename
 * over path, fsync of its directory. Returns 0 or a negative errno (the
 * temporary file is removed; path is unchanged). */
int file_replace(const char *path, const void *data, size_t n);

/* Makes directory dir unless it exists, then calls fn(arg, name) for each
 * file in it whose name ends with suffix (within this call). Returns 0, or
 * -1 with err set when dir cannot be made or read. */
int file_dir_each(const char *dir, const char *suffix, void (*fn)(void *arg, const char *name),
                  void *arg, char *err, size_t errlen);

#endif
