#define _GNU_SOURCE
#include "pipewire_shim.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <pipewire/pipewire.h>
#include <spa/param/audio/format-utils.h>
#include <spa/pod/builder.h>
#include <spa/utils/result.h>

struct rampd_pw_stream {
	struct pw_thread_loop *loop;
	struct pw_context *context;
	struct pw_core *core;
	struct spa_hook core_listener;
	struct pw_stream *stream;
	struct spa_hook stream_listener;
	rampd_pw_render_fn render;
	rampd_pw_event_fn event;
	void *user;
	uint32_t channels;
	uint32_t stride;
	/* Set on the loop's thread, read by open under the loop's lock. */
	int format_known;
	rampd_pw_format format;
	int failed;
	char error[256];
	int initialized;
	/* The data thread's alone: whether it has been given rampd's name for it, and the cycles
	   since the last render that had no buffer to fill. */
	int data_thread_named;
	uint32_t missed_cycles;
	/* Whether the stream is to be active: stored by any thread (the render thread at its idle
	   edges), applied on the loop's thread when `activation` is signalled. */
	atomic_int want_active;
	/* The loop's thread's alone: what it last applied. */
	int is_active;
	struct spa_source *activation;
};

/* On the loop's thread (its lock held): makes the stream as active as it is wanted. */
static void on_activation(void *data, uint64_t count)
{
	struct rampd_pw_stream *s = data;
	(void)count;
	int want = atomic_load_explicit(&s->want_active, memory_order_acquire);
	if (s->stream && want != s->is_active) {
		int result = pw_stream_set_active(s->stream, want != 0);
		s->is_active = want;
		if (result < 0 && !s->failed) {
			/* A stream that cannot be resumed plays nothing, and one that cannot be paused keeps the
			   sink awake: either is the stream failing, told as its failure is. */
			s->failed = 1;
			snprintf(s->error, sizeof s->error, "the stream could not be made %s: %s",
				 want ? "active" : "inactive", spa_strerror(result));
			if (s->event)
				s->event(s->user, RAMPD_PW_EVENT_STATE, PW_STREAM_STATE_ERROR, s->error);
		}
	}
}

static void on_state_changed(void *data, enum pw_stream_state old, enum pw_stream_state state, const char *error)
{
	struct rampd_pw_stream *s = data;
	(void)old;
	if (state == PW_STREAM_STATE_ERROR || state == PW_STREAM_STATE_UNCONNECTED) {
		if (!s->failed) {
			s->failed = 1;
			snprintf(s->error, sizeof s->error, "the stream is %s%s%s", pw_stream_state_as_string(state),
				 error ? ": " : "", error ? error : "");
		}
	}
	if (s->event)
		s->event(s->user, RAMPD_PW_EVENT_STATE, (int)state, error);
	pw_thread_loop_signal(s->loop, false);
}

static void on_param_changed(void *data, uint32_t id, const struct spa_pod *param)
{
	struct rampd_pw_stream *s = data;
	if (id != SPA_PARAM_Format || param == NULL)
		return;
	struct spa_audio_info_raw info;
	memset(&info, 0, sizeof info);
	if (spa_format_audio_raw_parse(param, &info) < 0)
		return;
	s->format.rate = info.rate;
	s->format.channels = info.channels;
	s->format.node_id = pw_stream_get_node_id(s->stream);
	s->format_known = 1;
	pw_thread_loop_signal(s->loop, false);
}

/* PipeWire's data thread (PW_STREAM_FLAG_RT_PROCESS): no allocation, no lock. */
static void on_process(void *data)
{
	struct rampd_pw_stream *s = data;
	if (!s->data_thread_named) {
		/* PipeWire leaves its data thread with the name of the thread that opened the stream:
		   named, it is told apart in /proc (its CPU, its wake-ups) and in the allocation trap's
		   message. Once, a prctl: no allocation. */
		s->data_thread_named = 1;
		pthread_setname_np(pthread_self(), "rampd-pw-data");
	}
	struct pw_buffer *b = pw_stream_dequeue_buffer(s->stream);
	if (b == NULL) {
		s->missed_cycles++;
		return;
	}
	struct spa_data *d = &b->buffer->datas[0];
	if (d->data == NULL || d->maxsize < s->stride) {
		pw_stream_queue_buffer(s->stream, b);
		s->missed_cycles++;
		return;
	}
	uint32_t frames = d->maxsize / s->stride;
	if (b->requested != 0 && b->requested < frames)
		frames = (uint32_t)b->requested;
	struct pw_time time;
	memset(&time, 0, sizeof time);
	pw_stream_get_time_n(s->stream, &time, sizeof time);
	rampd_pw_timing timing = {
		.now = time.now,
		.rate_num = time.rate.num,
		.rate_denom = time.rate.denom,
		.ticks = time.ticks,
		.delay = time.delay,
		.queued = time.queued,
		.buffered = time.buffered,
		.queued_buffers = time.queued_buffers,
		.avail_buffers = time.avail_buffers,
		.missed_cycles = s->missed_cycles,
	};
	s->missed_cycles = 0;
	s->render(s->user, d->data, frames, s->channels, &timing);
	d->chunk->offset = 0;
	d->chunk->stride = (int32_t)s->stride;
	d->chunk->size = frames * s->stride;
	/* In frames, so that pw_time.queued counts frames. */
	b->size = frames;
	pw_stream_queue_buffer(s->stream, b);
}

static const struct pw_stream_events stream_events = {
	PW_VERSION_STREAM_EVENTS,
	.state_changed = on_state_changed,
	.param_changed = on_param_changed,
	.process = on_process,
};

static void on_core_error(void *data, uint32_t id, int seq, int res, const char *message)
{
	struct rampd_pw_stream *s = data;
	(void)seq;
	if (id != PW_ID_CORE)
		return;
	if (!s->failed) {
		s->failed = 1;
		snprintf(s->error, sizeof s->error, "PipeWire: %s (%s)", message ? message : "error", spa_strerror(res));
	}
	if (s->event)
		s->event(s->user, RAMPD_PW_EVENT_CORE_ERROR, res, message);
	pw_thread_loop_signal(s->loop, false);
}

static const struct pw_core_events core_events = {
	PW_VERSION_CORE_EVENTS,
	.error = on_core_error,
};

static void fail(char *error, size_t size, const char *what, int code)
{
	if (error && size)
		snprintf(error, size, "%s: %s", what, spa_strerror(code));
}

void rampd_pw_stream_close(rampd_pw_stream *s)
{
	if (s == NULL)
		return;
	if (s->loop) {
		pw_thread_loop_lock(s->loop);
		if (s->activation) {
			pw_loop_destroy_source(pw_thread_loop_get_loop(s->loop), s->activation);
			s->activation = NULL;
		}
		if (s->stream) {
			spa_hook_remove(&s->stream_listener);
			pw_stream_disconnect(s->stream);
			pw_stream_destroy(s->stream);
			s->stream = NULL;
		}
		if (s->core) {
			spa_hook_remove(&s->core_listener);
			pw_core_disconnect(s->core);
			s->core = NULL;
		}
		pw_thread_loop_unlock(s->loop);
		pw_thread_loop_stop(s->loop);
	}
	if (s->context)
		pw_context_destroy(s->context);
	if (s->loop)
		pw_thread_loop_destroy(s->loop);
	if (s->initialized)
		pw_deinit();
	free(s);
}

rampd_pw_stream *rampd_pw_stream_open(const rampd_pw_params *params, rampd_pw_render_fn render,
				      rampd_pw_event_fn event, void *context, rampd_pw_format *format,
				      char *error, size_t error_size)
{
	if (params->channels == 0 || params->channels > SPA_AUDIO_MAX_CHANNELS || params->rate == 0 || render == NULL) {
		fail(error, error_size, "rampd_pw_stream_open", -EINVAL);
		return NULL;
	}
	struct rampd_pw_stream *s = calloc(1, sizeof *s);
	if (s == NULL) {
		fail(error, error_size, "calloc", -ENOMEM);
		return NULL;
	}
	s->render = render;
	s->event = event;
	s->user = context;
	s->channels = params->channels;
	s->stride = (uint32_t)sizeof(float) * params->channels;
	pw_init(NULL, NULL);
	s->initialized = 1;

	const char *name = params->node_name ? params->node_name : "rampd";
	s->loop = pw_thread_loop_new("rampd-pipewire", NULL);
	if (s->loop == NULL) {
		fail(error, error_size, "pw_thread_loop_new", -errno);
		goto failed;
	}
	s->context = pw_context_new(pw_thread_loop_get_loop(s->loop), NULL, 0);
	if (s->context == NULL) {
		fail(error, error_size, "pw_context_new", -errno);
		goto failed;
	}
	if (pw_thread_loop_start(s->loop) < 0) {
		fail(error, error_size, "pw_thread_loop_start", -errno);
		goto failed;
	}
	pw_thread_loop_lock(s->loop);
	s->core = pw_context_connect(s->context, NULL, 0);
	if (s->core == NULL) {
		int code = -errno;
		pw_thread_loop_unlock(s->loop);
		fail(error, error_size, "no PipeWire server (pw_context_connect)", code);
		goto failed;
	}
	pw_core_add_listener(s->core, &s->core_listener, &core_events, s);

	struct pw_properties *props = pw_properties_new(
		PW_KEY_MEDIA_TYPE, "Audio", PW_KEY_MEDIA_CATEGORY, "Playback", PW_KEY_NODE_NAME, name,
		PW_KEY_APP_NAME, name, NULL);
	if (props == NULL) {
		int code = -errno;
		pw_thread_loop_unlock(s->loop);
		fail(error, error_size, "pw_properties_new", code);
		goto failed;
	}
	if (params->role)
		pw_properties_set(props, PW_KEY_MEDIA_ROLE, params->role);
	if (params->latency_frames)
		pw_properties_setf(props, PW_KEY_NODE_LATENCY, "%u/%u", params->latency_frames, params->rate);
	if (params->target)
		pw_properties_set(props, PW_KEY_TARGET_OBJECT, params->target);
	/* pw_stream_new takes the properties, also when it fails. */
	s->stream = pw_stream_new(s->core, name, props);
	if (s->stream == NULL) {
		int code = -errno;
		pw_thread_loop_unlock(s->loop);
		fail(error, error_size, "pw_stream_new", code);
		goto failed;
	}
	pw_stream_add_listener(s->stream, &s->stream_listener, &stream_events, s);

	uint8_t buffer[1024];
	struct spa_pod_builder builder = SPA_POD_BUILDER_INIT(buffer, sizeof buffer);
	struct spa_audio_info_raw info;
	memset(&info, 0, sizeof info);
	info.format = SPA_AUDIO_FORMAT_F32;
	info.rate = params->rate;
	info.channels = params->channels;
	if (params->channels == 1) {
		info.position[0] = SPA_AUDIO_CHANNEL_MONO;
	} else if (params->channels == 2) {
		info.position[0] = SPA_AUDIO_CHANNEL_FL;
		info.position[1] = SPA_AUDIO_CHANNEL_FR;
	} else {
		info.flags = SPA_AUDIO_FLAG_UNPOSITIONED;
	}
	const struct spa_pod *formats[1];
	formats[0] = spa_format_audio_raw_build(&builder, SPA_PARAM_EnumFormat, &info);
	int res = pw_stream_connect(s->stream, PW_DIRECTION_OUTPUT, PW_ID_ANY,
				    PW_STREAM_FLAG_AUTOCONNECT | PW_STREAM_FLAG_MAP_BUFFERS | PW_STREAM_FLAG_RT_PROCESS,
				    formats, 1);
	if (res < 0) {
		pw_thread_loop_unlock(s->loop);
		fail(error, error_size, "pw_stream_connect", res);
		goto failed;
	}
	struct timespec deadline;
	pw_thread_loop_get_time(s->loop, &deadline, (int64_t)(params->timeout_ms ? params->timeout_ms : 5000) * SPA_NSEC_PER_MSEC);
	while (!s->format_known && !s->failed) {
		if (pw_thread_loop_timed_wait_full(s->loop, &deadline) != 0)
			break;
	}
	if (!s->format_known || s->failed) {
		if (error && error_size)
			snprintf(error, error_size, "%s", s->failed ? s->error : "no format negotiated in time (no sink?)");
		pw_thread_loop_unlock(s->loop);
		goto failed;
	}
	s->is_active = 1;
	atomic_store_explicit(&s->want_active, 1, memory_order_relaxed);
	s->activation = pw_loop_add_event(pw_thread_loop_get_loop(s->loop), on_activation, s);
	if (s->activation == NULL) {
		int code = -errno;
		pw_thread_loop_unlock(s->loop);
		fail(error, error_size, "pw_loop_add_event", code);
		goto failed;
	}
	if (format)
		*format = s->format;
	pw_thread_loop_unlock(s->loop);
	return s;

failed:
	rampd_pw_stream_close(s);
	return NULL;
}

void rampd_pw_stream_request_active(rampd_pw_stream *s, int active)
{
	atomic_store_explicit(&s->want_active, active != 0, memory_order_release);
	/* An eventfd write: no lock, no allocation. */
	pw_loop_signal_event(pw_thread_loop_get_loop(s->loop), s->activation);
}

const char *rampd_pw_library_version(void)
{
	return pw_get_library_version();
}
