/*
 * A recorder of a PipeWire sink that says, by the graph's clock, when each frame it records was
 * played: pw-record writes samples only, so a recording cannot tell when the sink played them.
 *
 *   pw_clock_recorder SINK QUANTUM SECONDS CLICKS OUT
 *
 * Two streams of its own, both real-time (PW_STREAM_FLAG_RT_PROCESS) and both in the sink's
 * graph at 48 kHz stereo float, asking for a quantum of QUANTUM frames (node.latency):
 *   - a capture of SINK's monitor: for every cycle, the graph's clock (pw_stream_get_time_n's
 *     now, ticks, rate) and the frames it got; the left channel's samples go to OUT.raw;
 *   - a playback into SINK that writes CLICKS single frames of 1.0 (the first frame of every
 *     25th cycle, from the 10th) and silence otherwise, and keeps when PipeWire says each click is
 *     heard: now + delay (graph time) + (queued + buffered) frames, as its documentation says.
 * The clicks calibrate the monitor: the same recording shows where they landed, so a test learns
 * how far behind the sink the monitor hands its frames over (a cycle, on PipeWire 0.3.65: so the
 * quantum must not change after the clicks).
 *
 * It runs until SIGTERM or SIGINT, or SECONDS seconds at most, then writes OUT (text): a line per capture cycle
 * `cycle NOW_NS TICKS FRAMES FIRST_FRAME` and a line per click `click HEARD_NS`. Exit status 0,
 * or 1 with a message when a stream failed or a buffer overflowed.
 */
#include <pipewire/pipewire.h>
#include <spa/param/audio/format-utils.h>
#include <spa/pod/builder.h>

#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RATE 48000
#define CHANNELS 2
#define MAX_CYCLES 100000
#define MAX_CLICKS 1000

struct cycle {
	int64_t now;
	uint64_t ticks;
	uint32_t frames;
	uint64_t first;
};

static struct pw_stream *capture, *player;
static struct cycle *cycles;
static atomic_uint cycle_count;
static float *samples;
static uint64_t sample_capacity, sample_count;
static int64_t clicks[MAX_CLICKS];
static atomic_uint click_count;
static unsigned clicks_wanted, play_cycles;
static atomic_int failed;
static char latency[64];

static void on_capture(void *data)
{
	(void)data;
	struct pw_buffer *b = pw_stream_dequeue_buffer(capture);
	if (b == NULL)
		return;
	struct spa_data *d = &b->buffer->datas[0];
	struct pw_time time;
	memset(&time, 0, sizeof time);
	pw_stream_get_time_n(capture, &time, sizeof time);
	uint32_t frames = d->data == NULL ? 0 : d->chunk->size / (sizeof(float) * CHANNELS);
	unsigned index = atomic_load(&cycle_count);
	if (index >= MAX_CYCLES || sample_count + frames > sample_capacity) {
		atomic_store(&failed, 1);
	} else {
		const float *in = (const float *)((const char *)d->data + d->chunk->offset);
		for (uint32_t i = 0; i < frames; i++)
			samples[sample_count + i] = in[i * CHANNELS];
		cycles[index] = (struct cycle){time.now, time.ticks, frames, sample_count};
		sample_count += frames;
		atomic_store(&cycle_count, index + 1);
	}
	pw_stream_queue_buffer(capture, b);
}

static void on_play(void *data)
{
	(void)data;
	struct pw_buffer *b = pw_stream_dequeue_buffer(player);
	if (b == NULL)
		return;
	struct spa_data *d = &b->buffer->datas[0];
	uint32_t stride = sizeof(float) * CHANNELS;
	uint32_t frames = d->data == NULL ? 0 : d->maxsize / stride;
	if (b->requested != 0 && b->requested < frames)
		frames = (uint32_t)b->requested;
	if (frames > 0) {
		memset(d->data, 0, frames * stride);
		unsigned made = atomic_load(&click_count);
		if (play_cycles >= 10 && (play_cycles - 10) % 25 == 0 && made < clicks_wanted) {
			struct pw_time time;
			memset(&time, 0, sizeof time);
			pw_stream_get_time_n(player, &time, sizeof time);
			double graph = time.rate.denom == 0
				? 0 : (double)time.delay * time.rate.num * 1e9 / time.rate.denom;
			double ahead = (double)(time.queued + time.buffered) * 1e9 / RATE;
			clicks[made] = time.now + (int64_t)(graph + ahead + 0.5);
			float *out = d->data;
			for (int c = 0; c < CHANNELS; c++)
				out[c] = 1.0f;
			atomic_store(&click_count, made + 1);
		}
		play_cycles++;
	}
	d->chunk->offset = 0;
	d->chunk->stride = (int32_t)stride;
	d->chunk->size = frames * stride;
	/* In frames, so that pw_time.queued counts frames. */
	b->size = frames;
	pw_stream_queue_buffer(player, b);
}

static void on_state(void *data, enum pw_stream_state old, enum pw_stream_state state, const char *error)
{
	(void)data;
	(void)old;
	if (state == PW_STREAM_STATE_ERROR) {
		fprintf(stderr, "pw_clock_recorder: a stream failed: %s\n", error ? error : "");
		atomic_store(&failed, 1);
	}
}

static const struct pw_stream_events capture_events = {
	PW_VERSION_STREAM_EVENTS, .state_changed = on_state, .process = on_capture};
static const struct pw_stream_events play_events = {
	PW_VERSION_STREAM_EVENTS, .state_changed = on_state, .process = on_play};

static struct pw_stream *connect_stream(
	struct pw_thread_loop *loop, const char *name, const char *sink, int capture_sink,
	const struct pw_stream_events *events, enum spa_direction direction)
{
	struct pw_properties *props = pw_properties_new(
		PW_KEY_MEDIA_TYPE, "Audio", PW_KEY_MEDIA_CATEGORY, direction == SPA_DIRECTION_INPUT ? "Capture" : "Playback",
		PW_KEY_TARGET_OBJECT, sink, PW_KEY_NODE_NAME, name, PW_KEY_NODE_LATENCY, latency, NULL);
	if (capture_sink)
		pw_properties_set(props, PW_KEY_STREAM_CAPTURE_SINK, "true");
	struct pw_stream *stream = pw_stream_new_simple(pw_thread_loop_get_loop(loop), name, props, events, NULL);
	uint8_t buffer[1024];
	struct spa_pod_builder builder = SPA_POD_BUILDER_INIT(buffer, sizeof buffer);
	struct spa_audio_info_raw info = {.format = SPA_AUDIO_FORMAT_F32, .rate = RATE, .channels = CHANNELS};
	info.position[0] = SPA_AUDIO_CHANNEL_FL;
	info.position[1] = SPA_AUDIO_CHANNEL_FR;
	const struct spa_pod *params[1] = {spa_format_audio_raw_build(&builder, SPA_PARAM_EnumFormat, &info)};
	pw_stream_connect(stream, direction, PW_ID_ANY,
		PW_STREAM_FLAG_AUTOCONNECT | PW_STREAM_FLAG_MAP_BUFFERS | PW_STREAM_FLAG_RT_PROCESS, params, 1);
	return stream;
}

int main(int argc, char *argv[])
{
	if (argc != 6) {
		fprintf(stderr, "usage: pw_clock_recorder SINK QUANTUM SECONDS CLICKS OUT\n");
		return 64;
	}
	const char *sink = argv[1], *out = argv[5];
	snprintf(latency, sizeof latency, "%d/%d", atoi(argv[2]), RATE);
	double seconds = atof(argv[3]);
	clicks_wanted = (unsigned)atoi(argv[4]);
	if (clicks_wanted > MAX_CLICKS)
		clicks_wanted = MAX_CLICKS;
	sample_capacity = (uint64_t)((seconds + 2) * RATE);
	samples = calloc(sample_capacity, sizeof(float));
	cycles = calloc(MAX_CYCLES, sizeof(struct cycle));
	if (samples == NULL || cycles == NULL)
		return 1;

	/* Blocked here, so in every thread PipeWire starts: the main thread waits for them. */
	sigset_t stop;
	sigemptyset(&stop);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGINT);
	pthread_sigmask(SIG_BLOCK, &stop, NULL);

	pw_init(&argc, &argv);
	struct pw_thread_loop *loop = pw_thread_loop_new("clock-recorder", NULL);
	pw_thread_loop_lock(loop);
	pw_thread_loop_start(loop);
	capture = connect_stream(loop, "rampd-test-clock-recorder", sink, 1, &capture_events, SPA_DIRECTION_INPUT);
	player = connect_stream(loop, "rampd-test-clicker", sink, 0, &play_events, SPA_DIRECTION_OUTPUT);
	pw_thread_loop_unlock(loop);

	struct timespec most = {(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)};
	sigtimedwait(&stop, NULL, &most);

	pw_thread_loop_lock(loop);
	pw_stream_destroy(capture);
	pw_stream_destroy(player);
	pw_thread_loop_unlock(loop);
	pw_thread_loop_stop(loop);

	char raw[4096];
	snprintf(raw, sizeof raw, "%s.raw", out);
	FILE *text = fopen(out, "w"), *binary = fopen(raw, "wb");
	if (text == NULL || binary == NULL) {
		perror("pw_clock_recorder: cannot write");
		return 1;
	}
	unsigned count = atomic_load(&cycle_count);
	for (unsigned i = 0; i < count; i++)
		fprintf(text, "cycle %lld %llu %u %llu\n", (long long)cycles[i].now,
			(unsigned long long)cycles[i].ticks, cycles[i].frames, (unsigned long long)cycles[i].first);
	unsigned made = atomic_load(&click_count);
	for (unsigned i = 0; i < made; i++)
		fprintf(text, "click %lld\n", (long long)clicks[i]);
	fwrite(samples, sizeof(float), sample_count, binary);
	fclose(text);
	fclose(binary);
	pw_thread_loop_destroy(loop);
	pw_deinit();
	if (atomic_load(&failed)) {
		fprintf(stderr, "pw_clock_recorder: a stream failed or the recording overflowed\n");
		return 1;
	}
	return 0;
}
