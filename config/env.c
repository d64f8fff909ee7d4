/*
 * env.c - LARDER_* environment variables over the file's settings, plus
 * AWS_REGION / AWS_DEFAULT_REGION, LARDER_CLIENT_KEY/SECRET (one
 * read-write key on every bucket) and LARDER_ANONYMOUS (grants).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/load.h"

/* The value of NAME in envp, or NULL; an empty value counts as unset. */
const char *load_env_get(const char *const *envp, const char *name)
{
	size_t n = strlen(name);
	for (; envp && *envp; envp++)
		if (strncmp(*envp, name, n) == 0 && (*envp)[n] == '=')
			return (*envp)[n + 1] ? *envp + n + 1 : NULL;
	return NULL;
}

/* A trimmed copy of an environment value (free() it), or NULL: unset or
 * blank, or out of memory (then L->failed is set). */
static char *env_trimmed(struct load *L, const char *const *envp, const char *name)
{
	const char *v = load_env_get(envp, name);
	if (!v)
		return NULL;
	char *t = load_dup_trimmed(v, strlen(v));
	if (!t)
		load_fail(L, "out of memory");
	else if (!*t) {
		free(t);
		t = NULL;
	}
	return t;
}

/* Variables larder reads besides the settings': the loader's own, the
 * CLI's, the container entrypoint's, and the test and benchmark tools'. */
static const char *const other_vars[] = {
	"LARDER_CONFIG", "LARDER_CLIENT_KEY", "LARDER_CLIENT_SECRET", "LARDER_ANONYMOUS",
	"LARDER_ADMIN_URL", "LARDER_ALLOW_ROOT", "LARDER_BIN", "LARDER_BUILD_DIR",
	"LARDER_ASAN_BUILD_DIR", "LARDER_TSAN_BUILD_DIR", "LARDER_REDIS_SERVER", NULL,
};

static bool known(const char *name, size_t n)
{
	for (size_t i = 0; i < N_SETTINGS; i++)
		if (strlen(load_settings[i].env) == n && memcmp(load_settings[i].env, name, n) == 0)
			return true;
	for (size_t i = 0; other_vars[i]; i++)
		if (strlen(other_vars[i]) == n && memcmp(other_vars[i], name, n) == 0)
			return true;
	return n > 11 && memcmp(name, "LARDER_TEST", 11) == 0;
}

const char *cfg_env_unknown(const char *const *envp, size_t *from)
{
	for (size_t i = *from; envp && envp[i]; i++) {
		const char *eq = strchr(envp[i], '=');
		if (strncmp(envp[i], "LARDER_", 7) == 0 && eq && !known(envp[i], (size_t)(eq - envp[i]))) {
			*from = i + 1;
			return envp[i];
		}
	}
	return NULL;
}

/* A file setting the environment replaced: said at start (cfg->overridden),
 * since a mounted file's listen or dir would otherwise be ignored without a
 * word where the environment sets them (as the container image does). */
static void note_override(struct load *L, size_t i)
{
	if (!L->file_line[i] || L->failed)
		return;
	char at[300], line[600];
	load_loc(L, L->file_line[i], at, sizeof at);
	int n = snprintf(line, sizeof line, "%s (the environment) overrides [%s] %s (%s)\n",
	                 load_settings[i].env, load_settings[i].section, load_settings[i].name, at);
	size_t had = L->c->overridden ? strlen(L->c->overridden) : 0;
	char *grown = realloc(L->c->overridden, had + (size_t)n + 1);
	if (!grown) {
		load_fail(L, "out of memory");
		return;
	}
	memcpy(grown + had, line, (size_t)n + 1);
	L->c->overridden = grown;
}

int load_env(struct load *L, const char *const *envp)
{
	struct cfg *c = L->c;
	char *v;

	for (size_t i = 0; i < N_SETTINGS && !L->failed; i++) {
		if ((v = env_trimmed(L, envp, load_settings[i].env)) != NULL) {
			load_setting(L, &load_settings[i], v, load_settings[i].env);
			note_override(L, i);
		}
		else if (load_settings[i].kind == K_REGION && !L->region_in_file) {
			const char *aws = "AWS_REGION";
			if (!(v = env_trimmed(L, envp, aws)))
				v = env_trimmed(L, envp, aws = "AWS_DEFAULT_REGION");
			if (v)
				load_setting(L, &load_settings[i], v, aws);
		}
		free(v);
	}
	if (L->failed)
		return -1;

	char *id = env_trimmed(L, envp, "LARDER_CLIENT_KEY");
	char *secret = env_trimmed(L, envp, "LARDER_CLIENT_SECRET");
	if (id && !secret)
		load_fail(L, "LARDER_CLIENT_KEY is set but LARDER_CLIENT_SECRET is not");
	else if (!id && secret)
		load_fail(L, "LARDER_CLIENT_SECRET is set but LARDER_CLIENT_KEY is not");
	else if (id && load_key(L, id, "LARDER_CLIENT_KEY") == 0) {
		struct client_key *k = &c->keys[c->n_keys - 1];
		k->secret = secret;
		secret = NULL;
		k->write = true;
		load_grant(L, k, "*", "LARDER_CLIENT_KEY");
	}
	free(id);
	free(secret);
	if (L->failed)
		return -1;

	if ((v = env_trimmed(L, envp, "LARDER_ANONYMOUS")) != NULL) {
		load_free_grants(&c->anonymous);
		c->anonymous.write = false;
		/* "," alone grants nothing where grants were plainly meant (the
		 * file's [anonymous] says "buckets is missing" for it). */
		if (load_grants(L, &c->anonymous, v, "LARDER_ANONYMOUS") == 0 &&
		    !c->anonymous.n_grants)
			load_fail(L, "LARDER_ANONYMOUS: names no bucket in \"%s\"", v);
		free(v);
	}
	return L->failed ? -1 : 0;
}
