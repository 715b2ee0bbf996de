/*
 * The kvoffd control plane: one epoll loop owns the slot store (key
 * index, LRU, free list: lib/tier/slots.c), the per-slot state beside it
 * and every client; workers (writer.c) only touch slot bytes the loop
 * has handed them.  Block data moves through the shared memfd, never
 * through the socket.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/uio.h>
#include "../tool.h"
#include "kvoffd.h"

#define HUGE_PAGE_BYTES		(2u << 20)
#define MAX_PINS_PER_CLIENT	4096
/* Uncommitted ALLOCs: a client holds at most half the slots, and one it
 * has not committed or aborted within ALLOC_TIMEOUT_S goes back. */
#define ALLOC_SHARE_DIVISOR	2
#define ALLOC_TIMEOUT_S		60
/* Out of descriptors, say so at most this often. */
#define ACCEPT_LOG_INTERVAL_S	10
/* Malformed frames, likewise. */
#define PROTOCOL_LOG_INTERVAL_S	10
#define FRAMES_PER_WAKEUP	64
/* The loop ticks each second to judge a stalled file tier (stall_check)
 * and rewrites the metrics file every METRICS_TICKS ticks. */
#define TICK_S			1
#define METRICS_TICKS		5

/* epoll tags for the loop's own fds; clients are tagged by pointer. */
enum { TAG_LISTEN = 1, TAG_SIGNAL, TAG_TIMER, TAG_DONE };

/* ---- pool ---- */

static int map_pool(struct offd *d, unsigned flags)
{
	int fd = memfd_create("kvoffd-pool", MFD_CLOEXEC | MFD_ALLOW_SEALING | flags);
	void *p;

	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)d->pool_bytes) < 0)
		goto fail;
	p = mmap(NULL, d->pool_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		goto fail;
	/* Clients map it too: none may shrink it under the others. */
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		munmap(p, d->pool_bytes);
		goto fail;
	}
	d->memfd = fd;
	d->pool = p;
	return 0;
fail:
	{
		int err = -errno;

		close(fd);
		return err;
	}
}

/* One pool for every size class: pages of the largest size, handed to
 * the classes as their blocks come (kv/slots.h). */
int offd_pool_init(struct offd *d)
{
	int err;

	if (!d->nclasses || d->nclasses > SIZE_CLASSES_MAX)
		return -EINVAL;
	err = kv_slots_new(d->classes, d->nclasses, d->pool_bytes, &d->store);
	if (err)
		return err;
	d->slot_bytes = d->classes[d->nclasses - 1];
	d->nslots = kv_slots_count(d->store);
	d->pool_bytes = kv_slots_pool_bytes(d->store);
	d->npages = (uint32_t)(d->pool_bytes / d->slot_bytes);
	/* hugetlbfs reserves at mmap time, so a machine without free huge
	 * pages fails here and gets ordinary shared memory instead; pages
	 * (and so every slot of the largest class) start on a huge page
	 * when the largest class is a multiple. */
	err = -EINVAL;
	if (d->slot_bytes % HUGE_PAGE_BYTES == 0)
		err = map_pool(d, MFD_HUGETLB);
	d->hugepages = !err;
	if (err)
		err = map_pool(d, 0);
	if (err)
		return err;
	d->slots = calloc(d->nslots, sizeof(*d->slots));
	d->page_pins = calloc(d->npages ? d->npages : 1, sizeof(*d->page_pins));
	d->results = malloc(KV_OFFD_BATCH_MAX * KV_OFFD_RESULT_BYTES);
	return d->slots && d->page_pins && d->results ? 0 : -ENOMEM;
}

static void free_slot(struct offd *d, uint32_t i)
{
	if (d->slots[i].state == SLOT_ALLOC && d->slots[i].owner) {
		d->slots[i].owner->nallocs--;
		d->slots[i].owner->peer->alloc_bytes -= kv_slots_capacity(d->store, i);
	}
	memset(&d->slots[i], 0, sizeof(d->slots[i]));
	kv_slots_release(d->store, i);
}

/* A detached block (out of the index: replaced, or evicted while read)
 * is freed once nobody reads it. */
static void try_release(struct offd *d, uint32_t i)
{
	struct slot *s = &d->slots[i];

	if (s->state == SLOT_READY && !kv_slots_indexed(d->store, i) && !s->pins &&
	    !s->wb_pending)
		free_slot(d, i);
}

/* Whether a committed block still holds the bytes its COMMIT (or load)
 * fixed: every client maps the pool writable, so one could have written
 * into a block it did not allocate. */
static int intact(const struct offd *d, uint32_t i)
{
	return kv_xxh3(d->pool + kv_slots_offset(d->store, i),
		       kv_slots_len(d->store, i)) == d->slots[i].sum;
}

/* A block altered after COMMIT: out of the index, never served or written
 * behind again, freed once unpinned; the file tier's copy, if any, is
 * read through on the next miss. */
static void drop_altered(struct offd *d, uint32_t i)
{
	d->st.altered++;
	if (kv_slots_indexed(d->store, i)) {
		kv_slots_remove(d->store, i);
		report_event(d, "BlockRemoved", TIER_NONE, i);
	}
	tool_err("dropping '%s': altered after it was committed", kv_slots_key(d->store, i));
}

static void evict(struct offd *d, uint32_t i)
{
	report_event(d, "BlockRemoved", TIER_NONE, i);
	d->st.evictions++;
	free_slot(d, i);
}

/* Write slot i's block into file tier t: write-behind as it leaves RAM
 * (tier 0), write-through (the last tier) or a promotion (tier 0).
 * -EAGAIN when the queue is full, or while tier t moves the key out. */
static int queue_write(struct offd *d, uint32_t i, unsigned t, int promote)
{
	struct slot *s = &d->slots[i];
	struct job j = { .kind = JOB_WRITE, .slot = i, .tier = t, .promote = promote,
			 .len = kv_slots_len(d->store, i), .sum = s->sum,
			 .offset = kv_slots_offset(d->store, i) };

	if (d->wb_inflight >= d->wr.wcap || tier_moving(d, t, kv_slots_key(d->store, i)))
		return -EAGAIN;
	snprintf(j.path, sizeof(j.path), "%s", kv_slots_key(d->store, i));
	if (writer_push(d, &j))
		return -EAGAIN;
	s->wb_pending = 1;
	s->wb_tier = t;
	s->wb_refused = 0;
	d->wb_inflight++;
	return 0;
}

/* A block leaving RAM goes to the first file tier if it was put here
 * and is not there yet, or if no tier holds it; one read through from a
 * lower tier stays there (promotion copies it up, when it does). */
static int needs_write(const struct slot *s)
{
	return !(s->held & (1u << s->wb_floor)) && (s->put_here || !s->held);
}

/* Storage is behind when the queue is full, or when no write has landed
 * for a whole tick (stall_check). */
static int storage_behind(struct offd *d)
{
	return d->wb_inflight >= d->wr.wcap || d->wb_stalled;
}

/* What making room found: the budget of write-behinds it may queue,
 * whether storage is behind, whether a pin stood in the way. */
struct room {
	unsigned spills, budget;
	int behind, pinned;
};

enum { GO, WAIT };

/*
 * Whether block i may leave RAM now.  A dirty block is queued for
 * write-behind (WAIT: it goes once written).  A full queue on storage
 * that makes progress is backpressure: the put waits for the writes
 * ahead of it, so a burst on healthy storage loses nothing.  Only once
 * storage stalls (no write landed for a whole tick, stall_check), or
 * when its write failed, does a dirty block go unwritten: a counted drop
 * when no tier has it.
 */
static int may_go(struct offd *d, uint32_t i, struct room *r)
{
	struct slot *s = &d->slots[i];

	r->pinned |= s->pins > 0;
	if (s->state != SLOT_READY || s->pins || s->wb_pending)
		return WAIT;
	if (!needs_write(s))
		return GO;
	/* Storage that refused it would refuse it again: a put must not
	 * wait on that. */
	if (!s->wb_failed && r->spills < r->budget && !queue_write(d, i, s->wb_floor, 0)) {
		r->spills++;
		return WAIT;
	}
	return r->behind || s->wb_failed ? GO : WAIT;
}

/* Dirty, and a write-behind may take it now. */
static int writable(const struct offd *d, uint32_t i)
{
	const struct slot *s = &d->slots[i];

	return s->state == SLOT_READY && needs_write(s) && !s->wb_failed && !s->pins &&
	       !s->wb_pending;
}

static void let_go(struct offd *d, uint32_t i)
{
	if (needs_write(&d->slots[i]) && !d->slots[i].held)
		d->st.wb_drops++;
	evict(d, i);
}

/* Room in class cls: its least recently used block that may go. */
static int evict_in_class(struct offd *d, unsigned cls, struct room *r)
{
	for (uint32_t i = kv_slots_oldest(d->store, cls); i != KV_SLOT_NONE;
	     i = kv_slots_newer(d->store, i))
		if (may_go(d, i, r) == GO) {
			let_go(d, i);
			return 0;
		}
	return -EAGAIN;
}

/* The pages of class cls's least recently used blocks, oldest first, at
 * most PAGE_TRIES: those another class takes from it. */
static unsigned oldest_pages(struct offd *d, unsigned cls, uint32_t *pages)
{
	unsigned n = 0, k;

	for (uint32_t i = kv_slots_oldest(d->store, cls); i != KV_SLOT_NONE && n < PAGE_TRIES;
	     i = kv_slots_newer(d->store, i)) {
		uint32_t p = kv_slots_page_of(d->store, i);

		for (k = 0; k < n && pages[k] != p; k++)
			;
		if (k == n)
			pages[n++] = p;
	}
	return n;
}

/* Room from class cls for another class: a whole page, every block on
 * it let go. */
static int empty_page(struct offd *d, unsigned cls, struct room *r)
{
	uint32_t pages[PAGE_TRIES];
	unsigned n = oldest_pages(d, cls, pages);

	for (unsigned k = 0; k < n; k++) {
		uint32_t first, ids = kv_slots_page_ids(d->store, pages[k], &first);
		int all = 1;

		for (uint32_t j = first; j < first + ids; j++)
			if (kv_slots_used(d->store, j) && may_go(d, j, r) != GO)
				all = 0;
		if (!all)
			continue;
		for (uint32_t j = first; j < first + ids; j++)
			if (kv_slots_used(d->store, j))
				let_go(d, j);
		return 0;
	}
	return -EAGAIN;
}

/* The classes holding blocks, the one whose least recently used block
 * was used longest ago first: where room is made, in that order. */
static unsigned class_order(struct offd *d, unsigned *order)
{
	unsigned n = 0;

	for (unsigned k = 0; k < d->nclasses; k++) {
		uint32_t oldest = kv_slots_oldest(d->store, k);
		unsigned at = n;

		if (oldest == KV_SLOT_NONE)
			continue;
		while (at && kv_slots_last_use(d->store, kv_slots_oldest(d->store, order[at - 1])) >
			     kv_slots_last_use(d->store, oldest)) {
			order[at] = order[at - 1];
			at--;
		}
		order[at] = k;
		n++;
	}
	return n;
}

/*
 * A slot for a new block of len bytes, holding path: a free one, else
 * room made where the pool's least recently used blocks are.  Classes
 * share one byte budget (kv/slots.h), so the room may be a block of the
 * block's own class or a whole page of another class, whichever class's
 * oldest block was used longer ago; then the others, in that order.
 * -EAGAIN: the caller parks until a write-behind or a load lands.
 */
static int get_slot(struct offd *d, uint64_t len, const char *path, uint32_t *out)
{
	struct room r = { .budget = 2 * d->wr.nthreads, .behind = d->wb_stalled };
	unsigned order[SIZE_CLASSES_MAX], n;
	int err = kv_slots_alloc(d->store, len, path, out);
	unsigned cls;

	if (err != -ENOSPC)
		return err;
	cls = (unsigned)kv_slots_class(d->store, len);
	n = class_order(d, order);
	for (unsigned k = 0; k < n; k++)
		if (!(order[k] == cls ? evict_in_class(d, cls, &r) : empty_page(d, order[k], &r)))
			return kv_slots_alloc(d->store, len, path, out);
	if (d->wb_inflight || d->loads_inflight)
		return -EAGAIN;
	/* Refused for pins: the next tick revokes those held too long. */
	d->pin_starved |= r.pinned;
	return -ENOSPC;
}

/*
 * Keep clean what get_slot lets go next, so that it finds clean victims
 * instead of parking or dropping: queue write-behind for the dirty,
 * unpinned blocks nearest eviction.  For a block of class cls, that is
 * the LRU tail of cls, or the oldest pages of the class whose blocks
 * were used longest ago.
 */
static void spill_ahead(struct offd *d, unsigned cls)
{
	uint32_t window = d->nslots / 8 ? d->nslots / 8 : 1, seen = 0, pages[PAGE_TRIES];
	unsigned order[SIZE_CLASSES_MAX], n = class_order(d, order);

	if (window > d->wr.wcap)
		window = (uint32_t)d->wr.wcap;
	if (n && order[0] != cls) {
		n = oldest_pages(d, order[0], pages);
		for (unsigned k = 0; k < n; k++) {
			uint32_t first, ids = kv_slots_page_ids(d->store, pages[k], &first);

			for (uint32_t j = first; j < first + ids && seen < window; j++, seen++)
				if (kv_slots_used(d->store, j) && writable(d, j) &&
				    queue_write(d, j, d->slots[j].wb_floor, 0))
					return;
		}
		return;
	}
	for (uint32_t i = kv_slots_oldest(d->store, cls); i != KV_SLOT_NONE && seen < window;
	     i = kv_slots_newer(d->store, i), seen++)
		if (writable(d, i) && queue_write(d, i, d->slots[i].wb_floor, 0))
			return;
}

/* ---- clients ---- */

/* Poll for requests when reading and no reply waits to be sent, and
 * for room in the socket while one does. */
static void watch(struct offd *d, struct client *c, int reading)
{
	struct epoll_event ev = {
		.events = (reading && !c->outlen ? EPOLLIN : 0) |
			  (c->outlen ? EPOLLOUT : 0) | EPOLLRDHUP,
		.data.ptr = c,
	};

	if (epoll_ctl(d->epfd, EPOLL_CTL_MOD, c->fd, &ev) < 0)
		c->doomed = 1;
}

/*
 * Send iov, keeping what the socket does not take for flush_out.  A
 * client may pipeline requests; while a reply waits its requests are
 * not read, so a peer that never reads holds at most the replies to
 * what it sent in one loop turn.
 */
static void send_out(struct offd *d, struct client *c, struct iovec *iov, int niov)
{
	struct msghdr msg = { .msg_iov = iov, .msg_iovlen = (size_t)niov };
	size_t total = 0, sent = 0;
	int was_empty = !c->outlen;
	ssize_t n;

	if (c->doomed)
		return;
	for (int k = 0; k < niov; k++)
		total += iov[k].iov_len;
	if (!c->outlen) {
		do
			n = sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
		while (n < 0 && errno == EINTR);
		if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
			c->doomed = 1;
			return;
		}
		sent = n > 0 ? (size_t)n : 0;
		if (sent == total)
			return;
	}
	if (c->outlen + total - sent > c->outcap) {
		size_t cap = 2 * (c->outlen + total - sent);
		unsigned char *p = realloc(c->out, cap);

		if (!p) {
			c->doomed = 1;
			return;
		}
		c->out = p;
		c->outcap = cap;
	}
	for (int k = 0; k < niov; k++) {
		size_t len = iov[k].iov_len, skip = sent < len ? sent : len;

		memcpy(c->out + c->outlen, (char *)iov[k].iov_base + skip, len - skip);
		c->outlen += len - skip;
		sent -= skip;
	}
	if (was_empty)
		watch(d, c, c->wait == WAIT_NONE);
}

static void flush_out(struct offd *d, struct client *c)
{
	ssize_t n;

	do
		n = send(c->fd, c->out, c->outlen, MSG_NOSIGNAL | MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	if (n < 0) {
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			c->doomed = 1;
		return;
	}
	memmove(c->out, c->out + n, c->outlen - (size_t)n);
	c->outlen -= (size_t)n;
	if (!c->outlen)
		watch(d, c, c->wait == WAIT_NONE);
}

static void reply(struct offd *d, struct client *c, const struct kv_offd_frame *f)
{
	unsigned char buf[KV_OFFD_FRAME_BYTES];
	struct iovec iov = { .iov_base = buf, .iov_len = sizeof(buf) };

	if (c->doomed || kv_offd_frame_encode(f, buf, sizeof(buf))) {
		c->doomed = 1;
		return;
	}
	send_out(d, c, &iov, 1);
}

static void reply_status(struct offd *d, struct client *c, uint16_t type, int status)
{
	struct kv_offd_frame f = { .type = type | KV_OFFD_REPLY, .status = status };

	reply(d, c, &f);
}

static void park(struct offd *d, struct client *c, const struct kv_offd_frame *f)
{
	c->wait = WAIT_SLOT;
	if (f != &c->saved)	/* a retry passes the saved request itself */
		c->saved = *f;
	c->next_waiter = NULL;
	/* wake_parked retries the head first; one that still cannot go on
	 * keeps its place at the head. */
	if (d->waking) {
		c->next_waiter = d->parked_head;
		d->parked_head = c;
		if (!d->parked_tail)
			d->parked_tail = c;
	} else {
		if (d->parked_tail)
			d->parked_tail->next_waiter = c;
		else
			d->parked_head = c;
		d->parked_tail = c;
	}
	watch(d, c, 0);
}

static void wait_load(struct offd *d, struct client *c, const struct kv_offd_frame *f,
		      uint32_t i)
{
	c->wait = WAIT_LOAD;
	if (f != &c->saved)	/* a retry passes the saved request itself */
		c->saved = *f;
	c->wait_slot = i;
	c->next_waiter = d->slots[i].waiters;
	d->slots[i].waiters = c;
	watch(d, c, 0);
}

static int key_path(const struct kv_offd_frame *f, struct kv_block_ref *ref,
		    char path[PATH_BYTES])
{
	int err;

	memset(ref, 0, sizeof(*ref));
	err = kv_layout_model_dir_parse(f->model_dir, ref);
	if (err)
		return err;
	ref->rank = f->rank;
	ref->group = f->group;
	strcpy(ref->hash, f->hash);
	return kv_layout_block_path_ref(ref, path, PATH_BYTES);
}

/* Blocks of one model dir and KV-cache group are one size, as vLLM
 * writes them: the last size seen there picks a read-through's class
 * without asking the tiers for the file's size on the loop (a stat on
 * shared storage, a HEAD on a bucket).  A direct-mapped memory. */
static struct size_hint *size_hint_at(struct offd *d, const struct kv_block_ref *ref,
				      uint64_t *key)
{
	*key = (kv_xxh3(ref->model_dir, strlen(ref->model_dir)) ^
		((uint64_t)ref->group * 0x9e3779b97f4a7c15ull)) | 1;
	return &d->size_hints[*key % SIZE_HINTS];
}

/* The size remembered for ref's model and group; 0: none. */
static uint64_t size_hint(struct offd *d, const struct kv_block_ref *ref)
{
	uint64_t key;
	const struct size_hint *h = size_hint_at(d, ref, &key);

	return h->key == key ? h->bytes : 0;
}

static void size_hint_learn(struct offd *d, const struct kv_block_ref *ref, uint64_t bytes)
{
	uint64_t key;
	struct size_hint *h = size_hint_at(d, ref, &key);

	h->key = key;
	h->bytes = bytes;
}

/* What a peer may hold of the pool at once, in slot bytes, allocated
 * or pinned: a share, so that no peer can take the pool from the others
 * by opening more connections.  A block of any size fits. */
static uint64_t peer_share(const struct offd *d)
{
	uint64_t share = d->pool_bytes / ALLOC_SHARE_DIVISOR;

	return share > d->slot_bytes ? share : d->slot_bytes;
}

/*
 * The operations, each on one key or slot, shared by single frames and
 * BATCH entries; r gets what the reply carries.  -EAGAIN: it must wait
 * (a slot write-behind frees, a read-through), which a single frame
 * does parked and a batch entry leaves to the client to retry alone.
 */
static int op_alloc(struct offd *d, struct client *c, const struct kv_block_ref *ref,
		    const char *path, uint64_t len, struct kv_offd_result *r)
{
	uint32_t i;
	int err;

	err = kv_slots_class(d->store, len);
	if (err < 0)
		return err;
	if (c->peer->alloc_bytes + kv_slots_class_bytes(d->store, (unsigned)err) >
	    peer_share(d)) {
		d->st.alloc_refused++;
		return -EDQUOT;
	}
	err = get_slot(d, len, path, &i);
	if (err)
		return err;
	d->slots[i].state = SLOT_ALLOC;
	d->slots[i].owner = c;
	c->nallocs++;
	c->peer->alloc_bytes += kv_slots_capacity(d->store, i);
	d->slots[i].ref = *ref;
	d->slots[i].start_ns = kv_monotonic_ns();
	r->slot = i;
	r->len = len;
	r->offset = kv_slots_offset(d->store, i);
	return 0;
}

static int owned_alloc(struct offd *d, struct client *c, uint32_t i)
{
	return i < d->nslots && d->slots[i].state == SLOT_ALLOC && d->slots[i].owner == c;
}

/* Commit slot i: its sum is the client's (KV_OFFD_COMMIT_SUM: taken
 * where the bytes were in its cache) or, without one, computed here. */
static int op_commit(struct offd *d, struct client *c, uint32_t i, uint64_t flags,
		     uint64_t sum)
{
	uint32_t old;
	unsigned cls;
	uint64_t len;
	struct slot *s;

	if (!owned_alloc(d, c, i))
		return -EINVAL;
	s = &d->slots[i];
	len = kv_slots_len(d->store, i);
	s->sum = flags & KV_OFFD_COMMIT_SUM ? sum :
		 kv_xxh3(d->pool + kv_slots_offset(d->store, i), len);
	old = kv_slots_find(d->store, kv_slots_key(d->store, i));
	if (old != KV_SLOT_NONE) {
		kv_slots_remove(d->store, old);
		try_release(d, old);
	}
	s->state = SLOT_READY;
	s->owner = NULL;
	size_hint_learn(d, &s->ref, len);
	c->nallocs--;
	c->peer->alloc_bytes -= kv_slots_capacity(d->store, i);
	kv_slots_insert(d->store, i);
	kv_slots_touch(d->store, i);
	d->st.puts++;
	d->st.put_bytes += len;
	report_transfer(d, DIR_PUT, len, kv_monotonic_ns() - s->start_ns);
	report_event(d, "BlockStored", TIER_NONE, i);
	/* Not a drop: the block stays in RAM and catch_up queues it once
	 * the queue has room; wb_drops counts blocks lost from RAM. */
	s->put_here = 1;
	s->held = 0;
	if ((d->write_flags & KV_TIER_WRITE_THROUGH) && queue_write(d, i, d->ntiers - 1, 0)) {
		s->wb_refused = 1;
		d->catchup = 1;
	}
	cls = kv_slots_class_of(d->store, i);
	if (!(d->write_flags & KV_TIER_WRITE_THROUGH) && !kv_slots_room(d->store, cls))
		spill_ahead(d, cls);
	return 0;
}

static int op_abort(struct offd *d, struct client *c, uint32_t i)
{
	if (!owned_alloc(d, c, i))
		return -EINVAL;
	free_slot(d, i);
	return 0;
}

/*
 * Pins are counted by peer (bytes, within its share) and by page.  A
 * page goes back to another size class only when every slot on it is
 * free, and a pinned block never leaves: a few small pins spread over
 * the pages would deny every other class a page.  So a pin that would
 * hold one more page of its class is refused where some other class
 * would then find every page held by pins of classes not its own.
 */
static unsigned class_of(const struct offd *d, uint32_t i)
{
	return (unsigned)kv_slots_class(d->store, kv_slots_capacity(d->store, i));
}

static int page_pinnable(const struct offd *d, unsigned cls)
{
	if (d->npages < 2)
		return 1;
	for (unsigned x = 0; x < d->nclasses; x++)
		if (x != cls && d->pages_pinned + 1 - d->class_pages_pinned[x] >= d->npages)
			return 0;
	return 1;
}

static int pin_slot(struct offd *d, struct client *c, uint32_t i)
{
	uint32_t page = kv_slots_page_of(d->store, i);
	unsigned cls = class_of(d, i);

	if (c->peer->pin_bytes + kv_slots_capacity(d->store, i) > peer_share(d))
		return -EMFILE;
	if (!d->page_pins[page] && !page_pinnable(d, cls)) {
		d->st.pins_refused++;
		return -EMFILE;
	}
	if (!d->page_pins[page]++) {
		d->pages_pinned++;
		d->class_pages_pinned[cls]++;
	}
	c->peer->pin_bytes += kv_slots_capacity(d->store, i);
	d->slots[i].pins++;
	return 0;
}

static void unpin_slot(struct offd *d, struct peer *p, uint32_t i)
{
	uint32_t page = kv_slots_page_of(d->store, i);

	if (!--d->page_pins[page]) {
		d->pages_pinned--;
		d->class_pages_pinned[class_of(d, i)]--;
	}
	p->pin_bytes -= kv_slots_capacity(d->store, i);
	d->slots[i].pins--;
}

/* Pin a committed block for c and count the get. */
static int op_pin(struct offd *d, struct client *c, uint32_t i, int rerun,
		  struct kv_offd_result *r)
{
	int err;

	if (c->npins >= MAX_PINS_PER_CLIENT)
		return -EMFILE;
	if (c->npins == c->cap_pins) {
		size_t cap = c->cap_pins ? 2 * c->cap_pins : 8;
		struct pin *p = realloc(c->pins, cap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		c->pins = p;
		c->cap_pins = cap;
	}
	if ((err = pin_slot(d, c, i)) < 0)
		return err;
	c->pins[c->npins].slot = i;
	c->pins[c->npins].start_ns = kv_monotonic_ns();
	c->npins++;
	kv_slots_touch(d->store, i);
	if (!rerun)
		d->st.hits++;
	r->slot = i;
	r->len = kv_slots_len(d->store, i);
	r->offset = kv_slots_offset(d->store, i);
	r->sum = d->slots[i].sum;
	d->st.gets++;
	d->st.get_bytes += r->len;
	return 0;
}

/* A pin of c's that revoke_pins took back: forget it, -ESTALE. */
static int release_revoked(struct client *c, uint32_t i)
{
	for (size_t k = 0; k < c->nrevoked; k++)
		if (c->revoked[k] == i) {
			c->revoked[k] = c->revoked[--c->nrevoked];
			return -ESTALE;
		}
	return -EINVAL;
}

/* Drop a pin of c's; altered: the reader found other bytes than the
 * block's sum, and the block goes if it finds so too. */
static int op_release(struct offd *d, struct client *c, uint32_t i, uint64_t altered)
{
	size_t k;

	for (k = 0; k < c->npins && c->pins[k].slot != i; k++)
		;
	if (k == c->npins)
		return release_revoked(c, i);
	if (altered && kv_slots_indexed(d->store, i) && !intact(d, i))
		drop_altered(d, i);
	unpin_slot(d, c->peer, i);
	report_transfer(d, DIR_GET, kv_slots_len(d->store, i),
			kv_monotonic_ns() - c->pins[k].start_ns);
	c->pins[k] = c->pins[--c->npins];
	try_release(d, i);
	return 0;
}

/* -EINPROGRESS: only the unbounded tiers can say (see struct probe). */
static int op_has(struct offd *d, const char *path, struct kv_offd_result *r)
{
	if (kv_slots_find(d->store, path) != KV_SLOT_NONE)
		r->len = KV_OFFD_IN_RAM;
	else if (tiers_indexed(d, path, NULL))
		r->len = KV_OFFD_ON_DISK;
	else
		return tiers_unbounded(d) ? -EINPROGRESS : -ENOENT;
	return 0;
}

static void reply_result(struct offd *d, struct client *c, uint16_t type, int err,
			 const struct kv_offd_result *res)
{
	struct kv_offd_frame r = { .type = type | KV_OFFD_REPLY, .slot = res->slot,
				   .len = res->len, .arg = res->offset, .sum = res->sum };

	if (err)
		reply_status(d, c, type, err);
	else
		reply(d, c, &r);
}

static void do_alloc(struct offd *d, struct client *c, const struct kv_offd_frame *f)
{
	struct kv_offd_result r = { 0 };
	struct kv_block_ref ref;
	char path[PATH_BYTES];
	int err;

	err = key_path(f, &ref, path);
	if (!err)
		err = op_alloc(d, c, &ref, path, f->len, &r);
	if (err == -EAGAIN)
		park(d, c, f);
	else
		reply_result(d, c, f->type, err, &r);
}

static void do_by_slot(struct offd *d, struct client *c, const struct kv_offd_frame *f)
{
	struct kv_offd_frame r = { .type = f->type | KV_OFFD_REPLY, .slot = f->slot };
	int err = f->type == KV_OFFD_COMMIT ? op_commit(d, c, f->slot, f->arg, f->sum) :
		  f->type == KV_OFFD_RELEASE ? op_release(d, c, f->slot, f->arg) :
		  op_abort(d, c, f->slot);

	if (err)
		reply_status(d, c, f->type, err);
	else
		reply(d, c, &r);
}

/* ---- presence asked of the unbounded tiers, on a worker ---- */

static void dispatch(struct offd *d, struct client *c, const struct kv_offd_frame *f,
		     int rerun);

static void probe_free(struct probe *p)
{
	if (!p)
		return;
	free(p->entry);
	free(p->path);
	free(p->found);
	free(p->size);
	free(p->reqs);
	free(p->results);
	free(p);
}

/* Room for cap entries of req's answer. */
static struct probe *probe_new(struct offd *d, const struct kv_offd_frame *req, size_t cap)
{
	struct probe *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->req = *req;
	p->tiers = tiers_unbounded(d);
	p->entry = malloc(cap * sizeof(*p->entry));
	p->path = malloc(cap * sizeof(*p->path));
	p->found = malloc(cap * sizeof(*p->found));
	p->size = malloc(cap * sizeof(*p->size));
	p->reqs = malloc(cap * sizeof(*p->reqs));
	if (req->type == KV_OFFD_BATCH)
		p->results = malloc(cap * KV_OFFD_RESULT_BYTES);
	if (!p->entry || !p->path || !p->found || !p->size || !p->reqs ||
	    (req->type == KV_OFFD_BATCH && !p->results)) {
		probe_free(p);
		return NULL;
	}
	return p;
}

/* Read path through the tiers in probe into slot i, just taken for it. */
static void start_load(struct offd *d, uint32_t i, const struct kv_block_ref *ref,
		       const char *path, unsigned probe)
{
	struct job j = { .kind = JOB_LOAD, .probe = probe, .slot = i };
	struct slot *s = &d->slots[i];

	s->state = SLOT_LOADING;
	s->ref = *ref;
	kv_slots_insert(d->store, i);
	j.offset = kv_slots_offset(d->store, i);
	j.cap = kv_slots_capacity(d->store, i);
	memcpy(j.path, path, PATH_BYTES);
	d->loads_inflight++;
	writer_push(d, &j);
}

/*
 * Start reading path (size bytes, on a file tier) into RAM for a batch
 * LOOKUP that answers EAGAIN for it: the client's LOOKUP of it alone,
 * which follows, finds it loading or loaded instead of starting it, so a
 * batch's read-throughs are in flight together (a worker takes several
 * loads as one batch, which a bucket keeps in flight at once).  Only
 * where it costs no unwritten block and leaves half the loads' ring to
 * LOOKUPs that wait.
 */
static void prefetch(struct offd *d, const char *path, uint64_t size)
{
	struct kv_block_ref ref;
	uint32_t i;

	if (size == KV_TIER_SIZE_UNKNOWN || kv_slots_class(d->store, size ? size : 1) < 0 ||
	    d->loads_inflight >= d->wr.lcap / 2 || storage_behind(d) ||
	    kv_slots_find(d->store, path) != KV_SLOT_NONE ||
	    kv_layout_block_parse(path, &ref) || get_slot(d, size ? size : 1, path, &i))
		return;
	start_load(d, i, &ref, path, tiers_probe(d, path));
}

/* An entry's answer once its tiers were asked: found is 0 (one has it),
 * -ENOENT or an error. */
static int probed(struct offd *d, unsigned op, int found, struct kv_offd_result *r)
{
	if (op == KV_OFFD_HAS) {
		if (!found)
			r->len = KV_OFFD_ON_DISK;
		return found;
	}
	/* LOOKUP: a block on disk is read through by a single LOOKUP. */
	if (found == -ENOENT)
		d->st.misses++;
	return found ? found : -EAGAIN;
}

static void probe_reply(struct offd *d, struct client *c, struct probe *p)
{
	struct kv_offd_frame h = { .type = p->req.type | KV_OFFD_REPLY };
	unsigned char head[KV_OFFD_FRAME_BYTES];
	struct iovec iov[2] = { { .iov_base = head, .iov_len = sizeof(head) } };
	struct kv_offd_result r = { 0 };
	int st;

	if (p->req.type == KV_OFFD_LOOKUP) {
		struct kv_block_ref ref;
		char path[PATH_BYTES];
		uint64_t size = p->size[0] == KV_TIER_SIZE_UNKNOWN ? d->slot_bytes : p->size[0];

		/* Its size known, it is run again and read through into a
		 * slot of that size.  An empty block is remembered as one
		 * byte (a slot of the smallest class): 0 would be no size,
		 * and it would be asked again. */
		size = size ? size : 1;
		st = p->found[0] ? p->found[0] : kv_slots_class(d->store, size) < 0 ? -EFBIG :
		     key_path(&p->req, &ref, path);
		if (st) {
			reply_status(d, c, p->req.type, st);
			return;
		}
		size_hint_learn(d, &ref, size);
		c->probed = 1;
		dispatch(d, c, &c->saved, 1);
		return;
	}
	if (p->req.type == KV_OFFD_HAS) {
		st = probed(d, KV_OFFD_HAS, p->found[0], &r);
		h.arg = r.len;
		if (st)
			reply_status(d, c, p->req.type, st);
		else
			reply(d, c, &h);
		return;
	}
	for (size_t k = 0; k < p->n; k++) {
		r = (struct kv_offd_result){ 0 };
		st = probed(d, (unsigned)(p->req.arg & 0xff), p->found[k], &r);
		if (st == -EAGAIN)
			prefetch(d, p->path[k], p->size[k]);
		if (st)
			r = (struct kv_offd_result){ .status = st };
		kv_offd_result_encode(p->results, p->entry[k], &r);
	}
	h.len = p->req.len;
	h.arg = p->req.arg;
	if (kv_offd_frame_encode(&h, head, sizeof(head))) {
		c->doomed = 1;
		return;
	}
	iov[1].iov_base = p->results;
	iov[1].iov_len = (size_t)p->req.len * KV_OFFD_RESULT_BYTES;
	send_out(d, c, iov, 2);
}

/* Ask p's tiers on a worker while c waits; when the probes' ring is
 * full, on the loop. */
static void ask(struct offd *d, struct client *c, struct probe *p)
{
	struct job j = { .kind = JOB_PROBE, .ask = p };
	struct kv_tier *io[FILE_TIERS_MAX];

	if (!writer_push(d, &j)) {
		d->probes_inflight++;
		p->client = c;
		c->probe = p;
		c->wait = WAIT_PROBE;
		watch(d, c, 0);
		return;
	}
	for (unsigned t = 0; t < d->ntiers; t++)
		io[t] = d->tiers[t].tier;
	probe_run(d, io, p);
	probe_reply(d, c, p);
	probe_free(p);
}

static void probe_done(struct offd *d, const struct job *j)
{
	struct probe *p = j->ask;
	struct client *c = p->client;

	d->probes_inflight--;
	if (c) {
		c->probe = NULL;
		c->wait = WAIT_NONE;
		if (!c->doomed) {
			probe_reply(d, c, p);
			if (c->wait == WAIT_NONE)
				watch(d, c, 1);
		}
	}
	probe_free(p);
}

/* Whether a file tier is known to hold path: a bounded tier's LRU, or
 * the unbounded tiers asked for c's LOOKUP already (c->probed). */
static int held_below(struct offd *d, const struct client *c, const char *path)
{
	return c->probed || tiers_indexed(d, path, NULL);
}

/* Ask the tiers about request f's one key, path: a HAS, or a LOOKUP's
 * read-through whose size no hint or index gives, or whose presence must
 * be known before it may cost an unwritten block (the LOOKUP then runs
 * again, see probe_reply). */
static void ask_one(struct offd *d, struct client *c, const struct kv_offd_frame *f,
		    const char *path)
{
	struct probe *p = probe_new(d, f, 1);

	if (!p) {
		reply_status(d, c, f->type, -ENOMEM);
		return;
	}
	if (f != &c->saved)
		c->saved = *f;
	p->n = 1;
	p->entry[0] = 0;
	memcpy(p->path[0], path, PATH_BYTES);
	ask(d, c, p);
}

static void do_lookup(struct offd *d, struct client *c, const struct kv_offd_frame *f,
		      int rerun)
{
	struct kv_offd_result r = { 0 };
	struct kv_block_ref ref;
	char path[PATH_BYTES];
	uint64_t load_bytes;
	unsigned probe;
	uint32_t i;
	int err;

	err = key_path(f, &ref, path);
	if (err) {
		reply_status(d, c, f->type, err);
		return;
	}
	i = kv_slots_find(d->store, path);
	if (i != KV_SLOT_NONE && d->slots[i].state == SLOT_READY) {
		err = op_pin(d, c, i, rerun, &r);
		reply_result(d, c, f->type, err, &r);
		return;
	}
	if (!rerun) {
		d->st.misses++;
		c->probed = 0;
	}
	if (i != KV_SLOT_NONE) {
		/* Someone's miss is loading this key: wait for that one. */
		wait_load(d, c, f, i);
		return;
	}
	/* Bounded tiers answer from their index: a key none of the tiers
	 * can hold costs no slot and no job. */
	probe = tiers_probe(d, path);
	if (!probe)
		err = -ENOENT;
	else if (d->nclasses == 1) {
		/* Its size is known once read: a slot of the one class.  Room
		 * for a read-through may cost an unwritten block when storage
		 * is behind: never for a key no file tier holds. */
		load_bytes = d->slot_bytes;
		if (!kv_slots_room(d->store, 0) && storage_behind(d) && !held_below(d, c, path)) {
			ask_one(d, c, f, path);
			return;
		}
	} else {
		/* The file's size picks the class it is read into: the size
		 * of its model's and group's blocks (a larger one is read
		 * again, see load_done), else a bounded tier's index, else
		 * the tiers are asked on a worker first (ask_one). */
		int cls;

		load_bytes = size_hint(d, &ref);
		cls = load_bytes ? kv_slots_class(d->store, load_bytes) : -1;
		if (cls < 0 && !tiers_indexed(d, path, &load_bytes)) {
			ask_one(d, c, f, path);
			return;
		}
		if (cls < 0) {
			if (kv_slots_class(d->store, load_bytes) < 0)
				err = -EFBIG;
		} else if (!kv_slots_room(d->store, (unsigned)cls) && storage_behind(d) &&
			   !held_below(d, c, path)) {
			/* As with one class: no unwritten block goes for a key
			 * no tier holds. */
			ask_one(d, c, f, path);
			return;
		}
	}
	if (err < 0) {
		reply_status(d, c, f->type, err);
		return;
	}
	err = d->loads_inflight < d->wr.lcap ? get_slot(d, load_bytes, path, &i) : -EAGAIN;
	if (err == -EAGAIN) {
		park(d, c, f);
		return;
	}
	if (err) {
		reply_status(d, c, f->type, err);
		return;
	}
	start_load(d, i, &ref, path, probe);
	wait_load(d, c, f, i);
}

static void do_has(struct offd *d, struct client *c, const struct kv_offd_frame *f)
{
	struct kv_offd_frame r = { .type = f->type | KV_OFFD_REPLY };
	struct kv_offd_result res = { 0 };
	struct kv_block_ref ref;
	char path[PATH_BYTES];
	int err;

	err = key_path(f, &ref, path);
	if (!err)
		err = op_has(d, path, &res);
	if (err == -EINPROGRESS) {
		ask_one(d, c, f, path);
		return;
	}
	r.arg = res.len;
	if (err)
		reply_status(d, c, f->type, err);
	else
		reply(d, c, &r);
}

/* A batch LOOKUP entry: pinned if in RAM; -EAGAIN if a file tier has it
 * (its read-through started here where it may be, see prefetch) or a
 * read-through is loading it, for the client to look it up alone;
 * -EINPROGRESS if only the unbounded tiers can say. */
static int batch_lookup(struct offd *d, struct client *c, const char *path,
			struct kv_offd_result *r)
{
	uint32_t i = kv_slots_find(d->store, path);
	uint64_t size;

	if (i != KV_SLOT_NONE && d->slots[i].state == SLOT_READY)
		return op_pin(d, c, i, 0, r);
	if (i != KV_SLOT_NONE)
		return -EAGAIN;
	if (tiers_indexed(d, path, &size)) {
		prefetch(d, path, size);
		return -EAGAIN;
	}
	if (tiers_unbounded(d))
		return -EINPROGRESS;
	d->st.misses++;
	return -ENOENT;
}

static int batch_entry(struct offd *d, struct client *c, unsigned op,
		       struct kv_block_ref *ref, const struct kv_offd_batch_entry *e,
		       struct kv_offd_result *r, char path[PATH_BYTES])
{
	int err;

	switch (op) {
	case KV_OFFD_COMMIT:
		r->slot = e->slot;
		return op_commit(d, c, e->slot, e->flags, e->sum);
	case KV_OFFD_ABORT:
		r->slot = e->slot;
		return op_abort(d, c, e->slot);
	case KV_OFFD_RELEASE:
		r->slot = e->slot;
		return op_release(d, c, e->slot, e->flags);
	}
	strcpy(ref->hash, e->hash);
	err = kv_layout_block_path_ref(ref, path, PATH_BYTES);
	if (err)
		return err;
	switch (op) {
	case KV_OFFD_HAS:
		return op_has(d, path, r);
	case KV_OFFD_LOOKUP:
		return batch_lookup(d, c, path, r);
	default:
		return op_alloc(d, c, ref, path, e->len, r);
	}
}

/* A BATCH frame and its payload: every entry is checked before any is
 * run, and each gets its own result; nothing in a batch waits for room
 * or a read-through.  Entries only the unbounded tiers can answer are
 * asked of them together, on a worker (ask). */
static int do_batch(struct offd *d, struct client *c, const struct kv_offd_frame *f,
		    const unsigned char *payload)
{
	struct kv_offd_frame h = { .type = f->type | KV_OFFD_REPLY, .len = f->len, .arg = f->arg };
	unsigned char head[KV_OFFD_FRAME_BYTES];
	struct iovec iov[2] = { { .iov_base = head, .iov_len = sizeof(head) } };
	unsigned op = (unsigned)(f->arg & 0xff);
	struct kv_offd_batch_entry e;
	struct kv_block_ref ref;
	struct probe *p = NULL;
	char path[PATH_BYTES];
	int err;

	/* HAS changes nothing, so it may find a bad entry as it goes. */
	for (size_t i = 0; op != KV_OFFD_HAS && i < f->len; i++)
		if (kv_offd_batch_decode(f, payload, i, &e))
			return -KV_EPROTO;
	memset(&ref, 0, sizeof(ref));
	if (op == KV_OFFD_HAS || op == KV_OFFD_LOOKUP || op == KV_OFFD_ALLOC) {
		err = kv_layout_model_dir_parse(f->model_dir, &ref);
		if (err) {
			reply_status(d, c, f->type, err);
			return 0;
		}
		ref.rank = f->rank;
		ref.group = f->group;
	}
	for (size_t i = 0; i < f->len; i++) {
		struct kv_offd_result r = { 0 };
		int st;

		if (kv_offd_batch_decode(f, payload, i, &e)) {
			probe_free(p);
			return -KV_EPROTO;
		}
		st = batch_entry(d, c, op, &ref, &e, &r, path);
		if (st == -EINPROGRESS && !p && !(p = probe_new(d, f, f->len)))
			st = -ENOMEM;
		if (st == -EINPROGRESS) {
			p->entry[p->n] = (uint32_t)i;
			memcpy(p->path[p->n++], path, PATH_BYTES);
			continue;
		}
		if (st)
			r = (struct kv_offd_result){ .status = st };
		kv_offd_result_encode(d->results, i, &r);
	}
	if (p) {
		memcpy(p->results, d->results, (size_t)f->len * KV_OFFD_RESULT_BYTES);
		ask(d, c, p);
		return 0;
	}
	if (kv_offd_frame_encode(&h, head, sizeof(head)))
		return -KV_EPROTO;
	iov[1].iov_base = d->results;
	iov[1].iov_len = (size_t)f->len * KV_OFFD_RESULT_BYTES;
	send_out(d, c, iov, 2);
	return 0;
}

static void do_list(struct offd *d, struct client *c, const struct kv_offd_frame *f)
{
	struct kv_offd_frame r = { .type = f->type | KV_OFFD_REPLY };

	for (uint32_t i = f->arg < d->nslots ? kv_slots_next_used(d->store, (uint32_t)f->arg) :
		     KV_SLOT_NONE;
	     i != KV_SLOT_NONE; i = kv_slots_next_used(d->store, i + 1)) {
		const struct slot *s = &d->slots[i];

		if (s->state != SLOT_READY || !kv_slots_indexed(d->store, (uint32_t)i))
			continue;
		r.slot = (uint32_t)i;
		r.len = kv_slots_len(d->store, (uint32_t)i);
		r.rank = s->ref.rank;
		r.group = s->ref.group;
		r.arg = s->pins | (uint64_t)(s->held != 0) << 32;
		strcpy(r.model_dir, s->ref.model_dir);
		strcpy(r.hash, s->ref.hash);
		reply(d, c, &r);
		return;
	}
	reply_status(d, c, f->type, -ENOENT);
}

static void dispatch(struct offd *d, struct client *c, const struct kv_offd_frame *f,
		     int rerun)
{
	struct kv_offd_frame r = { .type = f->type | KV_OFFD_REPLY };

	switch (f->type) {
	case KV_OFFD_ALLOC:
		do_alloc(d, c, f);
		break;
	case KV_OFFD_COMMIT:
	case KV_OFFD_ABORT:
	case KV_OFFD_RELEASE:
		do_by_slot(d, c, f);
		break;
	case KV_OFFD_LOOKUP:
		do_lookup(d, c, f, rerun);
		break;
	case KV_OFFD_HAS:
		do_has(d, c, f);
		break;
	case KV_OFFD_STATS:
		report_fill_stats(d, &r.stats);
		reply(d, c, &r);
		break;
	case KV_OFFD_TIER_STATS:
		if (f->arg >= d->ntiers) {
			reply_status(d, c, f->type, -ENOENT);
			break;
		}
		report_fill_tier_stats(d, (unsigned)f->arg, &r.tier_stats);
		reply(d, c, &r);
		break;
	case KV_OFFD_LIST:
		do_list(d, c, f);
		break;
	default:
		/* The decoder lets only request types through. */
		c->doomed = 1;
		break;
	}
}

/* Retry parked requests now that a slot may have come free. */
static void wake_parked(struct offd *d)
{
	if (d->waking)
		return;
	d->waking = 1;
	while (d->parked_head) {
		struct client *c = d->parked_head;

		d->parked_head = c->next_waiter;
		if (!d->parked_head)
			d->parked_tail = NULL;
		c->next_waiter = NULL;
		c->wait = WAIT_NONE;
		if (c->doomed)
			continue;
		dispatch(d, c, &c->saved, 1);
		if (c->wait == WAIT_SLOT)
			break;
		if (c->wait == WAIT_NONE)
			watch(d, c, 1);
	}
	d->waking = 0;
}

static void unlink_waiter(struct client **head, struct client **tail, struct client *c)
{
	struct client *prev = NULL;

	for (struct client *w = *head; w; prev = w, w = w->next_waiter) {
		if (w != c)
			continue;
		if (prev)
			prev->next_waiter = w->next_waiter;
		else
			*head = w->next_waiter;
		if (tail && *tail == c)
			*tail = prev;
		return;
	}
}

/* Drop a client: its pins are released and its unfinished puts dropped,
 * whether it said goodbye or died. */
static void client_close(struct offd *d, struct client *c)
{
	for (size_t k = 0; k < c->npins; k++) {
		unpin_slot(d, c->peer, c->pins[k].slot);
		try_release(d, c->pins[k].slot);
	}
	KV_SLOTS_EACH_USED(d->store, i) {
		if (!c->nallocs)
			break;
		if (owned_alloc(d, c, i))
			free_slot(d, i);
	}
	if (c->wait == WAIT_LOAD)
		unlink_waiter(&d->slots[c->wait_slot].waiters, NULL, c);
	else if (c->wait == WAIT_SLOT)
		unlink_waiter(&d->parked_head, &d->parked_tail, c);
	else if (c->wait == WAIT_PROBE)
		c->probe->client = NULL;	/* freed when its job is done */
	if (c->prev)
		c->prev->next = c->next;
	else
		d->clients = c->next;
	if (c->next)
		c->next->prev = c->prev;
	close(c->fd);
	if (!--c->peer->refs)
		free(c->peer);
	free(c->pins);
	free(c->revoked);
	free(c->pbuf);
	free(c->out);
	free(c);
}

/*
 * Out of descriptors (or kernel memory): stop polling the listener, which
 * would otherwise wake the loop for the same pending connection forever,
 * until a client goes or the next tick; say so once per interval.
 */
static void accept_pause(struct offd *d, int err)
{
	struct epoll_event ev = { .events = 0, .data.u64 = TAG_LISTEN };
	int64_t now = kv_monotonic_ns();

	d->st.accept_errors++;
	if (!d->accept_paused && epoll_ctl(d->epfd, EPOLL_CTL_MOD, d->lfd, &ev) == 0)
		d->accept_paused = 1;
	if (!d->accept_logged_ns || now - d->accept_logged_ns >= ACCEPT_LOG_INTERVAL_S * 1000000000LL) {
		tool_err("cannot accept: %s (%llu %s so far); waiting for a descriptor",
			 strerror(err), (unsigned long long)d->st.accept_errors,
			 tool_plural(d->st.accept_errors, "time", "times"));
		d->accept_logged_ns = now;
	}
}

static void accept_resume(struct offd *d)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = TAG_LISTEN };

	if (d->accept_paused && d->lfd >= 0 &&
	    epoll_ctl(d->epfd, EPOLL_CTL_MOD, d->lfd, &ev) == 0)
		d->accept_paused = 0;
}

static void reap(struct offd *d)
{
	struct client *c = d->clients, *next;
	int closed = 0;

	for (; c; c = next) {
		next = c->next;
		if (c->doomed) {
			client_close(d, c);
			closed = 1;
		}
	}
	if (closed) {
		accept_resume(d);
		wake_parked(d);
	}
}

/* Make room for a BATCH payload of need bytes (at most
 * KV_OFFD_BATCH_MAX entries, as the decoder checked). */
static int payload_room(struct client *c, size_t need)
{
	unsigned char *p;

	if (need <= c->pcap)
		return 0;
	p = realloc(c->pbuf, need);
	if (!p)
		return -ENOMEM;
	c->pbuf = p;
	c->pcap = need;
	return 0;
}

/* Malformed frames are said at most once per PROTOCOL_LOG_INTERVAL_S, with
 * how many came since: a peer sending them by the thousand cannot fill
 * the log.  protocol_errors counts each. */
static void protocol_error(struct offd *d, struct client *c)
{
	int64_t now = kv_monotonic_ns();

	d->st.protocol_errors++;
	if (!d->protocol_logged_ns ||
	    now - d->protocol_logged_ns >= PROTOCOL_LOG_INTERVAL_S * 1000000000LL) {
		uint64_t more = d->st.protocol_errors - d->protocol_logged - 1;

		if (more)
			tool_err("closing client pid %d: malformed frame (and %llu more since "
				 "the last said)", (int)c->pid, (unsigned long long)more);
		else
			tool_err("closing client pid %d: malformed frame", (int)c->pid);
		d->protocol_logged_ns = now;
		d->protocol_logged = d->st.protocol_errors;
	}
	c->doomed = 1;
}

/* Requests in order, a BATCH frame's payload after it; reading stops
 * while the client waits or a reply is still unsent. */
static void client_read(struct offd *d, struct client *c)
{
	struct kv_offd_frame f;

	for (int n = 0; n < FRAMES_PER_WAKEUP && c->wait == WAIT_NONE && !c->doomed &&
			!c->outlen; ) {
		unsigned char *dst = c->pneed ? c->pbuf + c->plen : c->rbuf + c->rlen;
		size_t want = c->pneed ? c->pneed - c->plen : sizeof(c->rbuf) - c->rlen;
		ssize_t got = recv(c->fd, dst, want, MSG_DONTWAIT);

		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (got <= 0) {
			c->doomed = 1;
			return;
		}
		if (c->pneed) {
			c->plen += (size_t)got;
			if (c->plen < c->pneed)
				continue;
			c->pneed = 0;
			n++;
			if (c->head.type == KV_OFFD_CONFIG)
				reply_status(d, c, KV_OFFD_CONFIG,
					     configs_add(&d->configs, c->head.model_dir,
							 (const char *)c->pbuf, c->plen));
			else if (do_batch(d, c, &c->head, c->pbuf))
				protocol_error(d, c);
			else if (d->parked_head)
				wake_parked(d);
			continue;
		}
		c->rlen += (size_t)got;
		if (c->rlen < sizeof(c->rbuf))
			continue;
		c->rlen = 0;
		if (kv_offd_frame_decode(c->rbuf, sizeof(c->rbuf), &f) ||
		    (f.type & KV_OFFD_REPLY) || f.type == KV_OFFD_HELLO) {
			protocol_error(d, c);
			return;
		}
		if (f.type == KV_OFFD_BATCH || f.type == KV_OFFD_CONFIG) {
			if (payload_room(c, kv_offd_batch_bytes(&f))) {
				c->doomed = 1;
				return;
			}
			c->head = f;
			c->pneed = kv_offd_batch_bytes(&f);
			c->plen = 0;
			continue;
		}
		n++;
		dispatch(d, c, &f, 0);
		/* A commit, abort or release may have freed a slot. */
		if (d->parked_head)
			wake_parked(d);
	}
}

/* Same uid as the daemon, or the socket file's group among the peer's. */
static int peer_allowed(struct offd *d, int fd, const struct ucred *cred)
{
	gid_t groups[256];
	socklen_t len = sizeof(groups);
	struct stat st;

	if (cred->uid == geteuid())
		return 1;
	if (stat(d->socket_path, &st) < 0)
		return 0;
	if (cred->gid == st.st_gid)
		return 1;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) < 0)
		return 0;
	for (size_t i = 0; i < len / sizeof(gid_t); i++)
		if (groups[i] == st.st_gid)
			return 1;
	return 0;
}

static int send_hello(struct offd *d, int fd, int status)
{
	struct kv_offd_geometry geo = {
		.pool_bytes = d->pool_bytes,
		.slot_bytes = d->slot_bytes,
		.slots = d->nslots,
	};

	return kv_offd_hello_send(fd, status, d->memfd, &geo);
}

/* The peer of a new connection from pid: shared with its other
 * connections, or a new one; NULL without memory. */
static struct peer *peer_of(struct offd *d, pid_t pid)
{
	struct peer *p;

	for (struct client *c = d->clients; c; c = c->next)
		if (c->peer->pid == pid) {
			c->peer->refs++;
			return c->peer;
		}
	p = calloc(1, sizeof(*p));
	if (p) {
		p->pid = pid;
		p->refs = 1;
	}
	return p;
}

static void accept_clients(struct offd *d)
{
	for (;;) {
		struct ucred cred;
		socklen_t len = sizeof(cred);
		struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP };
		struct client *c;
		int fd = accept4(d->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
			    errno == ENOMEM)
				accept_pause(d, errno);
			else if (errno != EAGAIN && errno != EWOULDBLOCK)
				tool_err("cannot accept: %s", strerror(errno));
			return;
		}
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 ||
		    !peer_allowed(d, fd, &cred)) {
			d->st.refused++;
			tool_err("refusing peer uid %d pid %d", (int)cred.uid, (int)cred.pid);
			send_hello(d, fd, -EACCES);
			close(fd);
			continue;
		}
		c = calloc(1, sizeof(*c));
		if (!c || send_hello(d, fd, 0)) {
			free(c);
			close(fd);
			continue;
		}
		c->fd = fd;
		c->uid = cred.uid;
		c->pid = cred.pid;
		c->peer = peer_of(d, cred.pid);
		if (!c->peer) {
			free(c);
			close(fd);
			continue;
		}
		ev.data.ptr = c;
		if (epoll_ctl(d->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
			if (!--c->peer->refs)
				free(c->peer);
			free(c);
			close(fd);
			continue;
		}
		c->next = d->clients;
		if (d->clients)
			d->clients->prev = c;
		d->clients = c;
	}
}

/* ---- worker completions ---- */

/*
 * --write-policy always: queue the blocks the full queue refused at
 * commit, as far as it takes them now.  The scan resumes where the last
 * one stopped, so a completion costs a few slots, not the whole table.
 */
static void catch_up(struct offd *d)
{
	uint32_t start = d->catchup_at;

	for (int wrapped = 0; wrapped < 2; wrapped++) {
		for (uint32_t i = kv_slots_next_used(d->store, wrapped ? 0 : start);
		     i != KV_SLOT_NONE && (!wrapped || i < start);
		     i = kv_slots_next_used(d->store, i + 1)) {
			struct slot *s = &d->slots[i];

			/* A replaced block (out of the index) must not
			 * overwrite its successor's file. */
			if (s->wb_refused && s->state == SLOT_READY &&
			    kv_slots_indexed(d->store, i) &&
			    !(s->held & (1u << (d->ntiers - 1))) && !s->wb_pending &&
			    queue_write(d, i, d->ntiers - 1, 0)) {
				d->catchup_at = i;
				return;
			}
		}
	}
	d->catchup = 0;
}

static void wake_waiters(struct offd *d, struct client *w, int status, int detached)
{
	while (w) {
		struct client *next = w->next_waiter;

		w->next_waiter = NULL;
		w->wait = WAIT_NONE;
		if (!w->doomed) {
			if (!status || detached)
				dispatch(d, w, &w->saved, 1);
			else
				reply_status(d, w, KV_OFFD_LOOKUP, status);
			if (w->wait == WAIT_NONE)
				watch(d, w, 1);
		}
		w = next;
	}
}

static void load_done(struct offd *d, const struct job *j)
{
	struct slot *s = &d->slots[j->slot];
	struct client *waiters = s->waiters;
	int detached = !kv_slots_indexed(d->store, j->slot);

	s->waiters = NULL;
	d->loads_inflight--;
	for (unsigned t = 0; t < d->ntiers; t++)
		if (j->missed & (1u << t))
			d->tiers[t].st.misses++;
	if (!j->result) {
		struct ftier *ft = &d->tiers[j->tier];

		s->state = SLOT_READY;
		kv_slots_set_len(d->store, j->slot, j->len);
		size_hint_learn(d, &s->ref, j->len);
		s->sum = j->sum;
		s->held = 1u << j->tier;
		s->put_here = 0;
		ft->st.hits++;
		ft->st.read_bytes += j->len;
		tier_touch(d, j->tier, j->path);
		d->st.readthroughs++;
		d->st.readthrough_bytes += j->len;
		report_transfer(d, DIR_READTHROUGH, j->len, j->ns);
		if (!detached) {
			kv_slots_touch(d->store, j->slot);
			report_event(d, "BlockStored", TIER_NONE, j->slot);
			/* Served first, copied up after: the copy is a write
			 * like write-behind, skipped when the queue is full. */
			if (j->tier > 0 && d->tiers[0].capacity &&
			    kv_tier_promotes(d->promote, d->first_hits, j->path))
				queue_write(d, j->slot, 0, 1);
		}
	} else if (j->result == -EFBIG && j->len > j->cap &&
		   kv_slots_class(d->store, j->len) >= 0) {
		/* Larger than its model's last block: the waiters ask again
		 * and read it into a slot of its own size. */
		size_hint_learn(d, &s->ref, j->len);
		free_slot(d, j->slot);
		wake_waiters(d, waiters, 0, 1);
		return;
	} else {
		free_slot(d, j->slot);
		if (j->result != -ENOENT) {
			d->tiers[j->tier].st.errors++;
			tool_err("cannot read '%s': %s", j->path, kv_strerror(j->result));
		}
	}
	wake_waiters(d, waiters, j->result, detached);
	if (!j->result)
		try_release(d, j->slot);
}

static void drain_step(struct offd *d);

static void write_done(struct offd *d, const struct job *j)
{
	struct slot *s = &d->slots[j->slot];
	struct ftier *ft = &d->tiers[j->tier];

	s->wb_pending = 0;
	d->wb_inflight--;
	d->wb_landed++;
	d->wb_stalled = 0;
	if (!j->result) {
		d->said_full &= ~(1u << j->tier);	/* room again: say the next full */
		s->held |= 1u << j->tier;
		if (j->promote) {
			ft->st.promotions++;
		} else {
			d->st.spills++;
			d->st.spill_bytes += j->len;
			report_transfer(d, DIR_SPILL, j->len, j->ns);
		}
		tier_stored(d, j->tier, j->path, j->len);
	} else if (j->result == -KV_ECHECKSUM) {
		drop_altered(d, j->slot);
	} else if ((j->result == -ENOSPC || j->result == -EDQUOT) && !j->promote &&
		   j->tier + 1 < d->ntiers) {
		/* Full is full, whatever --tier's SIZE says: the write goes
		 * to the next tier down, which has the room or says so. */
		s->wb_floor = j->tier + 1;
		s->drain_tried = 0;	/* a drain queues it again, lower */
		ft->st.errors++;
		if (!(d->said_full & (1u << j->tier)))
			tool_err("tier %s is full (%s): writes pass to %s", tier_name(d, j->tier),
				 kv_strerror(j->result), tier_name(d, j->tier + 1));
		d->said_full |= 1u << j->tier;
	} else {
		int full = j->result == -ENOSPC || j->result == -EDQUOT;

		s->wb_failed = 1;
		ft->st.errors++;
		if (!j->promote)
			d->st.wb_errors++;
		/* A full tier is said once, not once a block, until it
		 * takes a write again; the counters keep the rest. */
		if (full && !(d->said_full & (1u << j->tier)))
			tool_err("tier %s is full (%s): blocks it cannot take stay in RAM "
				 "(counted in wb_errors)", tier_name(d, j->tier),
				 kv_strerror(j->result));
		else if (!full)
			tool_err("cannot write '%s': %s", j->path, kv_strerror(j->result));
		if (full)
			d->said_full |= 1u << j->tier;
	}
	try_release(d, j->slot);
}

static void jobs_done(struct offd *d)
{
	uint64_t n;
	struct job j;

	if (read(d->wr.efd, &n, sizeof(n)) < 0 && errno != EAGAIN)
		tool_err("cannot read eventfd: %s", strerror(errno));
	while (!writer_pop_done(d, &j)) {
		if (j.kind == JOB_LOAD)
			load_done(d, &j);
		else if (j.kind == JOB_PROBE)
			probe_done(d, &j);
		else if (j.kind == JOB_DEMOTE)
			tier_demoted(d, &j);
		else
			write_done(d, &j);
	}
	/* After the jobs: each one's handle reported before it finished. */
	report_tier_changes(d);
	if (d->draining) {
		drain_step(d);
	} else {
		/* Parked puts first: the blocks just written are clean
		 * victims for them, and catch_up filling the room those
		 * writes freed would make them drop instead. */
		wake_parked(d);
		if (d->catchup)
			catch_up(d);
	}
	/* Then a tier still over its capacity, which a full queue left so. */
	for (unsigned t = 0; t < d->ntiers; t++)
		tier_trim(d, t);
}

/*
 * A put waits on write-behind only while storage makes progress: once
 * writes have been in flight for a whole one-second tick and none
 * landed, get_slot treats the file tier as behind and drops instead,
 * until a write lands again.  Parked puts retry at once.
 */
static void stall_check(struct offd *d)
{
	if (d->tick_busy && d->wb_inflight && d->wb_landed == d->tick_landed) {
		d->wb_stalled = 1;
		if (!d->draining && d->parked_head)
			wake_parked(d);
	}
	d->tick_busy = d->wb_inflight > 0;
	d->tick_landed = d->wb_landed;
}

/* ALLOCs left uncommitted too long go back to the pool; a client's
 * later COMMIT of one gets -EINVAL. */
static void reclaim_allocs(struct offd *d)
{
	int64_t cut = kv_monotonic_ns() - ALLOC_TIMEOUT_S * 1000000000LL;
	int freed = 0;

	KV_SLOTS_EACH_USED(d->store, i) {
		if (d->slots[i].state != SLOT_ALLOC || d->slots[i].start_ns > cut)
			continue;
		free_slot(d, i);
		d->st.allocs_reclaimed++;
		freed = 1;
	}
	if (freed)
		wake_parked(d);
}

/* So that c's RELEASE of slot i says -ESTALE, not -EINVAL; bounded like
 * its pins: past that (or out of memory) a release says -EINVAL. */
static void remember_revoked(struct client *c, uint32_t i)
{
	if (c->nrevoked == c->cap_revoked) {
		size_t cap = c->cap_revoked ? 2 * c->cap_revoked : 8;
		uint32_t *r = cap > MAX_PINS_PER_CLIENT ? NULL :
			      realloc(c->revoked, cap * sizeof(*r));

		if (!r)
			return;
		c->revoked = r;
		c->cap_revoked = cap;
	}
	c->revoked[c->nrevoked++] = i;
}

/*
 * While puts are refused because every slot they could take is pinned,
 * pins held longer than --pin-timeout are taken back: the slot may be
 * reused, and the holder's RELEASE of it fails with -ESTALE.  A client
 * holding a block that long is not reading it, and without this one
 * client (or a few peers together) could keep a size class from every
 * other for good.
 */
static void revoke_pins(struct offd *d)
{
	int64_t cut = kv_monotonic_ns() - (int64_t)d->pin_timeout_ns;
	size_t revoked = 0;

	if (!d->pin_starved)
		return;
	d->pin_starved = 0;
	for (struct client *c = d->clients; c; c = c->next) {
		size_t n = 0;

		for (size_t k = 0; k < c->npins;) {
			uint32_t i = c->pins[k].slot;

			if (c->pins[k].start_ns > cut) {
				k++;
				continue;
			}
			remember_revoked(c, i);
			c->pins[k] = c->pins[--c->npins];
			unpin_slot(d, c->peer, i);
			try_release(d, i);
			n++;
		}
		if (n)
			tool_err("revoked %zu %s held over %.0f s by pid %ld: puts were "
				 "refused for want of an unpinned slot", n, tool_plural(n, "pin", "pins"),
				 (double)d->pin_timeout_ns / 1e9, (long)c->pid);
		revoked += n;
	}
	d->st.pins_revoked += revoked;
	if (revoked)
		wake_parked(d);
}

/* ---- shutdown ---- */

/* Queue every block not yet in the file tier, as far as the queue takes. */
static void drain_step(struct offd *d)
{
	KV_SLOTS_EACH_USED(d->store, i) {
		struct slot *s = &d->slots[i];

		if (s->state != SLOT_READY || s->held || s->wb_pending || s->drain_tried)
			continue;
		if (queue_write(d, i, s->wb_floor, 0))
			return;
		s->drain_tried = 1;
	}
}

static void begin_drain(struct offd *d)
{
	d->draining = 1;
	epoll_ctl(d->epfd, EPOLL_CTL_DEL, d->lfd, NULL);
	close(d->lfd);
	d->lfd = -1;
	unlink(d->socket_path);
	/* Clients close at the end of this loop turn, releasing their pins. */
	for (struct client *c = d->clients; c; c = c->next)
		c->doomed = 1;
	drain_step(d);
}

static void on_signal(struct offd *d)
{
	struct signalfd_siginfo si;
	int err;

	while (read(d->sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
		if (si.ssi_signo == SIGHUP) {
			err = report_open_events(d);
			if (err)
				tool_err("cannot open '%s': %s", d->events_path, kv_strerror(err));
		} else if (!d->draining) {
			begin_drain(d);
		}
	}
}

static int add_fd(struct offd *d, int fd, uint64_t tag)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = tag };

	return epoll_ctl(d->epfd, EPOLL_CTL_ADD, fd, &ev) < 0 ? -errno : 0;
}

int offd_serve(struct offd *d, int ready_fd)
{
	struct itimerspec its = {
		.it_interval = { .tv_sec = TICK_S },
		.it_value = { .tv_sec = TICK_S },
	};
	struct epoll_event evs[64];
	sigset_t mask;
	int err;

	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	d->epfd = epoll_create1(EPOLL_CLOEXEC);
	d->sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
	d->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (d->epfd < 0 || d->sfd < 0 || d->tfd < 0 ||
	    timerfd_settime(d->tfd, 0, &its, NULL) < 0)
		return -errno;
	if ((err = add_fd(d, d->lfd, TAG_LISTEN)) || (err = add_fd(d, d->sfd, TAG_SIGNAL)) ||
	    (err = add_fd(d, d->tfd, TAG_TIMER)) || (err = add_fd(d, d->wr.efd, TAG_DONE)))
		return err;
	report_write_metrics(d);
	/* A tier found over its capacity at start (a smaller SIZE than
	 * before) moves its excess down from the first turn on. */
	for (unsigned t = 0; t < d->ntiers; t++)
		tier_trim(d, t);
	if (ready_fd >= 0) {
		if (write(ready_fd, "\n", 1) != 1)
			tool_err("cannot write to --ready-fd: %s", strerror(errno));
		close(ready_fd);
	}
	while (!d->draining || d->wb_inflight || d->loads_inflight || d->probes_inflight) {
		int n = epoll_wait(d->epfd, evs, 64, -1);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		for (int k = 0; k < n; k++) {
			uint64_t tag = evs[k].data.u64, ticks;
			struct client *c;

			switch (tag) {
			case TAG_LISTEN:
				if (!d->draining)
					accept_clients(d);
				continue;
			case TAG_SIGNAL:
				on_signal(d);
				continue;
			case TAG_TIMER:
				if (read(d->tfd, &ticks, sizeof(ticks)) != (ssize_t)sizeof(ticks))
					continue;
				stall_check(d);
				accept_resume(d);
				reclaim_allocs(d);
				revoke_pins(d);
				if (++d->ticks % METRICS_TICKS)
					continue;
				report_write_metrics(d);
				continue;
			case TAG_DONE:
				jobs_done(d);
				continue;
			}
			c = evs[k].data.ptr;
			if (c->doomed)
				continue;
			if ((evs[k].events & EPOLLOUT) && c->outlen)
				flush_out(d, c);
			if (evs[k].events & EPOLLIN)
				client_read(d, c);
			else if (evs[k].events & (EPOLLHUP | EPOLLERR | EPOLLRDHUP))
				c->doomed = 1;
		}
		reap(d);
	}
	return 0;
}
