/*
 * ctl_recorder: an ALSA external control plugin (snd_ctl_ext) for tests, no sound card needed.
 *
 * It exposes one mono playback volume, "Master Playback Volume" (simple mixer element "Master"),
 * appends every value written to it to a log file, one decimal line per write ("<value>\n"), and
 * returns the current value on read. A new instance starts from the last value in the log (so a
 * second open reads back what the first wrote), or from `initial` when the log is empty.
 *
 *   ctl_type.recorder { lib "/path/to/libasound_module_ctl_recorder.so" }
 *   ctl.name {
 *     type recorder
 *     log "/tmp/x/log"     # required
 *     min 0                # raw range (default 0..255)
 *     max 255
 *     initial 255          # default: max
 *     tlv minmax           # dB info: minmax (default), minmax_mute, scale, scale_mute or none
 *     db_min -5100         # dB range in 0.01 dB (default -5100..0); for `scale` the step is
 *     db_max 0             #   (db_max - db_min) / (max - min), which must divide exactly
 *   }
 *
 * Build: cc -shared -fPIC -o libasound_module_ctl_recorder.so ctl_recorder.c -lasound
 */
#include "ioplug_common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <alsa/asoundlib.h>
#include <alsa/control_external.h>

enum tlv_kind { TLV_NONE, TLV_MINMAX, TLV_MINMAX_MUTE, TLV_SCALE, TLV_SCALE_MUTE };

typedef struct {
	snd_ctl_ext_t ext;
	char *log;
	long min, max, value;
	enum tlv_kind tlv;
	long db_min, db_max;
} recorder_t;

#define ELEM_NAME "Master Playback Volume"

static void recorder_close(snd_ctl_ext_t *ext)
{
	recorder_t *r = ext->private_data;
	free(r->log);
	free(r);
}

static int recorder_elem_count(snd_ctl_ext_t *ext)
{
	(void)ext;
	return 1;
}

static int recorder_elem_list(snd_ctl_ext_t *ext, unsigned int offset, snd_ctl_elem_id_t *id)
{
	(void)ext;
	if (offset != 0)
		return -EINVAL;
	snd_ctl_elem_id_set_interface(id, SND_CTL_ELEM_IFACE_MIXER);
	snd_ctl_elem_id_set_name(id, ELEM_NAME);
	snd_ctl_elem_id_set_index(id, 0);
	return 0;
}

static snd_ctl_ext_key_t recorder_find_elem(snd_ctl_ext_t *ext, const snd_ctl_elem_id_t *id)
{
	(void)ext;
	if (snd_ctl_elem_id_get_numid(id) == 1)
		return 0;
	if (strcmp(snd_ctl_elem_id_get_name(id), ELEM_NAME) == 0 && snd_ctl_elem_id_get_index(id) == 0)
		return 0;
	return SND_CTL_EXT_KEY_NOT_FOUND;
}

static int recorder_get_attribute(snd_ctl_ext_t *ext, snd_ctl_ext_key_t key, int *type, unsigned int *acc,
				  unsigned int *count)
{
	recorder_t *r = ext->private_data;
	if (key != 0)
		return -EINVAL;
	*type = SND_CTL_ELEM_TYPE_INTEGER;
	*acc = SND_CTL_EXT_ACCESS_READWRITE;
	if (r->tlv != TLV_NONE)
		*acc |= SND_CTL_EXT_ACCESS_TLV_READ | SND_CTL_EXT_ACCESS_TLV_CALLBACK;
	*count = 1;
	return 0;
}

static int recorder_get_integer_info(snd_ctl_ext_t *ext, snd_ctl_ext_key_t key, long *imin, long *imax,
				     long *istep)
{
	recorder_t *r = ext->private_data;
	if (key != 0)
		return -EINVAL;
	*imin = r->min;
	*imax = r->max;
	*istep = 1;
	return 0;
}

static int recorder_read_integer(snd_ctl_ext_t *ext, snd_ctl_ext_key_t key, long *value)
{
	recorder_t *r = ext->private_data;
	if (key != 0)
		return -EINVAL;
	value[0] = r->value;
	return 0;
}

static int recorder_write_integer(snd_ctl_ext_t *ext, snd_ctl_ext_key_t key, long *value)
{
	recorder_t *r = ext->private_data;
	FILE *f;
	int changed;
	if (key != 0)
		return -EINVAL;
	if (value[0] < r->min || value[0] > r->max)
		return -EINVAL;
	f = fopen(r->log, "a");
	if (f == NULL)
		return -errno;
	fprintf(f, "%ld\n", value[0]);
	fclose(f);
	changed = value[0] != r->value;
	r->value = value[0];
	return changed;
}

static int recorder_tlv(snd_ctl_ext_t *ext, snd_ctl_ext_key_t key, int op_flag, unsigned int numid,
			unsigned int *tlv, unsigned int tlv_size)
{
	recorder_t *r = ext->private_data;
	unsigned int data[4];
	(void)numid;
	if (key != 0 || r->tlv == TLV_NONE)
		return -ENXIO;
	if (op_flag != 0)
		return -ENXIO; /* read only */
	switch (r->tlv) {
	case TLV_MINMAX:
	case TLV_MINMAX_MUTE:
		data[0] = r->tlv == TLV_MINMAX ? SND_CTL_TLVT_DB_MINMAX : SND_CTL_TLVT_DB_MINMAX_MUTE;
		data[2] = (unsigned int)(int)r->db_min;
		data[3] = (unsigned int)(int)r->db_max;
		break;
	default:
		data[0] = SND_CTL_TLVT_DB_SCALE;
		data[2] = (unsigned int)(int)r->db_min;
		data[3] = (unsigned int)((r->db_max - r->db_min) / (r->max - r->min)) & 0xffff;
		if (r->tlv == TLV_SCALE_MUTE)
			data[3] |= 0x10000;
		break;
	}
	data[1] = 2 * sizeof(unsigned int);
	if (tlv_size < sizeof(data))
		return -ENOMEM;
	memcpy(tlv, data, sizeof(data));
	return 0;
}

static const snd_ctl_ext_callback_t recorder_callback = {
	.close = recorder_close,
	.elem_count = recorder_elem_count,
	.elem_list = recorder_elem_list,
	.find_elem = recorder_find_elem,
	.get_attribute = recorder_get_attribute,
	.get_integer_info = recorder_get_integer_info,
	.read_integer = recorder_read_integer,
	.write_integer = recorder_write_integer,
};

/* The last value in the log, or `fallback` when there is none. */
static long last_logged(const char *path, long fallback)
{
	FILE *f = fopen(path, "r");
	long v, last = fallback;
	if (f == NULL)
		return fallback;
	while (fscanf(f, "%ld", &v) == 1)
		last = v;
	fclose(f);
	return last;
}

static int get_long(snd_config_t *n, const char *id, long *out)
{
	if (snd_config_get_integer(n, out) < 0) {
		SNDERR("recorder: %s must be an integer", id);
		return -EINVAL;
	}
	return 0;
}

SND_CTL_PLUGIN_DEFINE_FUNC(recorder)
{
	snd_config_iterator_t it, next;
	const char *log = NULL, *tlv = "minmax";
	long min = 0, max = 255, initial = 0, db_min = -5100, db_max = 0;
	int has_initial = 0, err;
	recorder_t *r;
	(void)root;

	const struct fixture_string_field strings[] = { { "log", &log }, { "tlv", &tlv } };
	snd_config_for_each(it, next, conf) {
		snd_config_t *n = snd_config_iterator_entry(it);
		const char *id = fixture_field_id(n);
		if (id == NULL)
			continue;
		if ((err = fixture_take_string(n, "recorder", id, strings, 2)) != 0) {
			if (err < 0)
				return err;
			continue;
		}
		if (strcmp(id, "min") == 0) { if ((err = get_long(n, id, &min)) < 0) return err; continue; }
		if (strcmp(id, "max") == 0) { if ((err = get_long(n, id, &max)) < 0) return err; continue; }
		if (strcmp(id, "db_min") == 0) { if ((err = get_long(n, id, &db_min)) < 0) return err; continue; }
		if (strcmp(id, "db_max") == 0) { if ((err = get_long(n, id, &db_max)) < 0) return err; continue; }
		if (strcmp(id, "initial") == 0) {
			if ((err = get_long(n, id, &initial)) < 0)
				return err;
			has_initial = 1;
			continue;
		}
		SNDERR("recorder: unknown field %s", id);
		return -EINVAL;
	}
	if (log == NULL) {
		SNDERR("recorder: log is not defined");
		return -EINVAL;
	}
	if (max <= min || db_max <= db_min) {
		SNDERR("recorder: empty range");
		return -EINVAL;
	}

	r = calloc(1, sizeof(*r));
	if (r == NULL)
		return -ENOMEM;
	r->log = strdup(log);
	r->min = min;
	r->max = max;
	r->db_min = db_min;
	r->db_max = db_max;
	if (strcmp(tlv, "none") == 0)
		r->tlv = TLV_NONE;
	else if (strcmp(tlv, "minmax") == 0)
		r->tlv = TLV_MINMAX;
	else if (strcmp(tlv, "minmax_mute") == 0)
		r->tlv = TLV_MINMAX_MUTE;
	else if (strcmp(tlv, "scale") == 0)
		r->tlv = TLV_SCALE;
	else if (strcmp(tlv, "scale_mute") == 0)
		r->tlv = TLV_SCALE_MUTE;
	else {
		SNDERR("recorder: unknown tlv %s", tlv);
		err = -EINVAL;
		goto error;
	}
	if ((r->tlv == TLV_SCALE || r->tlv == TLV_SCALE_MUTE) && (db_max - db_min) % (max - min) != 0) {
		SNDERR("recorder: dB range is not a whole number of steps");
		err = -EINVAL;
		goto error;
	}
	r->value = last_logged(r->log, has_initial ? initial : max);
	if (r->value < min || r->value > max)
		r->value = min;

	r->ext.version = SND_CTL_EXT_VERSION;
	r->ext.card_idx = 0;
	strcpy(r->ext.id, "Recorder");
	strcpy(r->ext.driver, "recorder");
	strcpy(r->ext.name, "Recorder");
	strcpy(r->ext.longname, "rampd test recorder");
	strcpy(r->ext.mixername, "Recorder");
	r->ext.poll_fd = -1;
	r->ext.callback = &recorder_callback;
	r->ext.private_data = r;
	r->ext.tlv.c = recorder_tlv;

	err = snd_ctl_ext_create(&r->ext, name, mode);
	if (err < 0)
		goto error;
	*handlep = r->ext.handle;
	return 0;

error:
	free(r->log);
	free(r);
	return err;
}

SND_CTL_PLUGIN_SYMBOL(recorder);
