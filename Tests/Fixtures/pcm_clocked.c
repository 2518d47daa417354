/*
 * pcm_clocked: an ALSA external PCM plugin (snd_pcm_ioplug) for tests: a playback device that
 * behaves like a sound card, no sound card needed, and records when it played every frame.
 *
 * Why: ALSA's own null and file plugins take audio as fast as it comes; nothing plays it in real
 * time, so nothing says when a sample is heard. This device is the reference for "heard": a frame
 * is heard when this device consumes it.
 *
 * Behaviour:
 *   - playback only; interleaved FLOAT_LE, S32_LE or S16_LE; 1..8 channels; 8000..192000 Hz;
 *   - an mmap ring (ioplug's pseudo mmap) consumed in real time by the device's own clock, which
 *     runs `ppm` parts per million fast (positive) or slow (negative) against CLOCK_MONOTONIC:
 *     frame k after the start is consumed at start + k / (rate × (1 + ppm / 10⁶));
 *   - a hardware pointer exact to the frame whenever it is read, a delay (frames written and not
 *     yet consumed), timestamps (ALSA takes them when it reads the pointer), rewind (what is
 *     queued and not yet consumed may be rewritten: the device reads the ring as it consumes);
 *   - a period "interrupt": its poll descriptor becomes ready at every period boundary of the
 *     device clock, so a blocked writer wakes once per period, as on a card;
 *   - running dry is an underrun (the pointer reports -EPIPE), as on a card; draining stops once
 *     all is played;
 *   - every frame consumed is appended, as raw bytes, to `file`; with `times`, each run of frames
 *     consumed appends three little-endian int64 to it: the index of its first frame in `file`,
 *     the CLOCK_MONOTONIC nanoseconds at which that frame was consumed, and how many frames (the
 *     others follow one device-clock frame apart).
 *
 *   pcm_type.rampd_clocked { lib "/path/to/libasound_module_pcm_rampd_clocked.so" }
 *   pcm.name {
 *     type rampd_clocked
 *     file "/tmp/x/out.raw"     # required
 *     times "/tmp/x/out.times"  # optional
 *     ppm 100                   # optional: the device clock's error, parts per million
 *   }
 *
 * Build: cc -shared -fPIC -o libasound_module_pcm_rampd_clocked.so pcm_clocked.c -lasound -lpthread
 */
#include "ioplug_common.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <alsa/asoundlib.h>
#include <alsa/pcm_external.h>

typedef struct {
	snd_pcm_ioplug_t io;
	int fd;        /* frames consumed, O_APPEND */
	int times_fd;  /* runs of frames consumed with their time, or -1 */
	int event_fd;  /* the poll descriptor: signalled at every period boundary */
	double ppm;

	pthread_mutex_t lock; /* guards everything below */
	pthread_cond_t wake;
	pthread_t thread;
	int quit;
	int running;            /* started and consuming */
	int xrun;               /* ran dry while running */
	int64_t t0;             /* CLOCK_MONOTONIC ns of the start */
	uint64_t consumed;      /* frames consumed since the start */
	snd_pcm_uframes_t base; /* io->hw_ptr at the start */
	uint64_t recorded;      /* frames appended to `file` since the open */
	snd_pcm_uframes_t avail_min;
} clocked_t;

static int64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static double frames_per_ns(clocked_t *c)
{
	return c->io.rate * (1 + c->ppm * 1e-6) / 1e9;
}

static void write_all(int fd, const void *data, size_t bytes)
{
	const char *p = data;
	while (bytes > 0) {
		ssize_t n = write(fd, p, bytes);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return;
		}
		p += n;
		bytes -= (size_t)n;
	}
}

static snd_pcm_uframes_t appl(clocked_t *c)
{
	return __atomic_load_n(&c->io.appl_ptr, __ATOMIC_ACQUIRE);
}

/* Consumes, as the device clock says, what is due by now (at most what is queued). In the lock. */
static void consume(clocked_t *c)
{
	if (!c->running)
		return;
	int64_t now = now_ns();
	uint64_t due = (uint64_t)((double)(now - c->t0) * frames_per_ns(c));
	if (due <= c->consumed)
		return;
	uint64_t n = due - c->consumed;
	snd_pcm_uframes_t played = c->base + c->consumed;
	/* A rewind past what was played (too late): nothing is queued, as on a card. */
	uint64_t queued = (snd_pcm_sframes_t)(appl(c) - played) > 0 ? appl(c) - played : 0;
	if (n > queued) {
		n = queued;
		if (c->io.state != SND_PCM_STATE_DRAINING)
			c->xrun = 1;
	}
	if (n == 0)
		return;
	const snd_pcm_channel_area_t *areas = snd_pcm_ioplug_mmap_areas(&c->io);
	size_t frame_bytes = areas[0].step / 8;
	snd_pcm_uframes_t size = c->io.buffer_size;
	if (c->times_fd >= 0) {
		int64_t record[3] = {
			(int64_t)c->recorded,
			c->t0 + (int64_t)((double)c->consumed / frames_per_ns(c) + 0.5),
			(int64_t)n,
		};
		write_all(c->times_fd, record, sizeof(record));
	}
	uint64_t left = n;
	while (left > 0) {
		snd_pcm_uframes_t offset = (c->base + c->consumed) % size;
		snd_pcm_uframes_t run = size - offset < left ? size - offset : (snd_pcm_uframes_t)left;
		const char *data = (const char *)areas[0].addr + (areas[0].first + areas[0].step * offset) / 8;
		write_all(c->fd, data, run * frame_bytes);
		c->consumed += run;
		left -= run;
	}
	c->recorded += n;
}

static void signal_period(clocked_t *c)
{
	uint64_t one = 1;
	ssize_t n = write(c->event_fd, &one, sizeof(one));
	(void)n;
}

/* The device's clock: wakes at every period boundary, consumes, and raises the "interrupt". */
static void *clock_thread(void *arg)
{
	clocked_t *c = arg;
	pthread_mutex_lock(&c->lock);
	while (!c->quit) {
		if (!c->running || c->xrun) {
			pthread_cond_wait(&c->wake, &c->lock);
			continue;
		}
		consume(c);
		signal_period(c);
		uint64_t period = c->io.period_size;
		uint64_t next = (c->consumed / period + 1) * period;
		int64_t at = c->t0 + (int64_t)((double)next / frames_per_ns(c)) + 1;
		struct timespec deadline = { .tv_sec = at / 1000000000, .tv_nsec = at % 1000000000 };
		pthread_mutex_unlock(&c->lock);
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &deadline, NULL);
		pthread_mutex_lock(&c->lock);
	}
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

static int clocked_start(snd_pcm_ioplug_t *io)
{
	clocked_t *c = io->private_data;
	pthread_mutex_lock(&c->lock);
	c->running = 1;
	c->xrun = 0;
	c->t0 = now_ns();
	c->consumed = 0;
	c->base = io->hw_ptr;
	pthread_cond_signal(&c->wake);
	pthread_mutex_unlock(&c->lock);
	return 0;
}

/* Stops consuming, in the lock; `reset` also forgets an underrun (prepare). */
static void halt(clocked_t *c, int reset)
{
	pthread_mutex_lock(&c->lock);
	c->running = 0;
	if (reset)
		c->xrun = 0;
	pthread_mutex_unlock(&c->lock);
}

static int clocked_stop(snd_pcm_ioplug_t *io)
{
	clocked_t *c = io->private_data;
	/* A card has played up to the moment it stops, whenever its clock thread last woke. */
	pthread_mutex_lock(&c->lock);
	consume(c);
	pthread_mutex_unlock(&c->lock);
	halt(c, 0);
	signal_period(c);
	return 0;
}

static int clocked_prepare(snd_pcm_ioplug_t *io)
{
	halt(io->private_data, 1);
	return 0;
}

static snd_pcm_sframes_t clocked_pointer(snd_pcm_ioplug_t *io)
{
	clocked_t *c = io->private_data;
	snd_pcm_sframes_t result;
	pthread_mutex_lock(&c->lock);
	if (c->running) {
		consume(c);
		result = c->xrun ? -EPIPE : (snd_pcm_sframes_t)(c->base + c->consumed);
	} else {
		result = (snd_pcm_sframes_t)io->hw_ptr;
	}
	pthread_mutex_unlock(&c->lock);
	return result;
}

/* Frames written and not yet consumed, consuming what is due first. */
static snd_pcm_uframes_t queued(clocked_t *c)
{
	pthread_mutex_lock(&c->lock);
	consume(c);
	snd_pcm_uframes_t hw = c->running ? c->base + c->consumed : c->io.hw_ptr;
	snd_pcm_uframes_t frames = (snd_pcm_sframes_t)(appl(c) - hw) > 0 ? appl(c) - hw : 0;
	pthread_mutex_unlock(&c->lock);
	return frames;
}

static int clocked_delay(snd_pcm_ioplug_t *io, snd_pcm_sframes_t *delayp)
{
	*delayp = (snd_pcm_sframes_t)queued(io->private_data);
	return 0;
}

static int clocked_sw_params(snd_pcm_ioplug_t *io, snd_pcm_sw_params_t *params)
{
	clocked_t *c = io->private_data;
	snd_pcm_uframes_t avail_min = 0;
	snd_pcm_sw_params_get_avail_min(params, &avail_min);
	pthread_mutex_lock(&c->lock);
	c->avail_min = avail_min > 0 ? avail_min : 1;
	pthread_mutex_unlock(&c->lock);
	return 0;
}

static int clocked_poll_revents(snd_pcm_ioplug_t *io, struct pollfd *pfd, unsigned int nfds,
				unsigned short *revents)
{
	clocked_t *c = io->private_data;
	uint64_t count;
	(void)pfd;
	(void)nfds;
	ssize_t n = read(c->event_fd, &count, sizeof(count));
	(void)n;
	snd_pcm_uframes_t avail = io->buffer_size - queued(c);
	pthread_mutex_lock(&c->lock);
	*revents = (avail >= c->avail_min || c->xrun || !c->running) ? POLLOUT : 0;
	pthread_mutex_unlock(&c->lock);
	return 0;
}

/* Releases what open made: the recording, the times file, the event fd, the lock. */
static void clocked_free(clocked_t *c)
{
	close(c->fd);
	if (c->times_fd >= 0)
		close(c->times_fd);
	close(c->event_fd);
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->wake);
	free(c);
}

static int clocked_close(snd_pcm_ioplug_t *io)
{
	clocked_t *c = io->private_data;
	pthread_mutex_lock(&c->lock);
	c->quit = 1;
	pthread_cond_signal(&c->wake);
	pthread_mutex_unlock(&c->lock);
	pthread_join(c->thread, NULL);
	clocked_free(c);
	return 0;
}

static const snd_pcm_ioplug_callback_t clocked_callback = {
	.start = clocked_start,
	.stop = clocked_stop,
	.pointer = clocked_pointer,
	.close = clocked_close,
	.prepare = clocked_prepare,
	.sw_params = clocked_sw_params,
	.poll_revents = clocked_poll_revents,
	.delay = clocked_delay,
};

static int set_constraints(snd_pcm_ioplug_t *io)
{
	static const unsigned int access[] = { SND_PCM_ACCESS_RW_INTERLEAVED, SND_PCM_ACCESS_MMAP_INTERLEAVED };
	static const unsigned int formats[] = {
		SND_PCM_FORMAT_FLOAT_LE, SND_PCM_FORMAT_S32_LE, SND_PCM_FORMAT_S16_LE,
	};
	return fixture_set_playback_constraints(io, access, 2, formats, 3);
}

SND_PCM_PLUGIN_DEFINE_FUNC(rampd_clocked)
{
	snd_config_iterator_t it, next;
	const char *file = NULL, *times = NULL;
	double ppm = 0;
	clocked_t *c;
	int err;
	(void)root;

	const struct fixture_string_field strings[] = { { "file", &file }, { "times", &times } };
	snd_config_for_each(it, next, conf) {
		snd_config_t *n = snd_config_iterator_entry(it);
		const char *id = fixture_field_id(n);
		if (id == NULL)
			continue;
		if ((err = fixture_take_string(n, "rampd_clocked", id, strings, 2)) != 0) {
			if (err < 0)
				return err;
			continue;
		}
		if (strcmp(id, "ppm") == 0) {
			long l;
			if (snd_config_get_real(n, &ppm) < 0) {
				if (snd_config_get_integer(n, &l) < 0) {
					SNDERR("rampd_clocked: ppm must be a number");
					return -EINVAL;
				}
				ppm = (double)l;
			}
			continue;
		}
		SNDERR("rampd_clocked: unknown field %s", id);
		return -EINVAL;
	}
	if (file == NULL) {
		SNDERR("rampd_clocked: file is not defined");
		return -EINVAL;
	}
	if (stream != SND_PCM_STREAM_PLAYBACK) {
		SNDERR("rampd_clocked: playback only");
		return -EINVAL;
	}

	c = calloc(1, sizeof(*c));
	if (c == NULL)
		return -ENOMEM;
	c->ppm = ppm;
	c->avail_min = 1;
	c->times_fd = -1;
	c->fd = open(file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (c->fd < 0) {
		err = -errno;
		SNDERR("rampd_clocked: cannot open %s: %s", file, strerror(errno));
		free(c);
		return err;
	}
	if (times != NULL) {
		c->times_fd = open(times, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (c->times_fd < 0) {
			err = -errno;
			SNDERR("rampd_clocked: cannot open %s: %s", times, strerror(errno));
			close(c->fd);
			free(c);
			return err;
		}
	}
	c->event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (c->event_fd < 0) {
		err = -errno;
		close(c->fd);
		if (c->times_fd >= 0)
			close(c->times_fd);
		free(c);
		return err;
	}
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->wake, NULL);

	c->io.version = SND_PCM_IOPLUG_VERSION;
	c->io.name = "rampd clocked PCM (test device that plays in real time)";
	c->io.flags = SND_PCM_IOPLUG_FLAG_BOUNDARY_WA;
	c->io.poll_fd = c->event_fd;
	c->io.poll_events = POLLIN;
	c->io.mmap_rw = 1;
	c->io.callback = &clocked_callback;
	c->io.private_data = c;

	err = pthread_create(&c->thread, NULL, clock_thread, c);
	if (err != 0) {
		err = -err;
		goto fail;
	}
	err = snd_pcm_ioplug_create(&c->io, name, stream, mode);
	if (err < 0) {
		clocked_close(&c->io); /* stops the thread and frees everything */
		return err;
	}
	err = set_constraints(&c->io);
	if (err < 0) {
		snd_pcm_ioplug_delete(&c->io); /* calls clocked_close */
		return err;
	}
	*pcmp = c->io.pcm;
	return 0;

fail:
	clocked_free(c);
	return err;
}

SND_PCM_PLUGIN_SYMBOL(rampd_clocked);
