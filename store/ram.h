/*
 * ram.h - the RAM tier: READY chunks kept in memory under an admission
 * and eviction policy (store/policy.h), behind the tier interface (tier.h)
 * plus what only RAM does: hand out the chunk itself on a hit, and reserve
 * room for chunks while they are produced.
 *
 * RAM bound. Every chunk being produced reserves its length (ram_reserve)
 * when it enters the store's in-flight table, evicting READY chunks the
 * policy's way to make room; when even an empty tier would not hold it the
 * reservation overshoots and overcommits counts it. admit returns the
 * reservation and offers the chunk to the policy as if the other
 * reservations were occupied space (policy_admit_reserved), so READY +
 * reserved stays within the capacity whenever it can. A chunk that is not
 * offered gives its reservation back with ram_unreserve.
 *
 * One lock guards the map, the policy and the counters; a hit holds it for
 * a lookup and a list move only. A chunk in RAM points at its entry through
 * c->tier_priv, touched only under that lock. Evicted chunks go to the
 * caller's release list (tier.h): no chunk's bytes are freed under a lock.
 * Every function is thread-safe.
 */
#ifndef LARDER_RAM_H
#define LARDER_RAM_H

#include <stdint.h>

#include "store/chunk.h"
#include "store/policy.h"
#include "store/tier.h"

struct ram_tier;

extern const struct tier_ops ram_tier_ops;

/* What each unpinned chunk counts against the capacity besides its bytes:
 * its struct chunk (248 bytes, 256 as allocated), its entry (128), its map
 * slot and a small chunk's bytes as the allocator rounds them: about 450,
 * rounded up. (A tiny object's metadata is bounded apart: meta.h.) */
#define RAM_ENTRY_COST 512

/* An empty tier of capacity bytes; NULL when out of memory. Close it with
 * ram_tier_ops.close. */
struct ram_tier *ram_open(uint64_t capacity, enum policy_kind policy, double stale_after_s);

/* A READY chunk of this length, touched, referenced and its hits counted
 * (struct chunk), or NULL. One of
 * the wrong length (callers disagree about the object's size) cannot be
 * served: it is evicted onto *gone. */
struct chunk *ram_lookup(struct ram_tier *r, const struct chunk_id *id, size_t len, double now,
                         struct tier_gone **gone);

/* Reserves len bytes for a chunk about to be produced, evicting onto
 * *gone for room. */
void ram_reserve(struct ram_tier *r, uint64_t len, double now, struct tier_gone **gone);

/* Gives back a reservation that will not be admitted. */
void ram_unreserve(struct ram_tier *r, uint64_t len);

/*
 * Pins. A pinned id's chunk, once here, stays: it leaves the policy (so it
 * is never a victim), is admitted whatever the policy says, and its bytes
 * count against the capacity like reservations, so others make room for
 * it. An id may be pinned before its chunk arrives. Pins on one id count
 * up; the last unpin returns the chunk to the policy, as just used. A drop
 * (purge, a chunk of the wrong length) still removes a pinned chunk; the
 * pin stays, so the chunk is kept again when it comes back.
 *
 * ram_pin returns 0, -ENOSPC when the bytes of pinned ids would pass the
 * pin limit (0 until ram_pin_limit sets one), or -ENOMEM. len is the
 * chunk's length.
 */
void ram_pin_limit(struct ram_tier *r, uint64_t bytes);
int ram_pin(struct ram_tier *r, const struct chunk_id *id, uint64_t len);
void ram_unpin(struct ram_tier *r, const struct chunk_id *id);
bool ram_pinned(struct ram_tier *r, const struct chunk_id *id);

/*
 * Charges (a client key's max_resident_bytes). A chunk admitted with
 * chunk_origin.charge = n (1..RAM_CHARGE_MAX; 0: nobody) counts against
 * charge n for as long as it stays; a chunk keeps the charge it came with
 * (whoever else reads it later). The chunks of one charge are also ranked
 * by a policy of their own (the tier's kind): with a limit, a chunk that
 * would take the charge past it is admitted only by evicting that charge's
 * own lowest-ranked chunks (and not at all when it ranks below them all),
 * so the charge's bytes settle at the limit while other charges' stay.
 * Pinned chunks count against no charge.
 *
 * ram_charge_limit sets charge's limit (0: none), evicting its chunks
 * beyond a lower one onto *gone; -EINVAL for a charge out of range, or
 * -ENOMEM. ram_charged: the bytes of charge's chunks here.
 */
#define RAM_CHARGE_MAX STORE_CHARGE_MAX
int ram_charge_limit(struct ram_tier *r, unsigned charge, uint64_t max, double now,
                     struct tier_gone **gone);
uint64_t ram_charged(struct ram_tier *r, unsigned charge);

#endif
