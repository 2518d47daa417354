#ifndef RAMPD_PIPEWIRE_SHIM_H
#define RAMPD_PIPEWIRE_SHIM_H
/* A PipeWire playback stream (pw_stream on a pw_thread_loop) behind plain C types: the SPA pod
   builders it needs are macros and inline functions, which Swift cannot call. */
#include <stddef.h>
#include <stdint.h>

/* What pw_stream_get_time_n says in the cycle a block is asked for (see pipewire/stream.h):
   `now` (CLOCK_MONOTONIC ns) is when the graph's clock read `ticks`; `delay` (in
   rate_num/rate_denom units) is how long the stream's next sample takes through the graph to the
   device; `queued` (frames: the shim sets each buffer's size in frames) and `buffered` (frames in
   the resampler) are what the stream still holds ahead of the block. */
typedef struct rampd_pw_timing {
	int64_t now;
	uint32_t rate_num;
	uint32_t rate_denom;
	uint64_t ticks;
	int64_t delay;
	uint64_t queued;
	uint64_t buffered;
	uint32_t queued_buffers;
	uint32_t avail_buffers;
	/* Cycles since the last render in which the stream had no free buffer to fill: the sink
	   played what was queued, so they are no gap. */
	uint32_t missed_cycles;
} rampd_pw_timing;

/* Called on PipeWire's real-time data thread for each buffer: fill `frames` interleaved frames of
   `channels` floats at `data`. It must not allocate, lock or block. */
typedef void (*rampd_pw_render_fn)(void *context, float *data, uint32_t frames, uint32_t channels,
				   const rampd_pw_timing *timing);

enum rampd_pw_event_kind {
	/* `value` is the new pw_stream_state (rampd_pw_state), `message` its error text or NULL. */
	RAMPD_PW_EVENT_STATE = 1,
	/* `value` is the (negative errno) result of a core error, `message` its text. */
	RAMPD_PW_EVENT_CORE_ERROR = 2,
};

/* pw_stream_state's values. */
enum rampd_pw_state {
	RAMPD_PW_STATE_ERROR = -1,
	RAMPD_PW_STATE_UNCONNECTED = 0,
	RAMPD_PW_STATE_CONNECTING = 1,
	RAMPD_PW_STATE_PAUSED = 2,
	RAMPD_PW_STATE_STREAMING = 3,
};

/* Called on the thread loop's thread, with its lock held: must return at once (hand the event on)
   and must not call back into this shim. `message` lives only for the call. */
typedef void (*rampd_pw_event_fn)(void *context, int kind, int value, const char *message);

typedef struct rampd_pw_params {
	uint32_t rate;
	uint32_t channels;
	/* node.latency as `latency/rate`; 0 leaves it to the graph. */
	uint32_t latency_frames;
	const char *role;        /* media.role, NULL for none */
	const char *target;      /* target.object, NULL for the default sink */
	const char *node_name;   /* node.name and application.name, NULL for "rampd" */
	/* How long open waits for the format to be negotiated, in milliseconds. */
	uint32_t timeout_ms;
} rampd_pw_params;

typedef struct rampd_pw_format {
	uint32_t rate;
	uint32_t channels;
	uint32_t node_id;
} rampd_pw_format;

typedef struct rampd_pw_stream rampd_pw_stream;

/* Connects to the PipeWire server (PIPEWIRE_REMOTE or the default), makes the stream and waits
   until its format is negotiated. NULL on failure, with why in `error`. The callbacks may run
   from before this returns until rampd_pw_stream_close returns. */
rampd_pw_stream *rampd_pw_stream_open(const rampd_pw_params *params, rampd_pw_render_fn render,
				      rampd_pw_event_fn event, void *context, rampd_pw_format *format,
				      char *error, size_t error_size);

/* Asks for pw_stream_set_active, applied on the loop's thread soon after: an inactive stream is
   not asked for data, so its sink may suspend. Takes no lock and allocates nothing, so the
   render thread may ask (at its idle edges); the last wish wins. */
void rampd_pw_stream_request_active(rampd_pw_stream *stream, int active);

/* Disconnects and destroys the stream, stops the loop, lets go of the server. No callback runs
   after it returns. */
void rampd_pw_stream_close(rampd_pw_stream *stream);

/* The version of libpipewire loaded (pw_get_library_version). */
const char *rampd_pw_library_version(void);

#endif
