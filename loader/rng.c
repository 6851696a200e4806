/*
 * loader/rng.c: the counter-based generator of a sample's randomness
 * (pinpipe/source.h): its state a mix of the seed, the epoch and the
 * sample's index, so that a sample draws the same numbers on any worker
 * and in any order; SplitMix64's output function.
 */
#include "config.h"

#include <stdint.h>

#include "common/common_impl.h"
#include "loader/loader_impl.h"

PP_API void pp_rng_init(struct pp_rng *rng, uint64_t seed, uint64_t epoch, uint64_t index)
{
	rng->state = pp_plan_mix(pp_plan_mix(pp_plan_mix(seed, 0x72616e64ull), epoch), index);
}

PP_API uint64_t pp_rng_next(struct pp_rng *rng)
{
	uint64_t z = (rng->state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

PP_API float pp_rng_uniform(struct pp_rng *rng)
{
	return (float)(pp_rng_next(rng) >> 40) * (1.0f / 16777216.0f);
}

PP_API uint64_t pp_rng_below(struct pp_rng *rng, uint64_t n)
{
	/* Lemire's multiply-shift, with the rejection that removes its bias */
	unsigned __int128 m;
	uint64_t lo;

	if (n == 0)
		return 0;
	m = (unsigned __int128)pp_rng_next(rng) * n;
	lo = (uint64_t)m;
	if (lo < n) {
		uint64_t t = -n % n;
		while (lo < t) {
			m = (unsigned __int128)pp_rng_next(rng) * n;
			lo = (uint64_t)m;
		}
	}
	return (uint64_t)(m >> 64);
}
