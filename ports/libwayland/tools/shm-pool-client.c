/* shm-pool-client: makes wl_shm pools the way the descriptor and burst checks need them.
 *
 *   shm-pool-client hold POOLS BYTES
 *       creates POOLS pools of BYTES each (a memfd per pool, closed once sent, as Xwayland's
 *       pixmaps are), prints "held POOLS" once the compositor has them all, and keeps them until
 *       its standard input closes.
 *   shm-pool-client burst POOLS WIDTH HEIGHT
 *       creates POOLS pools, each with one XRGB8888 buffer of WIDTH x HEIGHT drawn by the client,
 *       one every 20 ms (the compositor's frame timer reads each), then destroys every buffer and
 *       pool in one flush, waits for the compositor's reply and 2 s more, and exits.
 *
 * Connects to $WAYLAND_DISPLAY.
 */
#define _GNU_SOURCE
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <wayland-client.h>

/* Pools announced between two round trips: the client library holds a duplicate of each
 * descriptor until it is sent, and the default limit is 1024. */
#define POOLS_PER_ROUNDTRIP 64

static void handle_global(void *data, struct wl_registry *registry, uint32_t id, const char *interface,
			  uint32_t version)
{
	struct wl_shm **shm = data;

	if (strcmp(interface, "wl_shm") == 0)
		*shm = wl_registry_bind(registry, id, &wl_shm_interface, 1);
}

static void handle_global_remove(void *data, struct wl_registry *registry, uint32_t id)
{
}

static const struct wl_registry_listener registry_listener = {handle_global, handle_global_remove};

static struct wl_shm *bind_shm(struct wl_display *display)
{
	struct wl_shm *shm = NULL;
	struct wl_registry *registry = wl_display_get_registry(display);

	wl_registry_add_listener(registry, &registry_listener, &shm);
	if (wl_display_roundtrip(display) < 0 || shm == NULL) {
		fprintf(stderr, "shm-pool-client: no wl_shm\n");
		exit(1);
	}
	wl_registry_destroy(registry);
	return shm;
}

/* A pool of `size` bytes; `fill` writes every page first, as a client drawing into it does. */
static struct wl_shm_pool *create_pool(struct wl_shm *shm, size_t size, int fill)
{
	int fd = memfd_create("shm-pool-client", MFD_CLOEXEC);

	if (fd < 0 || ftruncate(fd, (off_t)size) != 0) {
		perror("shm-pool-client: memfd");
		exit(1);
	}
	if (fill) {
		char *data = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

		assert(data != MAP_FAILED);
		memset(data, 0x80, size);
		munmap(data, size);
	}
	struct wl_shm_pool *pool = wl_shm_create_pool(shm, fd, (int32_t)size);
	close(fd);
	return pool;
}

static void roundtrip(struct wl_display *display)
{
	if (wl_display_roundtrip(display) < 0) {
		fprintf(stderr, "shm-pool-client: connection lost\n");
		exit(1);
	}
}

static int hold(struct wl_display *display, struct wl_shm *shm, int pools, size_t size)
{
	char byte;

	for (int i = 0; i < pools; i++) {
		create_pool(shm, size, 0);
		if ((i + 1) % POOLS_PER_ROUNDTRIP == 0)
			roundtrip(display);
	}
	roundtrip(display);
	printf("held %d\n", pools);
	fflush(stdout);
	while (read(STDIN_FILENO, &byte, 1) > 0)
		;
	return 0;
}

static int burst(struct wl_display *display, struct wl_shm *shm, int pools, int width, int height)
{
	size_t size = (size_t)width * height * 4;
	struct wl_shm_pool **pool = calloc(pools, sizeof(*pool));
	struct wl_buffer **buffer = calloc(pools, sizeof(*buffer));

	assert(pool != NULL && buffer != NULL);
	for (int i = 0; i < pools; i++) {
		pool[i] = create_pool(shm, size, 1);
		buffer[i] = wl_shm_pool_create_buffer(pool[i], 0, width, height, width * 4, WL_SHM_FORMAT_XRGB8888);
		roundtrip(display);
		usleep(20000);
	}
	for (int i = 0; i < pools; i++) {
		wl_buffer_destroy(buffer[i]);
		wl_shm_pool_destroy(pool[i]);
	}
	roundtrip(display);
	sleep(2);
	free(buffer);
	free(pool);
	return 0;
}

int main(int argc, char **argv)
{
	struct wl_display *display = wl_display_connect(NULL);
	int status;

	if (display == NULL) {
		perror("shm-pool-client: connect");
		return 1;
	}
	struct wl_shm *shm = bind_shm(display);
	if (argc == 4 && strcmp(argv[1], "hold") == 0) {
		status = hold(display, shm, atoi(argv[2]), strtoul(argv[3], NULL, 0));
	} else if (argc == 5 && strcmp(argv[1], "burst") == 0) {
		status = burst(display, shm, atoi(argv[2]), atoi(argv[3]), atoi(argv[4]));
	} else {
		fprintf(stderr, "usage: %s hold POOLS BYTES | burst POOLS WIDTH HEIGHT\n", argv[0]);
		return 2;
	}
	wl_display_disconnect(display);
	return status;
}
