/*
 * pcm_flaky: an ALSA external PCM plugin (snd_pcm_ioplug) for tests: a playback device that can be
 * unplugged on demand, no sound card needed.
 *
 * Why: the daemon must survive losing its output device (a USB card pulled out): the write fails
 * with -ENODEV, every reopen fails until the device comes back, then playback resumes. ALSA's own
 * plugins (null, file) never fail, so this plugin lets the tests exercise that path through real
 * ALSA, the same calls the daemon makes on a real card.
 *
 * Behaviour:
 *   - playback only; interleaved FLOAT_LE, S32_LE, S24_LE or S16_LE; 1..8 channels; 8000..192000 Hz;
 *   - every frame written is appended, as raw bytes, to `file` (created if missing);
 *   - consumes instantly, like the null PCM: once started, everything written counts as played, so
 *     writes never block (the player paces itself to the wall clock);
 *   - while the file named by `flag` exists, opening fails with -ENODEV, and a write to an open
 *     PCM fails with -ENODEV and leaves the PCM DISCONNECTED: like a real unplugged card, that
 *     handle stays dead (write, start and prepare keep failing) even after the flag is removed;
 *     only a new open gets a working device;
 *   - while the file named by `gone` exists, it behaves as ALSA's `pipewire` PCM does while its
 *     audio server is down: opening fails with -EHOSTDOWN, and every write to an open PCM fails
 *     with -EPIPE (an xrun) although preparing it again succeeds, so snd_pcm_recover "recovers"
 *     each time and the next write fails the same way. Once the file is gone, the same handle
 *     plays again.
 *
 *   pcm_type.rampd_flaky { lib "/path/to/libasound_module_pcm_rampd_flaky.so" }
 *   pcm.name {
 *     type rampd_flaky
 *     file "/tmp/x/out.raw"   # required
 *     flag "/tmp/x/fail"      # optional: without it the device never fails
 *     opens "/tmp/x/opens"    # optional: every open attempt appends its CLOCK_MONOTONIC seconds
 *   }
 *
 * Build: cc -shared -fPIC -o libasound_module_pcm_rampd_flaky.so pcm_flaky.c -lasound
 */
#include "ioplug_common.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <alsa/asoundlib.h>
#include <alsa/pcm_external.h>

typedef struct {
	snd_pcm_ioplug_t io;
	int fd;      /* the output file, O_APPEND; also the poll descriptor (always writable) */
	char *flag;  /* NULL: never fails */
	char *gone;  /* NULL: never gone */
	int dead;    /* set by the first failed write; never cleared */
} flaky_t;

static int unplugged(flaky_t *f)
{
	return f->flag != NULL && access(f->flag, F_OK) == 0;
}

/* Marks the handle as gone, as the kernel does for a disconnected card. Called in the PCM lock:
 * snd_pcm_ioplug_set_state only sets the field. */
static int disconnect(flaky_t *f)
{
	f->dead = 1;
	snd_pcm_ioplug_set_state(&f->io, SND_PCM_STATE_DISCONNECTED);
	return -ENODEV;
}

static int flaky_start(snd_pcm_ioplug_t *io)
{
	flaky_t *f = io->private_data;
	return f->dead ? -ENODEV : 0;
}

static int flaky_stop(snd_pcm_ioplug_t *io)
{
	(void)io;
	return 0;
}

static int flaky_prepare(snd_pcm_ioplug_t *io)
{
	flaky_t *f = io->private_data;
	return f->dead ? -ENODEV : 0;
}

/* With SND_PCM_IOPLUG_FLAG_BOUNDARY_WA the position runs up to the boundary, like appl_ptr, so
 * "all consumed" is simply appl_ptr, however much was written since the last call. Before start
 * nothing is consumed (hw_ptr stays put), so the start threshold is reached as on a real device. */
static snd_pcm_sframes_t flaky_pointer(snd_pcm_ioplug_t *io)
{
	if (io->state == SND_PCM_STATE_RUNNING || io->state == SND_PCM_STATE_DRAINING)
		return io->appl_ptr;
	return io->hw_ptr;
}

static snd_pcm_sframes_t flaky_transfer(snd_pcm_ioplug_t *io, const snd_pcm_channel_area_t *areas,
					snd_pcm_uframes_t offset, snd_pcm_uframes_t size)
{
	flaky_t *f = io->private_data;
	if (f->dead || unplugged(f))
		return disconnect(f);
	if (f->gone != NULL && access(f->gone, F_OK) == 0)
		return -EPIPE;

	/* Interleaved (the only access offered): one area layout, frames contiguous from channel 0. */
	const char *data = (const char *)areas[0].addr + (areas[0].first + areas[0].step * offset) / 8;
	size_t bytes = size * (areas[0].step / 8);
	while (bytes > 0) {
		ssize_t n = write(f->fd, data, bytes);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		data += n;
		bytes -= (size_t)n;
	}
	return size;
}

static int flaky_close(snd_pcm_ioplug_t *io)
{
	flaky_t *f = io->private_data;
	close(f->fd);
	free(f->flag);
	free(f->gone);
	free(f);
	return 0;
}

static const snd_pcm_ioplug_callback_t flaky_callback = {
	.start = flaky_start,
	.stop = flaky_stop,
	.pointer = flaky_pointer,
	.transfer = flaky_transfer,
	.close = flaky_close,
	.prepare = flaky_prepare,
};

static int set_constraints(snd_pcm_ioplug_t *io)
{
	static const unsigned int access[] = { SND_PCM_ACCESS_RW_INTERLEAVED };
	static const unsigned int formats[] = {
		SND_PCM_FORMAT_FLOAT_LE, SND_PCM_FORMAT_S32_LE, SND_PCM_FORMAT_S24_LE, SND_PCM_FORMAT_S16_LE,
	};
	return fixture_set_playback_constraints(io, access, 1, formats, 4);
}

/* One line per open attempt, failed or not, so tests can see how often (and when) it is retried. */
static void log_open(const char *path)
{
	struct timespec now;
	int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	clock_gettime(CLOCK_MONOTONIC, &now);
	dprintf(fd, "%lld.%09ld\n", (long long)now.tv_sec, now.tv_nsec);
	close(fd);
}

SND_PCM_PLUGIN_DEFINE_FUNC(rampd_flaky)
{
	snd_config_iterator_t it, next;
	const char *file = NULL, *flag = NULL, *opens = NULL, *gone = NULL;
	flaky_t *f;
	int err;
	(void)root;

	const struct fixture_string_field strings[] = {
		{ "file", &file }, { "flag", &flag }, { "opens", &opens }, { "gone", &gone },
	};
	snd_config_for_each(it, next, conf) {
		snd_config_t *n = snd_config_iterator_entry(it);
		const char *id = fixture_field_id(n);
		if (id == NULL)
			continue;
		if ((err = fixture_take_string(n, "rampd_flaky", id, strings, 4)) != 0) {
			if (err < 0)
				return err;
			continue;
		}
		SNDERR("rampd_flaky: unknown field %s", id);
		return -EINVAL;
	}
	if (file == NULL) {
		SNDERR("rampd_flaky: file is not defined");
		return -EINVAL;
	}
	if (stream != SND_PCM_STREAM_PLAYBACK) {
		SNDERR("rampd_flaky: playback only");
		return -EINVAL;
	}
	if (opens != NULL)
		log_open(opens);
	if (flag != NULL && access(flag, F_OK) == 0)
		return -ENODEV; /* unplugged: no device to open */
	if (gone != NULL && access(gone, F_OK) == 0)
		return -EHOSTDOWN; /* no server to connect to */

	f = calloc(1, sizeof(*f));
	if (f == NULL)
		return -ENOMEM;
	f->flag = flag != NULL ? strdup(flag) : NULL;
	f->gone = gone != NULL ? strdup(gone) : NULL;
	if ((flag != NULL && f->flag == NULL) || (gone != NULL && f->gone == NULL)) {
		free(f->flag);
		free(f->gone);
		free(f);
		return -ENOMEM;
	}
	f->fd = open(file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (f->fd < 0) {
		err = -errno;
		SNDERR("rampd_flaky: cannot open %s: %s", file, strerror(errno));
		free(f->flag);
		free(f->gone);
		free(f);
		return err;
	}

	f->io.version = SND_PCM_IOPLUG_VERSION;
	f->io.name = "rampd flaky PCM (test device that fails on demand)";
	f->io.flags = SND_PCM_IOPLUG_FLAG_BOUNDARY_WA;
	f->io.poll_fd = f->fd;
	f->io.poll_events = POLLOUT;
	f->io.mmap_rw = 0;
	f->io.callback = &flaky_callback;
	f->io.private_data = f;

	err = snd_pcm_ioplug_create(&f->io, name, stream, mode);
	if (err < 0) {
		close(f->fd);
		free(f->flag);
		free(f->gone);
		free(f);
		return err;
	}
	err = set_constraints(&f->io);
	if (err < 0) {
		snd_pcm_ioplug_delete(&f->io); /* calls flaky_close */
		return err;
	}
	*pcmp = f->io.pcm;
	return 0;
}

SND_PCM_PLUGIN_SYMBOL(rampd_flaky);
