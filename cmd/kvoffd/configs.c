/*
 * The config.json of model dirs that clients named (CONFIG), for the
 * file tiers that have none yet: a block's model dir is whole on every
 * tier it lands on, though no tier held the config before.  The loop
 * adds; the workers read, with each block they write.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "kvoffd.h"

int configs_add(struct configs *cs, const char *model_dir, const char *text, size_t len)
{
	struct kv_config *cfg;
	char dir[KV_NAME_MAX + 1];
	struct config_text *e;
	char *copy;
	int r = kv_config_parse(text, len, &cfg);

	if (r < 0)
		return r;
	r = kv_config_model_dir(cfg, dir, sizeof(dir));
	kv_config_free(cfg);
	if (r < 0)
		return r;
	if (strcmp(dir, model_dir))
		return -KV_EFINGERPRINT;
	if (!(copy = malloc(len)))
		return -ENOMEM;
	memcpy(copy, text, len);
	pthread_mutex_lock(&cs->lock);
	for (e = cs->v; e < cs->v + CONFIGS_MAX && strcmp(e->model_dir, model_dir); e++)
		;
	if (e == cs->v + CONFIGS_MAX)	/* new: take the oldest's place */
		e = &cs->v[cs->next++ % CONFIGS_MAX];
	free(e->text);
	strcpy(e->model_dir, model_dir);
	e->text = copy;
	e->len = len;
	pthread_mutex_unlock(&cs->lock);
	return 0;
}

int configs_give(struct configs *cs, struct kv_tier *t, const char *model_dir)
{
	char *text = NULL;
	size_t len = 0;
	int r = -ENOENT;

	pthread_mutex_lock(&cs->lock);
	for (struct config_text *e = cs->v; e < cs->v + CONFIGS_MAX; e++)
		if (e->text && !strcmp(e->model_dir, model_dir) && (text = malloc(e->len))) {
			memcpy(text, e->text, e->len);
			len = e->len;
			break;
		}
	pthread_mutex_unlock(&cs->lock);
	if (text)
		r = kv_tier_put_config(t, model_dir, text, len);
	free(text);
	return r;
}

void configs_init(struct configs *cs)
{
	memset(cs, 0, sizeof(*cs));
	pthread_mutex_init(&cs->lock, NULL);
}

void configs_free(struct configs *cs)
{
	for (unsigned i = 0; i < CONFIGS_MAX; i++)
		free(cs->v[i].text);
	pthread_mutex_destroy(&cs->lock);
}
