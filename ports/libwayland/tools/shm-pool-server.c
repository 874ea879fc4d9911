/* shm-pool-server: the smallest compositor that leaves wl_shm to libwayland.
 *
 * It serves wl_shm through wl_display_init_shm() and nothing else, so the libwayland-server.so.0
 * it loads (pick one with LD_LIBRARY_PATH) decides how dead pools are torn down. A 60 Hz frame
 * timer reads the newest wl_buffer once, as a compositor uploading it would (the reads fill the
 * page tables that munmap() later clears), and stands for a renderer's own memory traffic by
 * mapping, writing and unmapping a scratch frame. It counts the time between frames.
 *
 *   shm-pool-server SOCKET_NAME
 *
 * Prints "ready PID" once it listens. On SIGTERM it prints, and exits:
 *   frames N median_ms M max_after_destroy_ms X destroy_dispatch_ms D
 * where max_after_destroy_ms is the longest time between two frames from the first dead pool on,
 * and destroy_dispatch_ms the longest wl_event_loop_dispatch() that destroyed pools.
 */
#define _GNU_SOURCE
#include <assert.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <wayland-server.h>

#define FRAME_MS 16
#define SCRATCH_BYTES ((size_t)4 << 20)
#define MAX_FRAMES 100000

struct server {
	struct wl_display *display;
	struct wl_event_source *frame_timer;
	struct wl_listener client_created;
	struct wl_listener resource_created;
	struct wl_resource *newest_buffer; /* not yet read */
	struct wl_listener newest_buffer_destroyed;
	double frame_ms[MAX_FRAMES];
	int frames;
	double last_frame;
	double first_destroy; /* 0 until a pool dies */
	double dispatch_destroy_start; /* 0 unless this dispatch destroyed a pool */
	int done;
	double longest_destroy_dispatch;
	double max_after_destroy;
	volatile uint32_t sink; /* keeps the reads */
};

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void read_buffer(struct server *server, struct wl_shm_buffer *buffer)
{
	const uint32_t *pixels = wl_shm_buffer_get_data(buffer);
	size_t words = (size_t)wl_shm_buffer_get_stride(buffer) * wl_shm_buffer_get_height(buffer) / 4;
	uint32_t sum = 0;

	wl_shm_buffer_begin_access(buffer);
	for (size_t i = 0; i < words; i += 1024) /* one word a page: every page faulted in */
		sum += pixels[i];
	wl_shm_buffer_end_access(buffer);
	server->sink += sum;
}

/* A renderer's per-frame allocation: mmap, write, munmap, each taking mmap_lock. */
static void touch_scratch(struct server *server)
{
	char *scratch = mmap(NULL, SCRATCH_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	assert(scratch != MAP_FAILED);
	for (size_t i = 0; i < SCRATCH_BYTES; i += 4096)
		scratch[i] = (char)i;
	server->sink += scratch[SCRATCH_BYTES - 4096];
	munmap(scratch, SCRATCH_BYTES);
}

static int handle_frame(void *data)
{
	struct server *server = data;
	double start = now_ms();

	if (server->last_frame > 0 && server->frames < MAX_FRAMES) {
		double interval = start - server->last_frame;

		server->frame_ms[server->frames++] = interval;
		if (server->first_destroy > 0 && interval > server->max_after_destroy)
			server->max_after_destroy = interval;
	}
	server->last_frame = start;

	struct wl_shm_buffer *buffer = wl_shm_buffer_get(server->newest_buffer);
	if (buffer != NULL) {
		read_buffer(server, buffer);
		wl_list_remove(&server->newest_buffer_destroyed.link);
		server->newest_buffer = NULL;
	}
	touch_scratch(server);
	wl_event_source_timer_update(server->frame_timer, FRAME_MS);
	return 0;
}

static void handle_newest_buffer_destroyed(struct wl_listener *listener, void *data)
{
	struct server *server = wl_container_of(listener, server, newest_buffer_destroyed);

	wl_list_remove(&server->newest_buffer_destroyed.link);
	server->newest_buffer = NULL;
}

struct pool_watch {
	struct wl_listener destroyed;
	struct server *server;
};

static void handle_pool_destroyed(struct wl_listener *listener, void *data)
{
	struct pool_watch *watch = wl_container_of(listener, watch, destroyed);
	struct server *server = watch->server;

	if (server->first_destroy == 0)
		server->first_destroy = now_ms();
	if (server->dispatch_destroy_start == 0)
		server->dispatch_destroy_start = now_ms();
	wl_list_remove(&watch->destroyed.link);
	free(watch);
}

static void handle_resource_created(struct wl_listener *listener, void *data)
{
	struct server *server = wl_container_of(listener, server, resource_created);
	struct wl_resource *resource = data;
	const char *class = wl_resource_get_class(resource);

	if (strcmp(class, "wl_buffer") == 0) {
		if (server->newest_buffer != NULL)
			wl_list_remove(&server->newest_buffer_destroyed.link);
		server->newest_buffer = resource;
		server->newest_buffer_destroyed.notify = handle_newest_buffer_destroyed;
		wl_resource_add_destroy_listener(resource, &server->newest_buffer_destroyed);
	} else if (strcmp(class, "wl_shm_pool") == 0) {
		struct pool_watch *watch = calloc(1, sizeof(*watch));

		assert(watch != NULL);
		watch->server = server;
		watch->destroyed.notify = handle_pool_destroyed;
		wl_resource_add_destroy_listener(resource, &watch->destroyed);
	}
}

static int handle_sigterm(int signal_number, void *data)
{
	struct server *server = data;

	server->done = 1;
	return 0;
}

static void handle_client_created(struct wl_listener *listener, void *data)
{
	struct server *server = wl_container_of(listener, server, client_created);
	struct wl_client *client = data;

	if (server->resource_created.notify != NULL)
		return; /* only the first client is watched */
	server->resource_created.notify = handle_resource_created;
	wl_client_add_resource_created_listener(client, &server->resource_created);
}

static int compare_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static void report(struct server *server)
{
	double median = 0;

	if (server->frames > 0) {
		qsort(server->frame_ms, server->frames, sizeof(double), compare_double);
		median = server->frame_ms[server->frames / 2];
	}
	printf("frames %d median_ms %.1f max_after_destroy_ms %.1f destroy_dispatch_ms %.1f\n",
	       server->frames, median, server->max_after_destroy, server->longest_destroy_dispatch);
}

/* wl_display_run(), timing each dispatch that destroyed pools, idle sources included. */
static void run(struct server *server)
{
	struct wl_event_loop *loop = wl_display_get_event_loop(server->display);
	while (!server->done) {
		wl_display_flush_clients(server->display);
		wl_event_loop_dispatch(loop, -1);
		if (server->dispatch_destroy_start > 0) {
			double took = now_ms() - server->dispatch_destroy_start;

			if (took > server->longest_destroy_dispatch)
				server->longest_destroy_dispatch = took;
			server->dispatch_destroy_start = 0;
		}
	}
}

int main(int argc, char **argv)
{
	static struct server server;

	if (argc != 2) {
		fprintf(stderr, "usage: %s SOCKET_NAME\n", argv[0]);
		return 2;
	}
	server.display = wl_display_create();
	assert(server.display != NULL);
	if (wl_display_add_socket(server.display, argv[1]) != 0 || wl_display_init_shm(server.display) != 0) {
		perror("shm-pool-server");
		return 1;
	}
	server.client_created.notify = handle_client_created;
	wl_display_add_client_created_listener(server.display, &server.client_created);
	struct wl_event_loop *loop = wl_display_get_event_loop(server.display);
	wl_event_loop_add_signal(loop, SIGTERM, handle_sigterm, &server);
	server.frame_timer = wl_event_loop_add_timer(loop, handle_frame, &server);
	wl_event_source_timer_update(server.frame_timer, FRAME_MS);

	printf("ready %d\n", (int)getpid());
	fflush(stdout);
	run(&server);
	report(&server);

	wl_display_destroy_clients(server.display);
	wl_display_destroy(server.display);
	return 0;
}
