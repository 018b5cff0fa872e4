/*
 * cpgbench: one member of a Corosync CPG group under a fixed workload (issue 18).
 *
 * Every member joins the group, waits until the group holds --members processes, and
 * then receives every message for the whole run. A sender (--id below --senders)
 * multicasts --bytes-byte CPG_TYPE_AGREED messages as fast as Corosync takes them
 * (CS_ERR_TRY_AGAIN is Corosync's flow control: wait for the group's traffic, dispatch,
 * retry) for warm-up + measure + cool-down seconds, then one DONE message carrying how
 * many it sent. A member stops once it holds a DONE from every sender.
 *
 * Each message carries its sender's id, a sequence number and its send time on
 * CLOCK_MONOTONIC, which is one clock for the whole host, network namespaces included,
 * so the delivery latency is measured at every member. Only messages delivered inside
 * the measure window [start + warm-up, start + warm-up + measure) count towards the rate
 * and the latency percentiles; "start" is when this member saw the full membership.
 *
 * Checks: per sender, sequence numbers arrive without gap or duplicate
 * (order_violations), every message a sender reported sending arrived (missing), and a
 * digest over the (sender, seq) sequence of all delivered messages, equal at every member
 * when they delivered one total order.
 *
 * Output: one JSON line on stdout; diagnostics on stderr. Exit 0 when the run completed
 * (the caller judges the figures), 1 on a bad argument, 2 on a Corosync error, 3 when
 * the group did not form or a DONE did not come in time.
 *
 * Build: cc -O2 -Wall -Wextra -o cpgbench cpgbench.c -lcpg
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <corosync/corotypes.h>
#include <corosync/cpg.h>

#define MSG_MAGIC 0x43504742u /* "CPGB" */
#define KIND_DATA 1u
#define KIND_DONE 2u
#define SENDERS_MAX 64u
#define MEMBERS_MAX 64u
#define BYTES_MAX (1u << 20)
/* Messages sent back to back before the receive side is drained. */
#define SEND_BURST 64
/* Latency samples kept at most (4 bytes each); beyond, the window's rate still counts. */
#define SAMPLES_MAX (64u << 20)

#define EXIT_USAGE 1
#define EXIT_COROSYNC 2
#define EXIT_TIMEOUT 3

struct msg_header {
	uint32_t magic;
	uint32_t kind;
	uint32_t sender;
	uint32_t reserved;
	uint64_t seq;
	uint64_t send_ns;
	uint64_t sent_total; /* DONE only: data messages this sender sent */
};

struct peer {
	uint64_t next_seq;  /* the sequence number expected next */
	uint64_t received;  /* data messages delivered from this sender */
	uint64_t sent_total;
	int done;
};

struct options {
	const char *group;
	unsigned members;
	unsigned senders;
	unsigned id;
	unsigned bytes;
	double warmup_s;
	double measure_s;
	double cooldown_s;
	double join_timeout_s;
	double done_timeout_s;
};

static struct {
	struct options opt;
	uint64_t start_ns;      /* when this member saw the full membership; 0 before */
	uint64_t window_begin_ns;
	uint64_t window_end_ns;
	size_t member_count;
	unsigned membership_changes; /* after start, before every DONE was in */
	unsigned dones;
	struct peer peers[SENDERS_MAX];
	uint64_t order_violations;
	uint64_t foreign;       /* messages that are not ours: bad magic, size or sender */
	uint64_t received_total;
	uint64_t received_window;
	uint64_t bytes_window;
	uint64_t digest;
	uint32_t *samples;
	size_t samples_len;
	size_t samples_cap;
	uint64_t samples_dropped;
	uint64_t latency_ns_max;
} st;

static void die(int code, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "cpgbench: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(code);
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) {
		die(EXIT_COROSYNC, "clock_gettime(CLOCK_MONOTONIC): %s", strerror(errno));
	}
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t seconds_ns(double s)
{
	return (uint64_t)(s * 1e9);
}

/* FNV-1a over the bytes of one (sender, seq) pair, chained. */
static void digest_add(uint32_t sender, uint64_t seq)
{
	unsigned char b[12];
	memcpy(b, &sender, 4);
	memcpy(b + 4, &seq, 8);
	for (size_t i = 0; i < sizeof b; i++) {
		st.digest ^= b[i];
		st.digest *= 1099511628211ull;
	}
}

static void sample_add(uint64_t latency_ns)
{
	if (latency_ns > st.latency_ns_max) {
		st.latency_ns_max = latency_ns;
	}
	if (st.samples_len == st.samples_cap) {
		size_t cap = st.samples_cap ? st.samples_cap * 2 : 1u << 16;
		if (cap > SAMPLES_MAX) {
			cap = SAMPLES_MAX;
		}
		if (cap == st.samples_cap) {
			st.samples_dropped++;
			return;
		}
		uint32_t *p = realloc(st.samples, cap * sizeof *p);
		if (p == NULL) {
			st.samples_dropped++;
			return;
		}
		st.samples = p;
		st.samples_cap = cap;
	}
	uint64_t us = latency_ns / 1000u;
	st.samples[st.samples_len++] = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
}

static void deliver_fn(cpg_handle_t handle, const struct cpg_name *group, uint32_t nodeid,
		       uint32_t pid, void *msg, size_t msg_len)
{
	(void)handle;
	(void)group;
	(void)nodeid;
	(void)pid;
	struct msg_header h;
	if (msg_len < sizeof h) {
		st.foreign++;
		return;
	}
	memcpy(&h, msg, sizeof h);
	if (h.magic != MSG_MAGIC || h.sender >= st.opt.senders) {
		st.foreign++;
		return;
	}
	struct peer *p = &st.peers[h.sender];
	if (h.kind == KIND_DONE) {
		if (!p->done) {
			p->done = 1;
			p->sent_total = h.sent_total;
			st.dones++;
		}
		return;
	}
	if (h.kind != KIND_DATA || msg_len != st.opt.bytes) {
		st.foreign++;
		return;
	}
	uint64_t now = now_ns();
	if (h.seq != p->next_seq) {
		st.order_violations++;
	}
	if (h.seq >= p->next_seq) {
		p->next_seq = h.seq + 1;
	}
	p->received++;
	st.received_total++;
	digest_add(h.sender, h.seq);
	if (st.start_ns != 0 && now >= st.window_begin_ns && now < st.window_end_ns) {
		st.received_window++;
		st.bytes_window += msg_len;
		sample_add(now >= h.send_ns ? now - h.send_ns : 0);
	}
}

static void confchg_fn(cpg_handle_t handle, const struct cpg_name *group,
		       const struct cpg_address *members, size_t members_len,
		       const struct cpg_address *left, size_t left_len,
		       const struct cpg_address *joined, size_t joined_len)
{
	(void)handle;
	(void)group;
	(void)members;
	(void)left;
	(void)left_len;
	(void)joined;
	(void)joined_len;
	st.member_count = members_len;
	if (st.start_ns != 0 && st.dones < st.opt.senders) {
		st.membership_changes++;
	}
}

static cpg_callbacks_t callbacks = {
	.cpg_deliver_fn = deliver_fn,
	.cpg_confchg_fn = confchg_fn,
};

/* Waits up to timeout_ms for the group's traffic, then runs every pending callback. */
static void pump(cpg_handle_t handle, int fd, int timeout_ms)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	int rc = poll(&pfd, 1, timeout_ms);
	if (rc < 0 && errno != EINTR) {
		die(EXIT_COROSYNC, "poll on the CPG descriptor: %s", strerror(errno));
	}
	if (rc > 0 && (pfd.revents & (POLLERR | POLLHUP | POLLNVAL))) {
		die(EXIT_COROSYNC, "the CPG connection to corosync closed (revents 0x%x)",
		    (unsigned)pfd.revents);
	}
	cs_error_t err = cpg_dispatch(handle, CS_DISPATCH_ALL);
	if (err != CS_OK && err != CS_ERR_TRY_AGAIN) {
		die(EXIT_COROSYNC, "cpg_dispatch: corosync error %d", (int)err);
	}
}

/* One multicast; CS_ERR_TRY_AGAIN is returned to the caller, anything else ends us. */
static cs_error_t mcast(cpg_handle_t handle, const void *buf, size_t len)
{
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
	cs_error_t err = cpg_mcast_joined(handle, CPG_TYPE_AGREED, &iov, 1);
	if (err != CS_OK && err != CS_ERR_TRY_AGAIN) {
		die(EXIT_COROSYNC, "cpg_mcast_joined: corosync error %d", (int)err);
	}
	return err;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a;
	uint32_t y = *(const uint32_t *)b;
	return (x > y) - (x < y);
}

/* Nearest-rank percentile of the sorted samples; 0 without samples. */
static uint32_t percentile(double p)
{
	if (st.samples_len == 0) {
		return 0;
	}
	size_t rank = (size_t)(p / 100.0 * (double)st.samples_len + 0.999999);
	if (rank == 0) {
		rank = 1;
	}
	if (rank > st.samples_len) {
		rank = st.samples_len;
	}
	return st.samples[rank - 1];
}

static double parse_seconds(const char *name, const char *s, double min, double max)
{
	char *end = NULL;
	errno = 0;
	double v = strtod(s, &end);
	if (errno != 0 || end == s || *end != '\0' || !(v >= min && v <= max)) {
		die(EXIT_USAGE, "--%s %s: want seconds from %g to %g", name, s, min, max);
	}
	return v;
}

static unsigned parse_uint(const char *name, const char *s, unsigned min, unsigned max)
{
	char *end = NULL;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || s[0] == '-' || v < min || v > max) {
		die(EXIT_USAGE, "--%s %s: want a whole number from %u to %u", name, s, min, max);
	}
	return (unsigned)v;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: cpgbench --group NAME --members N --senders K --id I [--bytes S]\n"
		"                [--warmup SEC] [--measure SEC] [--cooldown SEC]\n"
		"                [--join-timeout SEC] [--done-timeout SEC]\n"
		"  members 0..K-1 send, every member receives; prints one JSON line.\n");
}

static void parse_args(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "group", required_argument, NULL, 'g' },
		{ "members", required_argument, NULL, 'm' },
		{ "senders", required_argument, NULL, 's' },
		{ "id", required_argument, NULL, 'i' },
		{ "bytes", required_argument, NULL, 'b' },
		{ "warmup", required_argument, NULL, 'w' },
		{ "measure", required_argument, NULL, 'd' },
		{ "cooldown", required_argument, NULL, 'c' },
		{ "join-timeout", required_argument, NULL, 'j' },
		{ "done-timeout", required_argument, NULL, 't' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct options *o = &st.opt;
	o->group = NULL;
	o->members = 0;
	o->senders = 0;
	o->id = UINT32_MAX;
	o->bytes = 1024;
	o->warmup_s = 1.0;
	o->measure_s = 10.0;
	o->cooldown_s = 0.5;
	o->join_timeout_s = 60.0;
	o->done_timeout_s = 20.0;
	int c;
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case 'g': o->group = optarg; break;
		case 'm': o->members = parse_uint("members", optarg, 1, MEMBERS_MAX); break;
		case 's': o->senders = parse_uint("senders", optarg, 1, SENDERS_MAX); break;
		case 'i': o->id = parse_uint("id", optarg, 0, MEMBERS_MAX - 1); break;
		case 'b':
			o->bytes = parse_uint("bytes", optarg, (unsigned)sizeof(struct msg_header),
					      BYTES_MAX);
			break;
		case 'w': o->warmup_s = parse_seconds("warmup", optarg, 0, 3600); break;
		case 'd': o->measure_s = parse_seconds("measure", optarg, 0.1, 3600); break;
		case 'c': o->cooldown_s = parse_seconds("cooldown", optarg, 0, 3600); break;
		case 'j': o->join_timeout_s = parse_seconds("join-timeout", optarg, 0.1, 3600); break;
		case 't': o->done_timeout_s = parse_seconds("done-timeout", optarg, 0.1, 3600); break;
		case 'h': usage(); exit(0);
		default: usage(); exit(EXIT_USAGE);
		}
	}
	if (optind != argc) {
		usage();
		die(EXIT_USAGE, "unexpected argument %s", argv[optind]);
	}
	if (o->group == NULL || o->group[0] == '\0' || strlen(o->group) > CPG_MAX_NAME_LENGTH) {
		die(EXIT_USAGE, "--group NAME is required, 1 to %d bytes", CPG_MAX_NAME_LENGTH);
	}
	if (o->members == 0 || o->senders == 0 || o->id == UINT32_MAX) {
		usage();
		die(EXIT_USAGE, "--members, --senders and --id are required");
	}
	if (o->senders > o->members || o->id >= o->members) {
		die(EXIT_USAGE, "want senders <= members and id < members (got %u senders, id %u, "
			"%u members)", o->senders, o->id, o->members);
	}
}

/* cpg_initialize, retried while corosync is still starting (its IPC is not up yet). */
static cpg_handle_t connect_group(uint64_t deadline_ns)
{
	cpg_handle_t handle;
	cs_error_t err;
	for (;;) {
		err = cpg_initialize(&handle, &callbacks);
		if (err == CS_OK) {
			break;
		}
		if (now_ns() >= deadline_ns) {
			die(EXIT_TIMEOUT, "cpg_initialize: corosync error %d until the join timeout "
				"(%.1f s): is corosync running in this network namespace?",
			    (int)err, st.opt.join_timeout_s);
		}
		usleep(100 * 1000);
	}
	struct cpg_name name;
	memset(&name, 0, sizeof name);
	name.length = (uint32_t)strlen(st.opt.group);
	memcpy(name.value, st.opt.group, name.length);
	for (;;) {
		err = cpg_join(handle, &name);
		if (err == CS_OK) {
			break;
		}
		if (err != CS_ERR_TRY_AGAIN || now_ns() >= deadline_ns) {
			die(EXIT_COROSYNC, "cpg_join(%s): corosync error %d", st.opt.group, (int)err);
		}
		usleep(10 * 1000);
	}
	return handle;
}

static void print_report(uint64_t sent, uint64_t sent_window, uint64_t try_again)
{
	qsort(st.samples, st.samples_len, sizeof *st.samples, cmp_u32);
	double window_s = st.opt.measure_s;
	uint64_t missing = 0;
	for (unsigned s = 0; s < st.opt.senders; s++) {
		const struct peer *p = &st.peers[s];
		if (p->done && p->sent_total > p->received) {
			missing += p->sent_total - p->received;
		}
	}
	printf("{\"id\":%u,\"members\":%u,\"senders\":%u,\"sender\":%s,\"bytes\":%u,"
	       "\"window_s\":%.3f,\"received_window\":%" PRIu64 ",\"msgs_per_s\":%.1f,"
	       "\"mbit_per_s\":%.3f,\"latency_us_p50\":%" PRIu32 ",\"latency_us_p99\":%" PRIu32
	       ",\"latency_us_max\":%" PRIu64 ",\"latency_samples\":%zu,"
	       "\"received_total\":%" PRIu64 ",\"sent\":%" PRIu64 ",\"sent_window\":%" PRIu64
	       ",\"try_again\":%" PRIu64 ",\"order_violations\":%" PRIu64 ",\"missing\":%" PRIu64
	       ",\"foreign\":%" PRIu64 ",\"membership_changes\":%u,\"dones\":%u,"
	       "\"digest\":\"%016" PRIx64 "\"}\n",
	       st.opt.id, st.opt.members, st.opt.senders, st.opt.id < st.opt.senders ? "true" : "false",
	       st.opt.bytes, window_s, st.received_window, (double)st.received_window / window_s,
	       (double)st.bytes_window * 8.0 / window_s / 1e6, percentile(50.0), percentile(99.0),
	       st.latency_ns_max / 1000u, st.samples_len, st.received_total, sent, sent_window,
	       try_again, st.order_violations, missing, st.foreign, st.membership_changes, st.dones,
	       st.digest);
	if (fflush(stdout) != 0) {
		die(EXIT_USAGE, "cannot write the report: %s", strerror(errno));
	}
}

int main(int argc, char **argv)
{
	parse_args(argc, argv);
	st.digest = 14695981039346656037ull;
	const struct options *o = &st.opt;

	uint64_t join_deadline = now_ns() + seconds_ns(o->join_timeout_s);
	cpg_handle_t handle = connect_group(join_deadline);
	int fd = -1;
	if (cpg_fd_get(handle, &fd) != CS_OK) {
		die(EXIT_COROSYNC, "cpg_fd_get failed");
	}

	while (st.member_count < o->members) {
		if (now_ns() >= join_deadline) {
			die(EXIT_TIMEOUT, "the group %s had %zu of %u members after %.1f s",
			    o->group, st.member_count, o->members, o->join_timeout_s);
		}
		pump(handle, fd, 50);
	}
	if (st.member_count > o->members) {
		die(EXIT_TIMEOUT, "the group %s has %zu members, more than the %u expected: "
			"another run on the same corosync?", o->group, st.member_count, o->members);
	}
	st.start_ns = now_ns();
	st.window_begin_ns = st.start_ns + seconds_ns(o->warmup_s);
	st.window_end_ns = st.window_begin_ns + seconds_ns(o->measure_s);
	uint64_t send_end = st.window_end_ns + seconds_ns(o->cooldown_s);

	uint64_t sent = 0, sent_window = 0, try_again = 0;
	unsigned char *buf = calloc(1, o->bytes);
	if (buf == NULL) {
		die(EXIT_USAGE, "cannot allocate a %u-byte message", o->bytes);
	}
	struct msg_header h = { .magic = MSG_MAGIC, .sender = o->id };
	if (o->id < o->senders) {
		h.kind = KIND_DATA;
		for (uint64_t now = now_ns(); now < send_end; now = now_ns()) {
			int blocked = 0;
			for (int i = 0; i < SEND_BURST; i++) {
				h.seq = sent;
				h.send_ns = now_ns();
				memcpy(buf, &h, sizeof h);
				if (mcast(handle, buf, o->bytes) == CS_ERR_TRY_AGAIN) {
					try_again++;
					blocked = 1;
					break;
				}
				if (h.send_ns >= st.window_begin_ns && h.send_ns < st.window_end_ns) {
					sent_window++;
				}
				sent++;
			}
			/* Blocked: wait (at most 1 ms) for the group to move before retrying. */
			pump(handle, fd, blocked ? 1 : 0);
		}
		h.kind = KIND_DONE;
		h.seq = sent;
		h.send_ns = now_ns();
		h.sent_total = sent;
		memcpy(buf, &h, sizeof h);
		while (mcast(handle, buf, o->bytes) == CS_ERR_TRY_AGAIN) {
			try_again++;
			pump(handle, fd, 1);
		}
	}

	uint64_t done_deadline = send_end + seconds_ns(o->done_timeout_s);
	while (st.dones < o->senders) {
		if (now_ns() >= done_deadline) {
			print_report(sent, sent_window, try_again);
			die(EXIT_TIMEOUT, "DONE from %u of %u senders %.1f s after the sending ended",
			    st.dones, o->senders, o->done_timeout_s);
		}
		pump(handle, fd, 10);
	}
	print_report(sent, sent_window, try_again);
	free(buf);
	free(st.samples);
	cs_error_t err = cpg_finalize(handle);
	if (err != CS_OK) {
		die(EXIT_COROSYNC, "cpg_finalize: corosync error %d", (int)err);
	}
	return 0;
}
