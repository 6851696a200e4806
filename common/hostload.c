/*
 * common/hostload.c: the run delay of the process's threads
 * (common/hostload.h), from /proc/self/task/TID/schedstat: "exec_ns
 * run_delay_ns timeslices".  A thread that ended between two readings takes
 * its delay with it: the figure is a lower bound, exact for the threads
 * alive at the second reading, which is where the programs take it (the
 * loader's and the device's threads still running).
 */
#include "config.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "common/hostload.h"

void pp_hostload_read(struct pp_hostload *r)
{
	struct timespec ts;
	struct dirent *d;
	DIR *dir;

	r->known = false;
	r->nthreads = 0;
	dir = opendir("/proc/self/task");
	while (dir != NULL && (d = readdir(dir)) != NULL && r->nthreads < PP_HOSTLOAD_MAX_THREADS) {
		char path[320];
		unsigned long long exec_ns, delay_ns;
		FILE *f;
		int n;

		if (d->d_name[0] < '0' || d->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/schedstat", d->d_name);
		if ((f = fopen(path, "r")) == NULL)
			continue;
		n = fscanf(f, "%llu %llu", &exec_ns, &delay_ns);
		fclose(f);
		if (n != 2)
			continue;
		r->tid[r->nthreads] = atoi(d->d_name);
		r->delay_ns[r->nthreads++] = delay_ns;
		r->known = true;
	}
	if (dir != NULL)
		closedir(dir);
	clock_gettime(CLOCK_MONOTONIC, &ts);
	r->wall_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

double pp_hostload_waiting(const struct pp_hostload *a, const struct pp_hostload *b)
{
	uint64_t delay = 0;

	if (!a->known || !b->known || b->wall_ns <= a->wall_ns)
		return NAN;
	for (uint32_t i = 0; i < b->nthreads; i++) {
		uint64_t before = 0;

		for (uint32_t j = 0; j < a->nthreads; j++)
			if (a->tid[j] == b->tid[i])
				before = a->delay_ns[j];
		delay += b->delay_ns[i] > before ? b->delay_ns[i] - before : 0;
	}
	return (double)delay / (double)(b->wall_ns - a->wall_ns);
}
