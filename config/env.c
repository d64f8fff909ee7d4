/*
 * env.c - LARDER_* environment variables over the file's settings, plus
 * AWS_REGION / AWS_DEFAULT_REGION, LARDER_CLIENT_KEY/SECRET (one
 * read-write key on every bucket) and LARDER_ANONYMOUS (grants).
 */
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

int load_env(struct load *L, const char *const *envp)
{
	struct cfg *c = L->c;
	char *v;

	for (size_t i = 0; i < N_SETTINGS && !L->failed; i++) {
		if ((v = env_trimmed(L, envp, load_settings[i].env)) != NULL)
			load_setting(L, &load_settings[i], v, load_settings[i].env);
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
		load_grants(L, &c->anonymous, v, "LARDER_ANONYMOUS");
		free(v);
	}
	return L->failed ? -1 : 0;
}
