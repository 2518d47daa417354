#include <alsa/asoundlib.h>
#include <stdarg.h>
#include <stdio.h>

/* alsa-lib reports its errors through a variadic handler (snd_lib_error_handler_t), which Swift
 * cannot implement: this one formats each message into one line,
 * `confmisc.c:855:(parse_card) cannot find card '0'` (with `: <strerror>` when it gives an errno),
 * and hands it to the sink set by rampd_alsa_route_errors. */
typedef void (*rampd_alsa_error_sink)(const char *message);

/* The sink: set once, before alsa-lib is used, and read by the handler. (A static local, which
 * the Swift module that calls rampd_alsa_route_errors, RampAudio, emits with the function.) */
static inline rampd_alsa_error_sink *rampd_alsa_sink(void)
{
	static rampd_alsa_error_sink sink;
	return &sink;
}

/* Set on the render thread, which may not format, lock or log: alsa-lib's messages raised there
 * (snd_pcm_recover's when a prepare fails) are dropped; the failed write's error code says what
 * went wrong, and is put in words on another thread. */
static inline int *rampd_alsa_quiet_here(void)
{
	static __thread int quiet;
	return &quiet;
}

static inline void rampd_alsa_quiet_on_this_thread(void)
{
	*rampd_alsa_quiet_here() = 1;
}

static void rampd_alsa_error_handler(const char *file, int line, const char *function, int err, const char *fmt, ...)
{
	if (*rampd_alsa_quiet_here())
		return;
	char message[1024];
	int length = snprintf(message, sizeof message, "%s:%d:(%s) ", file ? file : "?", line, function ? function : "?");
	if (length < 0 || (size_t)length >= sizeof message)
		length = 0;
	va_list arguments;
	va_start(arguments, fmt);
	int more = vsnprintf(message + length, sizeof message - (size_t)length, fmt ? fmt : "", arguments);
	va_end(arguments);
	if (more > 0)
		length += more;
	if (err != 0 && (size_t)length < sizeof message)
		snprintf(message + length, sizeof message - (size_t)length, ": %s", snd_strerror(err));
	rampd_alsa_error_sink sink = *rampd_alsa_sink();
	if (sink)
		sink(message);
}

/* Routes alsa-lib's error messages to `sink`, one line each, instead of standard error; NULL
 * restores alsa-lib's own handler (standard error). Returns what snd_lib_error_set_handler does. */
static inline int rampd_alsa_route_errors(rampd_alsa_error_sink sink)
{
	*rampd_alsa_sink() = sink;
	return snd_lib_error_set_handler(sink ? rampd_alsa_error_handler : NULL);
}
