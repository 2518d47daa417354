/*
 * What the test plugins (pcm_clocked.c, pcm_flaky.c, ctl_recorder.c) share: reading their
 * configuration fields, and the hardware parameters a playback PCM offers. Included with quotes,
 * from the plugin's own directory, so building a plugin is still one `cc` of its .c file.
 */
#ifndef RAMPD_IOPLUG_COMMON_H
#define RAMPD_IOPLUG_COMMON_H

/* A shared object: without PIC, <alsa/global.h> builds the plugin symbol for static linking into
 * alsa-lib (a reference to snd_dlsym_start) and dlopen fails. */
#ifndef PIC
#define PIC
#endif

#include <errno.h>
#include <stddef.h>
#include <string.h>

#include <alsa/asoundlib.h>
#include <alsa/pcm_external.h>

/* The id of a field of the plugin's configuration, or NULL for one the plugin passes over (one
 * without an id, or the `comment`, `type` and `hint` every definition may carry). */
static inline const char *fixture_field_id(snd_config_t *n)
{
	const char *id;
	if (snd_config_get_id(n, &id) < 0)
		return NULL;
	if (strcmp(id, "comment") == 0 || strcmp(id, "type") == 0 || strcmp(id, "hint") == 0)
		return NULL;
	return id;
}

/* A field whose value is a string, and where to keep it. */
struct fixture_string_field {
	const char *name;
	const char **value;
};

/* When `id` names one of `fields`: keeps its string value and returns 1; 0 when it names none;
 * -EINVAL (with an ALSA error naming `plugin` and the field) when its value is not a string. */
static inline int fixture_take_string(snd_config_t *n, const char *plugin, const char *id,
				      const struct fixture_string_field *fields, size_t count)
{
	for (size_t i = 0; i < count; i++) {
		if (strcmp(id, fields[i].name) != 0)
			continue;
		if (snd_config_get_string(n, fields[i].value) < 0) {
			SNDERR("%s: %s must be a string", plugin, id);
			return -EINVAL;
		}
		return 1;
	}
	return 0;
}

/* The hardware parameters of a test playback PCM: the `access` and `formats` given, 1 to 8
 * channels, 8000 to 192000 Hz, and periods and buffers of any reasonable size. */
static inline int fixture_set_playback_constraints(snd_pcm_ioplug_t *io, const unsigned int *access,
						   unsigned int access_count, const unsigned int *formats,
						   unsigned int format_count)
{
	int err;
	if ((err = snd_pcm_ioplug_set_param_list(io, SND_PCM_IOPLUG_HW_ACCESS, access_count, access)) < 0 ||
	    (err = snd_pcm_ioplug_set_param_list(io, SND_PCM_IOPLUG_HW_FORMAT, format_count, formats)) < 0 ||
	    (err = snd_pcm_ioplug_set_param_minmax(io, SND_PCM_IOPLUG_HW_CHANNELS, 1, 8)) < 0 ||
	    (err = snd_pcm_ioplug_set_param_minmax(io, SND_PCM_IOPLUG_HW_RATE, 8000, 192000)) < 0 ||
	    (err = snd_pcm_ioplug_set_param_minmax(io, SND_PCM_IOPLUG_HW_PERIOD_BYTES, 64, 16 << 20)) < 0 ||
	    (err = snd_pcm_ioplug_set_param_minmax(io, SND_PCM_IOPLUG_HW_BUFFER_BYTES, 128, 64 << 20)) < 0 ||
	    (err = snd_pcm_ioplug_set_param_minmax(io, SND_PCM_IOPLUG_HW_PERIODS, 2, 1024)) < 0)
		return err;
	return 0;
}

#endif
