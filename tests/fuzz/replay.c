/*
 * replay.c - stands in for libFuzzer's main when meson is configured with
 * -Dfuzzing=none: runs LLVMFuzzerTestOneInput over every file named on the
 * command line (directories are walked one level), so the fuzz targets are
 * built and their seed corpus exercised in every test run.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		perror(path);
		return -1;
	}
	size_t cap = 1 << 16, len = 0;
	uint8_t *buf = malloc(cap);
	size_t n;
	while (buf && (n = fread(buf + len, 1, cap - len, f)) > 0) {
		len += n;
		if (len == cap) {
			uint8_t *nb = realloc(buf, cap *= 2);
			if (!nb) {
				free(buf);
				buf = NULL;
			}
			buf = nb;
		}
	}
	fclose(f);
	if (!buf)
		return -1;
	/* Copy into an exact-size allocation so ASan sees reads past the end. */
	uint8_t *exact = malloc(len ? len : 1);
	if (!exact) {
		free(buf);
		return -1;
	}
	memcpy(exact, buf, len);
	free(buf);
	LLVMFuzzerTestOneInput(exact, len);
	free(exact);
	return 0;
}

int main(int argc, char **argv)
{
	int files = 0, failed = 0;
	for (int i = 1; i < argc; i++) {
		struct stat st;
		if (stat(argv[i], &st) != 0) {
			perror(argv[i]);
			return 1;
		}
		if (!S_ISDIR(st.st_mode)) {
			failed += run_file(argv[i]) != 0;
			files++;
			continue;
		}
		DIR *d = opendir(argv[i]);
		if (!d) {
			perror(argv[i]);
			return 1;
		}
		struct dirent *e;
		while ((e = readdir(d)) != NULL) {
			if (e->d_name[0] == '.')
				continue;
			char path[4096];
			snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name);
			failed += run_file(path) != 0;
			files++;
		}
		closedir(d);
	}
	printf("replayed %d inputs, %d unreadable\n", files, failed);
	return files == 0 || failed ? 1 : 0;
}
